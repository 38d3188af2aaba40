"""NetworkPlugin API objects as the language core's :class:`Plugin` (files and builtins
are loaded by the language core's own loader; ``dmn compile`` uses that directly).

The controller and the webhook read NetworkPlugins from the API server and convert them
here, through the same strict document model and program merge as files.

A broken plugin is a diagnostic, never a traceback. A ``Builtin`` plugin whose contract
differs from the one this build ships for its handler is broken too (``E_CONFLICT``), so
compilation repeats the admission check for objects stored before or around it.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from dmn.api.served_yaml import served_document, source_label
from dmn.interpreter.checker import check_plugin
from dmn.interpreter.diagnostics import Code, Diagnostic, has_errors
from dmn.interpreter.documents import NetworkPlugin, parse_document
from dmn.interpreter.loader import Plugin, load_builtin_plugins, plugin_from_descriptor
from dmn.interpreter.source import SourceMap, YamlDocument
from dmn.opcodes.registry import default_registry
from dmn.opcodes.spec import OpcodeRegistry


def plugin_from_object(
    obj: Mapping[str, Any], file: str = "<api>", source: SourceMap | None = None
) -> tuple[Plugin | None, list[Diagnostic]]:
    """A NetworkPlugin API object as a checked-shape :class:`Plugin` (status ignored).

    ``source`` gives positions for the object's paths (see :mod:`dmn.api.served_yaml`);
    without it every position is the start of ``file``."""
    # Server-managed metadata (uid, resourceVersion, ...) is not part of the contract.
    data = {k: v for k, v in obj.items() if k not in ("status", "metadata")}
    data["metadata"] = {"name": (obj.get("metadata") or {}).get("name")}
    doc = YamlDocument(data=data, source=source or SourceMap(file))
    model, diagnostics = parse_document(doc)
    if not isinstance(model, NetworkPlugin):
        return None, diagnostics
    plugin, merge = plugin_from_descriptor(model, doc.source)
    return plugin, [*diagnostics, *merge, *_builtin_mismatch(plugin)]


def checked_plugin_object(
    obj: Mapping[str, Any], registry: OpcodeRegistry
) -> tuple[Plugin | None, list[Diagnostic]]:
    """:func:`plugin_from_object` then the language checker on the whole plugin, the check
    the controller's status and the webhook both make. When it fails, the diagnostics carry
    line and column in the served object's YAML rendering (:mod:`dmn.api.served_yaml`; the
    object is rendered and re-parsed only then).

    A plugin that passes is remembered by its content (:class:`_PassedChecks`): the same
    plugin checked again — after its own status write, by the webhook and the controller,
    or by another controller in this process — is not checked again."""
    key = _PASSED.key(obj, registry)
    if key is not None:
        hit = _PASSED.get(key)
        if hit is not None:
            return hit[0], list(hit[1])
    name = str((obj.get("metadata") or {}).get("name", ""))
    file = source_label("NetworkPlugin", name)

    def run(source: SourceMap | None) -> tuple[Plugin | None, list[Diagnostic]]:
        plugin, diagnostics = plugin_from_object(obj, file, source)
        if plugin is not None and not diagnostics:
            diagnostics = check_plugin(plugin, registry)
        return plugin, diagnostics

    plugin, diagnostics = run(None)
    if plugin is None or has_errors(diagnostics):
        plugin, diagnostics = run(served_document(obj, "NetworkPlugin").source)
    elif key is not None:
        _PASSED.put(key, (plugin, tuple(diagnostics)))
    return plugin, diagnostics


@dataclass
class _PassedChecks:
    """Checks that passed, by what the check reads: the object less ``status`` and every
    ``metadata`` field but ``name`` (:func:`plugin_from_object` drops the rest), digested.

    A passing check's diagnostics (warnings at most) carry no served-YAML positions, so
    they depend on that content alone; a failing one's do (the served rendering includes
    metadata) and is never kept. Only for the process's :func:`default_registry` (built
    once, never changed); the builtins a check compares with are the process's own too.
    Bounded (oldest out first); safe from any thread."""

    kept: int = 256
    _entries: dict[str, Converted] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def key(self, obj: Mapping[str, Any], registry: OpcodeRegistry) -> str | None:
        if registry is not default_registry():
            return None
        content = {k: v for k, v in obj.items() if k not in ("status", "metadata")}
        content["metadata"] = {"name": (obj.get("metadata") or {}).get("name")}
        try:
            text = json.dumps(content, sort_keys=True, separators=(",", ":"))
        except (TypeError, ValueError):
            return None
        return hashlib.sha256(text.encode()).hexdigest()

    def get(self, key: str) -> Converted | None:
        with self._lock:
            return self._entries.get(key)

    def put(self, key: str, value: Converted) -> None:
        with self._lock:
            while len(self._entries) >= self.kept:
                del self._entries[next(iter(self._entries))]
            self._entries[key] = value


_PASSED = _PassedChecks()


def same_contract(a: Plugin, b: Plugin) -> bool:
    """Equal contracts. ``Plugin.contract_digest`` writes every default out, so an API
    server's stored copy (CRD defaults made explicit) and the shipped files agree."""
    return a.contract_digest == b.contract_digest


