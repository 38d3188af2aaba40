"""Plugins as a NetworkTopologyRevision pinned them: rebuilt, digest-verified, never trusted.

Why: an administrator's ``EffectProgram`` plugin exists on a node only inside the
revisions that use it. The compiler locks each plugin into the revision as
``{name, contractDigest, descriptor: Plugin.to_json()}`` — the canonical descriptor plus
every hook program — and revisions are immutable. A node agent rebuilds the plugin from
that pin through the same strict document model as files, and accepts it only when its
own recomputed contract digest equals the pinned one (``E_CONTRACT_MISMATCH``
otherwise). Whoever wrote the revision (the controller, or anyone bypassing it) gains
nothing: the caller must still re-check the rebuilt plugin with its own checker and
opcode registry (:func:`dmn.interpreter.checker.check_plugin`) before binding it.

Contract: :func:`plugin_from_pin` is pure and never raises for bad input; it returns the
plugin or the diagnostics (reason codes) that refuse it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from dmn.interpreter.diagnostics import Code, Diagnostic
from dmn.interpreter.documents import NetworkPlugin, parse_document
from dmn.interpreter.loader import Plugin, plugin_from_descriptor
from dmn.interpreter.source import SourceMap, YamlDocument


def plugin_from_pin(pin: Mapping[str, Any]) -> tuple[Plugin | None, list[Diagnostic]]:
    """The plugin a revision's ``spec.plugins[]`` entry pins, or why it is refused."""
    plugin, problems = rebuild_pinned(pin)
    if plugin is None:
        return None, problems
    name = str(pin.get("name", ""))
    pinned = str(pin.get("contractDigest", ""))
    if plugin.contract_digest != pinned:
        message = (
            f"pinned plugin {name!r} digests to {plugin.contract_digest}, "
            f"the revision pins {pinned}"
        )
        return None, [Diagnostic(Code.E_CONTRACT_MISMATCH, message)]
    return plugin, []


def rebuild_pinned(pin: Mapping[str, Any]) -> tuple[Plugin | None, list[Diagnostic]]:
    """The plugin a pin's content describes, without comparing digests (see above)."""
    name = str(pin.get("name", ""))
    where = f"revision:plugins/{name}"
    content = pin.get("descriptor")
    if not isinstance(content, Mapping) or not isinstance(content.get("descriptor"), Mapping):
        return None, [Diagnostic(Code.E_SCHEMA, f"pinned plugin {name!r} has no descriptor")]
    descriptor: dict[str, Any] = copy.deepcopy(dict(content["descriptor"]))
    programs = content.get("programs") or {}
    if not isinstance(programs, Mapping):
        return None, [Diagnostic(Code.E_SCHEMA, f"pinned plugin {name!r}: programs malformed")]
    spec = descriptor.get("spec")
    if not isinstance(spec, dict):
        return None, [Diagnostic(Code.E_SCHEMA, f"pinned plugin {name!r} has no spec")]
    spec["hooks"] = {**(spec.get("hooks") or {}), **copy.deepcopy(dict(programs))}
    doc = YamlDocument(data=descriptor, source=SourceMap(where))
    model, problems = parse_document(doc)
    if not isinstance(model, NetworkPlugin) or problems:
        return None, problems or [Diagnostic(Code.E_SCHEMA, f"{name!r} is not a NetworkPlugin")]
    plugin, merge = plugin_from_descriptor(model, doc.source)
    if merge:
        return None, merge
    if plugin.name != name:
        message = f"pinned plugin {name!r} describes {plugin.name!r}"
        return None, [Diagnostic(Code.E_CONTRACT_MISMATCH, message)]
    return plugin, []
