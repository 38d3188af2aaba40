"""Clean checker verdicts reused for configs the checker reads the same way.

The checker's answer for a plugin and a validated config depends on the config only through
the fields the guard evaluator and the scenario analysis read (``call.config.<field>`` in a
``when``, ``requiredWhen`` or ``forbiddenWhen``); interface names, VLAN ids and MTUs are
checked by config validation, not by the program checks. The topology compiler checks every
step's plugin with that step's config, and a topology of 20 VLAN steps over one plugin
differs from step to step only in fields no guard reads, so the same verdict was computed 20
times (issue 15).

:class:`CleanVerdicts` runs the check with the config wrapped in :class:`ConfigReads`, which
records every field whose value was read (a miss too: absence is a value) and every field
whose presence alone was asked, and remembers a *clean* verdict with those reads. A later
config of the same plugin whose values for exactly those fields are the same (same JSON
value, or same presence where only presence was asked) gets the clean verdict without
re-running the checks. Anything that iterates the config (``len``, keys, items) makes the
verdict depend on all of it, and it is not remembered. Verdicts with diagnostics are never
remembered: their text and positions are the checker's to produce, and they are rare.

Scope: one caller's. The compiler makes one per compile unless its caller hands it one; the
controller's topology reconciler keeps one for its lifetime (a topology is compiled again
after its own status write and on every resync, with the same plugin objects from its
stored-state cache), bounded by ``kept_plugins`` and ``kept_reads``. Entries hold the plugin
and registry they were computed for, so an identity is never reused for another object.
Safe from any thread (the checks themselves run outside the lock).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from dmn.interpreter.diagnostics import Diagnostic
from dmn.interpreter.loader import Plugin
from dmn.opcodes.spec import OpcodeRegistry

_ABSENT = "\x00absent"
_PRESENT = "\x00present"
"""Recorded values that are not JSON text: a field read and absent, and a field whose
presence alone was asked (``in``)."""


def _value_text(config: Mapping[str, Any], name: str) -> str:
    if name not in config:
        return _ABSENT
    return json.dumps(config[name], sort_keys=True, separators=(",", ":"))


def _presence_text(config: Mapping[str, Any], name: str) -> str:
    return _PRESENT if name in config else _ABSENT


class ConfigReads(Mapping[str, Any]):
    """A read-only view of a config that records which fields' values were read, which
    fields' presence alone was asked, and whether the config as a whole was looked at
    (iterated or measured)."""

    __slots__ = ("_data", "probed", "read", "whole")

    def __init__(self, data: Mapping[str, Any]) -> None:
        self._data = data
        self.read: set[str] = set()
        self.probed: set[str] = set()
        self.whole = False

    def __getitem__(self, key: str) -> Any:
        self.read.add(key)
        return self._data[key]

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return self._data.get(key, default)

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self.probed.add(key)
        return key in self._data

    def __iter__(self) -> Iterator[str]:
        self.whole = True
        return iter(self._data)

    def __len__(self) -> int:
        self.whole = True
        return len(self._data)

    def reads(self) -> dict[str, str]:
        """What the verdict depends on: per field, its JSON value or its presence."""
        out = {name: _presence_text(self._data, name) for name in self.probed}
        out.update((name, _value_text(self._data, name)) for name in self.read)
        return out


def _same_reads(config: Mapping[str, Any], reads: Mapping[str, str]) -> bool:
    for name, text in reads.items():
        if text == _PRESENT:
            if name not in config:
                return False
        elif _value_text(config, name) != text:  # _ABSENT included
            return False
    return True


class CleanVerdicts:
    """Clean :func:`~dmn.interpreter.checker.check_validated` verdicts of one scope.

    ``kept_plugins``: at most that many plugin/registry pairs are remembered (oldest out
    first; None: no bound, for a scope as short as one compile); ``kept_reads``: at most
    that many read sets per pair (oldest out first)."""

    def __init__(self, kept_plugins: int | None = None, kept_reads: int = 64) -> None:
        self._clean: dict[tuple[int, int], tuple[Plugin, OpcodeRegistry, list[dict[str, str]]]] = {}
        self._kept_plugins = kept_plugins
        self._kept_reads = kept_reads
        self._lock = threading.Lock()
        self.reused = 0
        self.checked = 0

    def check(
        self, plugin: Plugin, registry: OpcodeRegistry, config: Mapping[str, Any]
    ) -> list[Diagnostic]:
        """What :func:`~dmn.interpreter.checker.check_validated` answers for ``config`` (the
        normalised output of a clean ``validate_config`` against this plugin's schema)."""
        from dmn.interpreter.checker import check_validated

        key = (id(plugin), id(registry))
        with self._lock:
            entry = self._clean.get(key)
            if entry is not None and any(_same_reads(config, reads) for reads in entry[2]):
                self.reused += 1
                return []
        recorder = ConfigReads(config)
        found = check_validated(plugin, registry, recorder)
        if found or recorder.whole:
            with self._lock:
                self.checked += 1
            return found
        with self._lock:
            self.checked += 1
            entry = self._clean.get(key)
            if entry is None:
                if self._kept_plugins is not None:
                    while self._clean and len(self._clean) >= self._kept_plugins:
                        del self._clean[next(iter(self._clean))]
                entry = self._clean[key] = (plugin, registry, [])
            reads = entry[2]
            while reads and len(reads) >= self._kept_reads:
                del reads[0]
            reads.append(recorder.reads())
        return found
