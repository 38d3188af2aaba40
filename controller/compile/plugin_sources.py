"""NetworkPlugin API objects as the language core's :class:`Plugin` (files and builtins
are loaded by the language core's own loader; ``dmn compile`` uses that directly).

The controller and the webhook read NetworkPlugins from the API server and convert them
here, through the same strict document model and program merge as files.

A broken plugin is a diagnostic, never a traceback. A ``Builtin`` plugin whose contract
differs from the one this build ships for its handler is broken too (``E_CONFLICT``), so
compilation repeats the admission check for objects stored before or around it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from dmn.interpreter.diagnostics import Code, Diagnostic
from dmn.interpreter.documents import NetworkPlugin, parse_document
from dmn.interpreter.loader import Plugin, load_builtin_plugins, plugin_from_descriptor
from dmn.interpreter.source import SourceMap, YamlDocument


def plugin_from_object(
    obj: Mapping[str, Any], file: str = "<api>"
) -> tuple[Plugin | None, list[Diagnostic]]:
    """A NetworkPlugin API object as a checked-shape :class:`Plugin` (status ignored)."""
    # Server-managed metadata (uid, resourceVersion, ...) is not part of the contract.
    data = {k: v for k, v in obj.items() if k not in ("status", "metadata")}
    data["metadata"] = {"name": (obj.get("metadata") or {}).get("name")}
    doc = YamlDocument(data=data, source=SourceMap(file))
    model, diagnostics = parse_document(doc)
    if not isinstance(model, NetworkPlugin):
        return None, diagnostics
    plugin, merge = plugin_from_descriptor(model, doc.source)
    return plugin, [*diagnostics, *merge, *_builtin_mismatch(plugin)]


def same_contract(a: Plugin, b: Plugin) -> bool:
    """Equal contracts. ``Plugin.contract_digest`` writes every default out, so an API
    server's stored copy (CRD defaults made explicit) and the shipped files agree."""
    return a.contract_digest == b.contract_digest


def _builtin_mismatch(plugin: Plugin) -> list[Diagnostic]:
    """A ``Builtin`` plugin must carry exactly the contract this build implements for its
    handler (seed 000 §4.3): a stored or admission-bypassing manifest cannot grant a
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


def plugins_from_objects(
    objects: Iterable[Mapping[str, Any]],
) -> tuple[dict[str, Plugin], dict[str, list[Diagnostic]]]:
    """Valid plugins by name, and the diagnostics of the invalid ones by name."""
    good: dict[str, Plugin] = {}
    bad: dict[str, list[Diagnostic]] = {}
    for obj in objects:
        name = str((obj.get("metadata") or {}).get("name", ""))
        plugin, problems = plugin_from_object(obj, f"networkplugin/{name}")
        if plugin is None or problems:
            bad[name] = problems
        else:
            good[plugin.name] = plugin
    return good, bad
