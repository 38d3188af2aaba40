"""The binder: one checked hook program + one concrete call -> a :class:`BoundProgram`.

Pure (no syscalls, no clock, no randomness): the same plugin, hook and call always bind
to the same bound program and digest. Binding

1. plans the config (:func:`dmn.engine.config_plan.plan_for_config`: validated against
   ``configSchema``, guards decided, parameters resolved — the same plan the node agent
   and the topology compiler use) and re-runs the checker for that config (a plugin whose
   descriptor or program does not check never binds; a clean verdict is remembered under
   the plugin's contract digest, hook and config — :mod:`dmn.engine.checked_programs`);
2. verifies the call's handles against the planned ports (count, type, linkType, granted
   accesses); ``connect`` needs the verified sandbox (``call.sandbox``), ``prepare`` runs
   before there is one and must not carry it;
3. binds the planned effects of the hook, expanding ``forEach`` over the call's handles
   (bounded by the list port's ``maxItems``; instance ``k`` of effect ``attach`` becomes
   ``attach[k]``);
4. substitutes references by concrete :class:`Handle` values (call grants) or
   :class:`EffectOutputRef` placeholders (outputs of earlier effects, which exist only
   once the runner applied them); parameters are the plan's (an optional config field
   that is absent leaves its parameter unset; a required one is refused);
5. re-validates every bound parameter payload with the opcode's parameter model and
   every concrete input handle's type, linkType, scope and accesses;
6. exports, for the terminal hook, exactly the planned outputs, and returns the
   :class:`BoundProgram` (its ``digest`` is the SHA-256 of its canonical JSON), or the list
   of diagnostics that prevented binding.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dmn.engine.bound import BoundEffect, BoundInput, BoundProgram, EffectOutputRef
from dmn.engine.checked_programs import CHECKED
from dmn.engine.config_plan import ConfigPlan, PlannedEffect, parameter_problems, plan_for_config
from dmn.interpreter.checker import MAX_EFFECTS, check_program, missing_program
from dmn.interpreter.diagnostics import Code, Diagnostic, has_errors
from dmn.interpreter.documents import Effect, InputPort, Ref
from dmn.interpreter.expressions import (
    AllocationRef,
    EffectRef,
    InputRef,
    PreparedRef,
    Reference,
    VarRef,
    parse_reference,
)
from dmn.interpreter.loader import Plugin
from dmn.interpreter.parameters import is_required
from dmn.opcodes.spec import OpcodeRegistry, OpcodeSpec, PortSpec
from dmn.vocabulary.handles import Handle, Scope
from dmn.vocabulary.terms import Access, HandleType, LinkType, RecoveryStrategy, ScopeKind

_MUTATING = frozenset({Access.EXCLUSIVE_CONFIGURE, Access.EXCLUSIVE_MASTER, Access.ATTACH_MEMBER})


@dataclass(frozen=True, slots=True)
class Call:
    """One concrete invocation of a hook: everything a program may read.

    ``allocation`` (prepare of Allocation plugins) and ``inputs`` (Operation plugins)
    map descriptor port names to the verified handles; ``prepared`` holds the exports
    of this step's earlier prepare (connect only); ``sandbox`` is the verified Pod
    sandbox (connect only). ``operation_id`` names the journal operation the bound
    program will run under (the runner derives ownership aliases from it).
    """

    config: Mapping[str, Any]
    operation_id: str = ""
    allocation: Mapping[str, tuple[Handle, ...]] = field(default_factory=dict)
    inputs: Mapping[str, tuple[Handle, ...]] = field(default_factory=dict)
    prepared: Mapping[str, tuple[Handle, ...]] = field(default_factory=dict)
    sandbox: Scope | None = None


class _Fail(Exception):
    pass


class _Binder:
    def __init__(
        self,
        plugin: Plugin,
        hook: str,
        call: Call,
        registry: OpcodeRegistry,
        plan: ConfigPlan,
    ) -> None:
        self.plugin = plugin
        self.hook = hook
        self.call = call
        self.registry = registry
        self.plan = plan
        self.diagnostics: list[Diagnostic] = []
        prog = plugin.program(hook)
        assert prog is not None
        self.prog = prog
        # source id -> bound ids of its instances (empty when skipped)
        self.instances: dict[str, list[str]] = {}
        self.per_instance_max: dict[str, dict[str, int]] = {}
        self.failed: set[str] = set()  # effects that could not bind (already reported)

    def error(self, code: Code, message: str, *path: str | int) -> None:
        self.diagnostics.append(
            Diagnostic.at(code, message, self.prog.span(*path), _text((*self.prog.base, *path)))
        )

    # ---- call handles vs descriptor ports
    def check_call_ports(self) -> None:
        groups: list[tuple[str, Mapping[str, InputPort], Mapping[str, tuple[Handle, ...]]]]
        groups = [("inputs", self.plan.inputs, self.call.inputs)]
        if self.hook == "prepare":
            groups.append(("allocation", self.plan.allocation, self.call.allocation))
        for group, ports, given in groups:
            for name, port in ports.items():
                handles = given.get(name, ())
                where = ("spec", group, name)
                span = self.plugin.span(*where)
                path = _text(where)
                if not port.min_items <= len(handles) <= port.max_items:
                    self.diagnostics.append(
                        Diagnostic.at(
                            Code.E_CARDINALITY,
                            f"call.{group}.{name}: {len(handles)} handles given, the port takes "
                            f"{port.min_items}..{port.max_items}",
                            span,
                            path,
                        )
                    )
                for handle in handles:
                    problem = _port_mismatch(handle, port)
                    if problem is not None:
                        self.diagnostics.append(
                            Diagnostic.at(
                                problem[0], f"call.{group}.{name}: {problem[1]}", span, path
                            )
                        )

    # ---- references
    def resolve(self, text: str, element: BoundInput | None, *path: str | int) -> list[BoundInput]:
        ref, diags = parse_reference(text)
        if ref is None or diags:
            self.error(Code.E_REF_UNRESOLVED, f"cannot resolve {text!r}", *path)
            raise _Fail
        return self.resolve_ref(ref, element, *path)

    def resolve_ref(
        self, ref: Reference, element: BoundInput | None, *path: str | int
    ) -> list[BoundInput]:
        def pick(handles: tuple[Handle, ...] | None, index: int | None) -> list[BoundInput]:
            if handles is None:
                self.error(Code.E_REF_UNRESOLVED, f"{ref.text()}: not granted by this call", *path)
                raise _Fail
            if index is None:
                return list(handles)
            if index >= len(handles):
                self.error(
                    Code.E_CARDINALITY,
                    f"{ref.text()}: the call grants {len(handles)} handles",
                    *path,
                )
                raise _Fail
            return [handles[index]]

        if isinstance(ref, VarRef):
            if element is None:
                self.error(Code.E_REF_UNRESOLVED, f"{ref.text()}: no forEach variable", *path)
                raise _Fail
            return [element]
        if isinstance(ref, InputRef):
            return pick(self.call.inputs.get(ref.port), ref.index)
        if isinstance(ref, PreparedRef):
            return pick(self.call.prepared.get(ref.port), ref.index)
        if isinstance(ref, AllocationRef):
            port = ref.port
            if port is None:
                ports = list(self.plugin.descriptor.spec.allocation or {})
                port = ports[0] if len(ports) == 1 else ""
            return pick(self.call.allocation.get(port), ref.index)
        if isinstance(ref, EffectRef):
            bound = self.instances.get(ref.effect)
            if not bound and ref.effect in self.failed:
                raise _Fail
            if not bound:
                self.error(
                    Code.E_REF_UNRESOLVED,
                    f"{ref.text()}: effect {ref.effect!r} does not run for this config",
                    *path,
                )
                raise _Fail
            if len(bound) == 1 and bound[0] == ref.effect:
                return [EffectOutputRef(ref.effect, ref.port, ref.index)]
            if ref.index is None:
                return [EffectOutputRef(b, ref.port) for b in bound]
            per = self.per_instance_max.get(ref.effect, {}).get(ref.port, 1)
            if per == 1 and ref.index < len(bound):
                return [EffectOutputRef(bound[ref.index], ref.port)]
            self.error(
                Code.E_CARDINALITY, f"{ref.text()}: index out of range of the expansion", *path
            )
            raise _Fail
        self.error(Code.E_REF_UNRESOLVED, f"{ref.text()}: not a handle", *path)
        raise _Fail

    # ---- effects
    def bind_effect(self, planned: PlannedEffect) -> list[BoundEffect]:
        i, effect = planned.index, planned.effect
        assert effect is not None
        spec = self.registry.get(effect.kind)
        if spec is None:
            self.error(Code.E_UNKNOWN_OPCODE, f"unknown opcode {effect.kind!r}", "effects", i)
            raise _Fail
        elements: list[BoundInput | None] = [None]
        if planned.for_each is not None:
            elements = list(self.resolve(planned.for_each, None, "effects", i, "forEach", "in"))
            if not elements:
                self.instances[effect.id] = []
                return []
        out: list[BoundEffect] = []
        parameters = self.parameters(planned, spec)
        for k, element in enumerate(elements):
            inputs: dict[str, tuple[BoundInput, ...]] = {}
            for port, value in sorted((effect.inputs or {}).items()):
                refs: list[Ref] = value if isinstance(value, list) else [value]
                bound: list[BoundInput] = []
                for j, ref in enumerate(refs):
                    bound += self.resolve(ref.from_, element, "effects", i, "inputs", port, j)
                port_spec = spec.inputs.get(port)
                if port_spec is not None:
                    self.check_inputs(i, spec, port, port_spec, bound)
                inputs[port] = tuple(bound)
            bound_id = effect.id if planned.for_each is None else f"{effect.id}[{k}]"
            out.append(
                BoundEffect(
                    id=bound_id,
                    source_id=effect.id,
                    kind=effect.kind,
                    inputs=inputs,
                    parameters=parameters,
                    requires=tuple(p.kind for p in effect.requires or ()),
                    postconditions=tuple(p.kind for p in effect.postconditions or ()),
                    recovery=_recovery(effect, spec),
                )
            )
        self.instances[effect.id] = [b.id for b in out]
        self.per_instance_max[effect.id] = {n: p.max_items for n, p in spec.outputs.items()}
        return out

    def check_inputs(
        self, i: int, spec: OpcodeSpec, port: str, port_spec: PortSpec, bound: list[BoundInput]
    ) -> None:
        where = ("effects", i, "inputs", port)
        concrete = [b for b in bound if isinstance(b, Handle)]
        if len(bound) == len(concrete) and not (
            port_spec.min_items <= len(bound) <= port_spec.max_items
        ):
            self.error(
                Code.E_CARDINALITY,
                f"port {port!r} of {spec.name} takes {port_spec.min_items}.."
                f"{port_spec.max_items} handles; {len(bound)} bound",
                *where,
            )
        need = port_spec.access
        mutating = (need is not None and need in _MUTATING) or spec.mutates_parent
        for handle in concrete:
            if mutating and _shared(handle):
                self.error(
                    Code.E_SHARED_PARENT_MUTATION,
                    f"{spec.name} would mutate shared parent {handle.id}",
                    *where,
                )
                continue
            if handle.type is not port_spec.type:
                self.error(
                    Code.E_PORT_TYPE,
                    f"handle {handle.id} is {handle.type.value}; port {port!r} of {spec.name} "
                    f"takes {port_spec.type.value}",
                    *where,
                )
                continue
            if port_spec.link_types is not None and handle.link_type not in port_spec.link_types:
                self.error(
                    Code.E_PORT_TYPE,
                    f"handle {handle.id} has linkType {handle.link_type}; port {port!r} takes "
                    + "/".join(sorted(lt.value for lt in port_spec.link_types)),
                    *where,
                )
            if port_spec.scope is not None and handle.scope.kind is not port_spec.scope:
                self.error(
                    Code.E_PORT_TYPE,
                    f"handle {handle.id} lives in the {handle.scope.kind.value}; port {port!r} "
                    f"takes a {port_spec.scope.value} handle",
                    *where,
                )
            elif (
                port_spec.scope is ScopeKind.SANDBOX
                and self.call.sandbox is not None
                and handle.scope.netns != self.call.sandbox.netns
            ):
                self.error(
                    Code.E_PORT_TYPE,
                    f"handle {handle.id} lives in another sandbox than this call's",
                    *where,
                )
            if need is not None and not handle.grants(need):
                self.error(
                    Code.E_ACCESS,
                    f"handle {handle.id} does not grant {need.value} for {spec.name}",
                    *where,
                )

    def parameters(self, planned: PlannedEffect, spec: OpcodeSpec) -> dict[str, Any]:
        i = planned.index
        for name in planned.foreign_bindings[:1]:
            self.error(
                Code.E_PARAM_TYPE,
                f"parameter {name!r} binds call.config fields only",
                "effects",
                i,
                "parameterBindings",
                name,
            )
            raise _Fail
        params: dict[str, Any] = dict(planned.parameters)
        missing = [
            (name, config_field)
            for name, config_field in planned.absent_fields.items()
            if is_required(spec.parameters, name)
        ]
        failed = False
        for name, config_field in missing:
            self.diagnostics.append(
                Diagnostic(
                    code=Code.E_SCHEMA,
                    message=f"config field {config_field!r} is required when effect "
                    f"{planned.id!r} runs (it binds parameter {name!r} of {spec.name})",
                    path=f"config.{config_field}",
                )
            )
            failed = True
        if failed:
            raise _Fail
        for code, message in parameter_problems(spec.name, spec.parameters, params):
            self.error(code, message, "effects", i)
            failed = True
        if failed:
            raise _Fail
        return params

    def check_sandbox(self) -> None:
        """connect runs against one verified Pod sandbox; prepare runs before there is one."""
        if self.hook == "connect" and self.call.sandbox is None:
            message = "connect binds only against the verified Pod sandbox; none was given"
        elif (
            self.hook == "connect"
            and self.call.sandbox is not None
            and (self.call.sandbox.kind is not ScopeKind.SANDBOX or self.call.sandbox.netns is None)
        ):
            message = "call.sandbox must be a sandbox scope with its namespace identity"
        elif self.hook != "connect" and self.call.sandbox is not None:
            message = f"{self.hook} runs before the Pod sandbox exists; call.sandbox must be unset"
        else:
            return
        self.diagnostics.append(
            Diagnostic(code=Code.E_SCHEMA, message=message, path="call.sandbox")
        )

    def bind(self) -> BoundProgram | None:
        self.check_sandbox()
        self.check_call_ports()
        effects: list[BoundEffect] = []
        for planned in self.plan.hook(self.hook):
            try:
                effects += self.bind_effect(planned)
            except _Fail:
                self.instances.setdefault(planned.id, [])
                self.failed.add(planned.id)
        if len(effects) > MAX_EFFECTS:
            self.error(
                Code.E_BUDGET,
                f"the bound program has {len(effects)} effects (the limit is {MAX_EFFECTS})",
                "effects",
            )
        exports: dict[str, tuple[BoundInput, ...]] = {}
        terminal = self.hook == "connect" or self.plugin.program("connect") is None
        wanted = self.plan.outputs if terminal else None
        for name, ref in (self.prog.body.exports or {}).items():
            if wanted is not None and name not in wanted:
                continue
            parsed, _ = parse_reference(ref.from_)
            if parsed is None:
                continue
            if not _available(parsed, self):
                failed = isinstance(parsed, EffectRef) and parsed.effect in self.failed
                if wanted is not None and not failed:
                    self.error(
                        Code.E_EXPORT_MISSING,
                        f"output {name!r} is on for this config but {ref.from_!r} is not",
                        "exports",
                        name,
                    )
                continue
            try:
                exports[name] = tuple(self.resolve_ref(parsed, None, "exports", name))
            except _Fail:
                continue
        for name in wanted or {}:
            if name not in (self.prog.body.exports or {}):
                self.error(Code.E_EXPORT_MISSING, f"output {name!r} is not exported", "exports")
        if has_errors(self.diagnostics):
            return None
        return BoundProgram(
            plugin=self.plugin.name,
            plugin_version=self.plugin.version,
            hook=self.hook,
            contract_digest=CHECKED.digest(self.plugin),
            effects=tuple(effects),
            exports=exports,
        )


def _available(ref: Reference, binder: _Binder) -> bool:
    """Does ``ref`` denote something in this call (a run effect or a granted handle)?"""
    if isinstance(ref, EffectRef):
        return bool(binder.instances.get(ref.effect))
    if isinstance(ref, InputRef):
        return ref.port in binder.call.inputs
    if isinstance(ref, PreparedRef):
        return ref.port in binder.call.prepared
    if isinstance(ref, AllocationRef):
        if ref.port is None:
            return bool(binder.call.allocation)
        return ref.port in binder.call.allocation
    return True


def _shared(handle: Handle) -> bool:
    """A shared-parent grant: SharedParent/v1, or an interface granting CreateChild only."""
    return handle.type is HandleType.SHARED_PARENT or (
        Access.CREATE_CHILD in handle.accesses and not (handle.accesses & _MUTATING)
    )


def _recovery(effect: Effect, spec: OpcodeSpec) -> str:
    if effect.recovery is not None:
        return effect.recovery.strategy
    if RecoveryStrategy.OBSERVE_AND_RECONCILE in spec.recovery or not spec.recovery:
        return RecoveryStrategy.OBSERVE_AND_RECONCILE.value
    return sorted(s.value for s in spec.recovery)[0]


def _port_mismatch(handle: Handle, port: InputPort) -> tuple[Code, str] | None:
    if handle.type.value != port.type:
        return Code.E_PORT_TYPE, f"handle {handle.id} is {handle.type.value}, not {port.type}"
    if port.link_type is not None and handle.link_type is not LinkType(port.link_type):
        return Code.E_PORT_TYPE, f"handle {handle.id} is not {port.link_type}"
    for access in sorted(port.accesses()):
        if not handle.grants(Access(access)):
            return Code.E_ACCESS, f"handle {handle.id} does not grant {access}"
    return None


def _text(path: tuple[str | int, ...]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def bind_program(
    plugin: Plugin, hook: str, call: Call, registry: OpcodeRegistry | None = None
) -> BoundProgram | list[Diagnostic]:
    """Bind ``plugin``'s ``hook`` program to ``call``; diagnostics if it cannot bind.

    Never raises for bad programs, configs or handles. ``registry`` defaults to the
    builtin opcode registry (``dmn.opcodes.registry.default_registry``).
    """
    if registry is None:
        from dmn.opcodes.registry import default_registry

        registry = default_registry()
    try:
        if plugin.program(hook) is None:
            return [missing_program(plugin, hook)]
        plan = plan_for_config(plugin, call.config)
        if not isinstance(plan, ConfigPlan):
            return plan
        if not CHECKED.is_clean(plugin, hook, registry, plan.config):
            checked = check_program(plugin, hook, registry, plan.config, descriptor=True)
            if has_errors(checked):
                return checked
            CHECKED.remember_clean(plugin, hook, registry, plan.config)
        binder = _Binder(plugin, hook, call, registry, plan)
        bound = binder.bind()
        if bound is None:
            return binder.diagnostics
        return bound
    except RecursionError:
        return [Diagnostic.at(Code.E_SCHEMA, "document nests too deeply", plugin.span())]


__all__ = ["Call", "bind_program"]
