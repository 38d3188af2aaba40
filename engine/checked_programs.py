"""Checked programs by digest: binding does not re-run the checker for a plugin contract,
hook and config it already checked clean (issue 15, "keep what does not change warm").

The checker is a pure function of (plugin contract, hook, opcode registry, validated config),
so its verdict can be remembered under the plugin's contract digest (SHA-256 over the
canonical descriptor and programs), the hook, the registry instance and the canonical config.
Only clean verdicts are kept: a program with errors is checked again each time, so its
diagnostics always carry the spans of the document actually given. The contract digest of a
loaded :class:`Plugin` object is computed once per object (plugins are immutable once
loaded). Both tables are bounded; when full they start over.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from dmn.interpreter.canonical_json import canonical_json
from dmn.interpreter.loader import Plugin
from dmn.opcodes.spec import OpcodeRegistry

MAX_ENTRIES = 1024


class CheckedPrograms:
    """Remembers clean checker verdicts; thread-safe (gRPC and NRI threads bind)."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self._clean: set[tuple[str, str, int, bytes]] = set()
        self._digests: dict[int, tuple[Plugin, str]] = {}
        self._registries: dict[int, OpcodeRegistry] = {}
        self._lock = threading.Lock()

    def digest(self, plugin: Plugin) -> str:
        """``plugin.contract_digest``, computed once per loaded plugin object."""
        with self._lock:
            known = self._digests.get(id(plugin))
            if known is not None and known[0] is plugin:
                return known[1]
        value = plugin.contract_digest
        with self._lock:
            if len(self._digests) >= self.max_entries:
                self._digests.clear()
            self._digests[id(plugin)] = (plugin, value)  # holds the object: ids stay unique
        return value

    def _key(
        self, plugin: Plugin, hook: str, registry: OpcodeRegistry, config: Mapping[str, Any]
    ) -> tuple[str, str, int, bytes]:
        with self._lock:
            self._registries.setdefault(id(registry), registry)  # keeps the id unique too
        return (self.digest(plugin), hook, id(registry), canonical_json(dict(config)))

    def is_clean(
        self, plugin: Plugin, hook: str, registry: OpcodeRegistry, config: Mapping[str, Any]
    ) -> bool:
        key = self._key(plugin, hook, registry, config)
        with self._lock:
            return key in self._clean

    def remember_clean(
        self, plugin: Plugin, hook: str, registry: OpcodeRegistry, config: Mapping[str, Any]
    ) -> None:
        key = self._key(plugin, hook, registry, config)
        with self._lock:
            if len(self._clean) >= self.max_entries:
                self._clean.clear()
            self._clean.add(key)


CHECKED = CheckedPrograms()
"""The process-wide table :func:`dmn.engine.binder.bind_program` uses."""
