"""Plan preview (``dmn explain``): what a NetworkTopology will do on a node, step by step.

Pure, like the compiler it builds on: the topology is compiled (so a topology that would be
rejected is explained by its diagnostics, never by a guess), then every hook program of every
step is bound by the real binder to a *placeholder call* — one stand-in handle per granted
device (the port's type, link type and accesses; ``minItems`` of them, at least one), the
exports of the steps it reads, and a stand-in sandbox for ``connect``. What comes out is what
the node agent would journal and run: the effects after guards and ``forEach`` for this
config, in order, with parameters bound from the step's config, on which kind of device and
in which namespace, and what undo will do (removal undoes ``connect``, unprepare undoes
``prepare``, each in reverse order, from the journal record).

The placeholder handles carry no identity; nothing here reads a node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dmn.controller.compile.compiler import compile_topology
from dmn.engine.binder import Call, bind_program
from dmn.engine.bound import BoundEffect, BoundInput, BoundProgram, EffectOutputRef
from dmn.interpreter.diagnostics import Diagnostic
from dmn.interpreter.documents import InputPort
from dmn.interpreter.guards import holds
from dmn.interpreter.loader import Plugin
from dmn.interpreter.source import SourceMap
from dmn.opcodes.registry import default_registry
from dmn.opcodes.spec import OpcodeRegistry
from dmn.vocabulary.handles import HOST_SCOPE, Handle, NamespaceIdentity, Scope
from dmn.vocabulary.terms import Access, HandleType, LinkType, ScopeKind

#: The stand-in for the Pod sandbox a connect call is verified against.
PLACEHOLDER_SANDBOX = Scope(ScopeKind.SANDBOX, NamespaceIdentity(0, 0, "explain"))
NAMESPACES = {ScopeKind.HOST: "host", ScopeKind.SANDBOX: "pod"}


@dataclass(frozen=True)
class PortUse:
    """One input of an effect: which port, what kind of device, where it lives, from where."""

    port: str
    device: str
    namespace: str
    source: str

    def to_json(self) -> dict[str, str]:
        return {
            "port": self.port,
            "device": self.device,
            "namespace": self.namespace,
            "from": self.source,
        }


@dataclass(frozen=True)
class EffectPlan:
    id: str
    kind: str
    summary: str
    changes: str
    undo: str
    inputs: tuple[PortUse, ...]
    parameters: Mapping[str, Any]
    recovery: str

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "summary": self.summary,
            "changes": self.changes,
            "inputs": [i.to_json() for i in self.inputs],
            "parameters": dict(self.parameters),
            "recovery": self.recovery,
            "undo": self.undo,
        }


@dataclass(frozen=True)
class HookPlan:
    step: str
    plugin: str
    hook: str
    effects: tuple[EffectPlan, ...]
    undo_hook: str
    exports: Mapping[str, str]

    def undo_order(self) -> list[str]:
        return [e.id for e in reversed(self.effects)]

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "plugin": self.plugin,
            "hook": self.hook,
            "effects": [e.to_json() for e in self.effects],
            "exports": dict(self.exports),
            "undo": {"hook": self.undo_hook, "order": self.undo_order()},
        }


@dataclass
class Explanation:
    topology: str = ""
    order: list[str] = field(default_factory=list)
    configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: per root step, the config fields a workload may set in its claim (WorkloadParameters)
    workload_settable: dict[str, list[str]] = field(default_factory=dict)
    hooks: list[HookPlan] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)

    def removal_order(self) -> list[str]:
        """Steps whose connect is undone at Pod removal, last connected first."""
        connected = {h.step for h in self.hooks if h.hook == "connect" and h.effects}
        return [s for s in reversed(self.order) if s in connected]

    def to_json(self) -> dict[str, Any]:
        return {
            "topology": self.topology,
            "order": list(self.order),
            "removalOrder": self.removal_order(),
            "steps": [
                {
                    "id": sid,
                    "config": self.configs.get(sid, {}),
                    "workloadSettable": self.workload_settable.get(sid, []),
                    "hooks": [h.to_json() for h in self.hooks if h.step == sid],
                }
                for sid in self.order
            ],
        }


def _device_text(handle_type: str, link_type: str | None) -> str:
    return f"{handle_type} ({link_type})" if link_type else handle_type


def _placeholder(hid: str, port: InputPort, scope: Scope, link: LinkType | None = None) -> Handle:
    link_type = link if link is not None else LinkType(port.link_type) if port.link_type else None
    return Handle(
        id=hid,
        type=HandleType(port.type),
        inventory_id=f"<{hid}>",
        scope=scope,
        accesses=frozenset(Access(a) for a in port.accesses()),
        link_type=link_type,
    )


class _Planner:
    def __init__(self, plugins: Mapping[str, Plugin], registry: OpcodeRegistry) -> None:
        self.plugins = plugins
        self.registry = registry
        #: step id -> hook -> bound program
        self.bound: dict[str, dict[str, BoundProgram]] = {}
        #: (step, hook) -> placeholder handle id -> human "from"
        self.origins: dict[str, str] = {}
        self.diagnostics: list[Diagnostic] = []

    # ---- placeholders for what a step reads
    def _on(self, port: InputPort, config: Mapping[str, Any]) -> bool:
        return port.when is None or holds(port.when, config)

    def _export_scope(self, step: str, port: str) -> tuple[Scope, LinkType | None]:
        """Where an earlier step's export lives, from the effect (or grant) that made it."""
        programs = self.bound.get(step, {})
        program = programs.get("connect") or programs.get("prepare")
        values: Sequence[BoundInput] = program.exports.get(port, ()) if program else ()
        for value in values:
            if isinstance(value, Handle):
                return value.scope, value.link_type
            effect = (
                next((e for e in program.effects if e.id == value.effect), None)
                if program
                else None
            )
            spec = self.registry.get(effect.kind) if effect else None
            out = spec.outputs.get(value.port) if spec else None
            if out is not None:
                link = (
                    next(iter(out.link_types))
                    if out.link_types and len(out.link_types) == 1
                    else None
                )
                scope = PLACEHOLDER_SANDBOX if out.scope is ScopeKind.SANDBOX else HOST_SCOPE
                return scope, link
        return PLACEHOLDER_SANDBOX, None

    def _allocation(
        self, step: str, plugin: Plugin, config: Mapping[str, Any]
    ) -> dict[str, tuple[Handle, ...]]:
        out: dict[str, tuple[Handle, ...]] = {}
        for name, port in (plugin.descriptor.spec.allocation or {}).items():
            if not self._on(port, config):
                continue
            handles = []
            for k in range(max(port.min_items, 1)):
                hid = f"{step}.allocation.{name}[{k}]"
                handles.append(_placeholder(hid, port, HOST_SCOPE))
                self.origins[hid] = f"allocation {name} (the DRA-allocated device)"
            out[name] = tuple(handles)
        return out

    def _inputs(
        self, step: str, plugin: Plugin, config: Mapping[str, Any], wiring: Mapping[str, Any]
    ) -> dict[str, tuple[Handle, ...]]:
        out: dict[str, tuple[Handle, ...]] = {}
        for name, port in (plugin.descriptor.spec.inputs or {}).items():
            if not self._on(port, config):
                continue
            binding = wiring.get(name)
            refs = binding if isinstance(binding, list) else [binding] if binding else []
            handles = []
            for k, ref in enumerate(refs):
                source = str(ref.get("from", "")) if isinstance(ref, Mapping) else ""
                producer, _, export = source.partition(".")
                scope, link = self._export_scope(producer, export)
                hid = f"{step}.inputs.{name}[{k}]"
                handles.append(_placeholder(hid, port, scope, link))
                self.origins[hid] = f"step {producer} output {export}"
            out[name] = tuple(handles)
        return out

    def _prepared(self, step: str) -> dict[str, tuple[Handle, ...]]:
        program = self.bound.get(step, {}).get("prepare")
        if program is None:
            return {}
        out: dict[str, tuple[Handle, ...]] = {}
        for name, values in program.exports.items():
            handles = []
            for k, value in enumerate(values):
                if isinstance(value, Handle):
                    handle = value
                else:
                    effect = next(e for e in program.effects if e.id == value.effect)
                    spec = self.registry.get(effect.kind)
                    port = spec.outputs[value.port] if spec else None
                    hid = f"{step}.prepared.{name}[{k}]"
                    link = (
                        next(iter(port.link_types))
                        if port and port.link_types and len(port.link_types) == 1
                        else None
                    )
                    handle = Handle(
                        id=hid,
                        type=port.type if port else HandleType.KERNEL_INTERFACE,
                        inventory_id=f"<{hid}>",
                        scope=HOST_SCOPE,
                        accesses=port.grants if port else frozenset(),
                        link_type=link,
                    )
                    self.origins[hid] = f"prepare effect {effect.id} output {value.port}"
                handles.append(handle)
            out[name] = tuple(handles)
        return out

    # ---- describing bound effects
    def _use(self, port: str, value: BoundInput, program: BoundProgram) -> PortUse:
        if isinstance(value, Handle):
            link = value.link_type.value if value.link_type else None
            return PortUse(
                port,
                _device_text(value.type.value, link),
                NAMESPACES[value.scope.kind],
                self.origins.get(value.id, value.id),
            )
        return self._output_use(port, value, program)

    def _output_use(self, port: str, ref: EffectOutputRef, program: BoundProgram) -> PortUse:
        effect = next((e for e in program.effects if e.id == ref.effect), None)
        spec = self.registry.get(effect.kind) if effect else None
        out = spec.outputs.get(ref.port) if spec else None
        where = f"effect {ref.effect} output {ref.port}"
        if ref.index is not None:
            where += f"[{ref.index}]"
        if out is None:
            return PortUse(port, "?", "?", where)
        links = sorted(t.value for t in out.link_types) if out.link_types else []
        device = _device_text(out.type.value, "/".join(links) or None)
        namespace = NAMESPACES[out.scope] if out.scope else "host or pod"
        return PortUse(port, device, namespace, where)

    def _effect(self, effect: BoundEffect, program: BoundProgram) -> EffectPlan:
        spec = self.registry.get(effect.kind)
        uses = tuple(
            self._use(port, value, program)
            for port, values in sorted(effect.inputs.items())
            for value in values
        )
        return EffectPlan(
            id=effect.id,
            kind=effect.kind,
            summary=spec.summary if spec else "",
            changes=spec.changes if spec else "",
            undo=spec.undo if spec else "",
            inputs=uses,
            parameters=dict(effect.parameters),
            recovery=effect.recovery,
        )

    def plan(self, step: str, plugin: Plugin, hook: str, call: Call) -> HookPlan | None:
        result = bind_program(plugin, hook, call, self.registry)
        if isinstance(result, list):
            self.diagnostics += result
            return None
        self.bound.setdefault(step, {})[hook] = result
        exports = {
            name: "; ".join(self._use(name, v, result).device for v in values)
            for name, values in sorted(result.exports.items())
        }
        return HookPlan(
            step=step,
            plugin=plugin.name,
            hook=hook,
            effects=tuple(self._effect(e, result) for e in result.effects),
            undo_hook="unprepare" if hook == "prepare" else "remove",
            exports=exports,
        )