def _builtin_mismatch(plugin: Plugin) -> list[Diagnostic]:
    """A ``Builtin`` plugin must carry exactly the contract this build implements for its
    handler (design §4.2): a stored or admission-bypassing manifest cannot grant a
    builtin effects, ports or config it does not implement."""
    impl = plugin.descriptor.spec.implementation
    if impl.type != "Builtin":
        return []
    shipped = load_builtin_plugins().get(impl.handler or "")
    if shipped is not None and same_contract(shipped, plugin):
        return []
    if shipped is None:
        message = f"Builtin handler {impl.handler!r} is not implemented by this build"
    else:
        message = (
            f"Builtin handler {impl.handler!r}: the descriptor differs from the contract"
            f" this build implements ({shipped.contract_digest})"
        )
    return [Diagnostic(Code.E_CONFLICT, message, path="spec.implementation.handler")]


T = TypeVar("T")


@dataclass
class StoredStateCache(Generic[T]):
    """Values computed from one stored state of an API object, reused for that state only.

    The controller converts every NetworkPlugin on every topology reconcile (a slice or
    plugin event reconciles every topology) and re-checks every plugin's status on every
    resync: re-parsing and re-digesting unchanged plugins was 28 % of the controller
    worker's py-spy samples with 30 topologies applied on the host, and re-checking the 9
    builtins cost 38 CPU-ms per resync pass. The API server gives each stored state
    of an object its own ``resourceVersion``, so (name, uid, resourceVersion) names exactly
    one content; an object without both (not from an API server) is computed every time.
    Bounded (oldest out first); safe from any thread."""

    kept: int = 256
    _entries: dict[tuple[str, str, str], T] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def value(self, obj: Mapping[str, Any], make: Callable[[], T]) -> T:
        meta = obj.get("metadata") or {}
        uid, version = meta.get("uid"), meta.get("resourceVersion")
        if not uid or not version:
            return make()
        key = (str(meta.get("name", "")), str(uid), str(version))
        with self._lock:
            if key in self._entries:
                return self._entries[key]
        made = make()
        with self._lock:
            while len(self._entries) >= self.kept:
                del self._entries[next(iter(self._entries))]
            self._entries[key] = made
        return made


Converted = tuple[Plugin | None, tuple[Diagnostic, ...]]
"""A plugin and its diagnostics, frozen for a :class:`StoredStateCache`."""


def _frozen(result: tuple[Plugin | None, list[Diagnostic]]) -> Converted:
    return result[0], tuple(result[1])


def cached_plugin_object(
    cache: StoredStateCache[Converted], obj: Mapping[str, Any], file: str
) -> tuple[Plugin | None, list[Diagnostic]]:
    """:func:`plugin_from_object` through ``cache``."""
    plugin, problems = cache.value(obj, lambda: _frozen(plugin_from_object(obj, file)))
    return plugin, list(problems)


def cached_checked_plugin_object(
    cache: StoredStateCache[Converted], obj: Mapping[str, Any], registry: OpcodeRegistry
) -> tuple[Plugin | None, list[Diagnostic]]:
    """:func:`checked_plugin_object` through ``cache`` (one cache per registry)."""
    plugin, problems = cache.value(obj, lambda: _frozen(checked_plugin_object(obj, registry)))
    return plugin, list(problems)


def plugins_from_objects(
    objects: Iterable[Mapping[str, Any]], cache: StoredStateCache[Converted] | None = None
) -> tuple[dict[str, Plugin], dict[str, list[Diagnostic]]]:
    """Valid plugins by name, and the diagnostics of the invalid ones by name (through
    ``cache`` when given)."""
    good: dict[str, Plugin] = {}
    bad: dict[str, list[Diagnostic]] = {}
    for obj in objects:
        name = str((obj.get("metadata") or {}).get("name", ""))
        file = f"networkplugin/{name}"
        if cache is None:
            plugin, problems = plugin_from_object(obj, file)
        else:
            plugin, problems = cached_plugin_object(cache, obj, file)
        if plugin is None or problems:
            bad[name] = problems
        else:
            good[plugin.name] = plugin
    return good, bad