def explain_topology(
    topology: Mapping[str, Any],
    plugins: Mapping[str, Plugin],
    registry: OpcodeRegistry | None = None,
    *,
    source: SourceMap | None = None,
) -> Explanation:
    """The plan of ``topology`` (or its compile diagnostics). Never raises for bad input."""
    registry = registry or default_registry()
    result = compile_topology(topology, plugins, registry, source=source)
    out = Explanation(topology=str((topology.get("metadata") or {}).get("name", "")))
    if result.compiled is None:
        out.diagnostics = list(result.diagnostics)
        return out
    spec = result.compiled.revision["spec"]
    out.order = list(spec["order"])
    normalized = {s["id"]: s for s in spec["normalizedSpec"]["steps"]}
    planner = _Planner(plugins, registry)
    for sid in out.order:
        step = normalized[sid]
        plugin = plugins[step["pluginRef"]["name"]]
        config: dict[str, Any] = dict(step.get("config") or {})
        out.configs[sid] = config
        if step.get("kind") == "Allocation" and plugin.descriptor.spec.workload_settable:
            out.workload_settable[sid] = list(plugin.descriptor.spec.workload_settable)
        for hook in ("prepare", "connect"):
            if plugin.program(hook) is None:
                continue
            if hook == "prepare":
                call = Call(
                    config=config,
                    operation_id=f"explain-{sid}-prepare",
                    allocation=planner._allocation(sid, plugin, config),
                    inputs=planner._inputs(sid, plugin, config, step.get("inputs") or {}),
                )
            else:
                call = Call(
                    config=config,
                    operation_id=f"explain-{sid}-connect",
                    inputs=planner._inputs(sid, plugin, config, step.get("inputs") or {}),
                    prepared=planner._prepared(sid),
                    sandbox=PLACEHOLDER_SANDBOX,
                )
            plan = planner.plan(sid, plugin, hook, call)
            if plan is not None:
                out.hooks.append(plan)
    out.diagnostics = planner.diagnostics
    return out


def render_text(explanation: Explanation) -> str:
    """The human plan: per step and hook, effects in order, then what undo does."""
    lines = [
        f"NetworkTopology {explanation.topology}: steps in order {', '.join(explanation.order)}"
    ]
    for sid in explanation.order:
        hooks = [h for h in explanation.hooks if h.step == sid]
        plugin = hooks[0].plugin if hooks else "?"
        lines += ["", f"step {sid} ({plugin})"]
        config = explanation.configs.get(sid, {})
        if config:
            lines.append("  config: " + ", ".join(f"{k}={v!r}" for k, v in config.items()))
        settable = explanation.workload_settable.get(sid)
        if settable:
            lines.append(
                "  a workload may set in its claim (WorkloadParameters): " + ", ".join(settable)
            )
        for plan in hooks:
            when = "NodePrepare" if plan.hook == "prepare" else "Pod sandbox start (NRI)"
            lines.append(f"  {plan.hook} — runs at {when}:")
            if not plan.effects:
                lines.append("    (no effects for this config)")
            for n, effect in enumerate(plan.effects, 1):
                lines.append(f"    {n}. {effect.id}: {effect.kind}")
                lines.append(f"       {effect.changes}")
                for use in effect.inputs:
                    lines.append(
                        f"       input {use.port}: {use.device} in the {use.namespace} namespace"
                        f" <- {use.source}"
                    )
                if effect.parameters:
                    params = ", ".join(f"{k}={v!r}" for k, v in sorted(effect.parameters.items()))
                    lines.append(f"       parameters: {params}")
                lines.append(f"       recovery after a crash: {effect.recovery}")
            for name, device in plan.exports.items():
                lines.append(f"    exports {name}: {device}")
            if plan.effects:
                lines.append(
                    f"  {plan.undo_hook} (undo {plan.hook}, in reverse, from the journal record):"
                )
                for effect in reversed(plan.effects):
                    lines.append(f"    - {effect.id}: {effect.undo}")
    removal = explanation.removal_order()
    if removal:
        lines += [
            "",
            "At Pod removal the connect operations are undone in reverse topology order: "
            + ", ".join(removal)
            + "; at NodeUnprepare each root's prepare is undone.",
        ]
    return "\n".join(lines) + "\n"
