"""References, ``forEach`` and input ports vs the opcode — ``E_REF_*``, ``E_PORT_TYPE``,
``E_CARDINALITY``, ``E_ACCESS``, ``E_SHARED_PARENT_MUTATION``.
"""

from __future__ import annotations

from dataclasses import replace

from dmn.interpreter.checker.program_state import _EffectInfo, _ProgramBase
from dmn.interpreter.checker.values import _MUTATING_ACCESSES, ValueType, port_value_type
from dmn.interpreter.diagnostics import Code
from dmn.interpreter.documents import Effect
from dmn.interpreter.expressions import (
    AllocationRef,
    ConfigRef,
    EffectRef,
    InputRef,
    PreparedRef,
    Reference,
    SandboxRef,
    VarRef,
    parse_reference,
)
from dmn.interpreter.source import Path, path_text
from dmn.opcodes.spec import OpcodeSpec, PortSpec


class _ReferenceChecks(_ProgramBase):
    """Reference resolution and input-port checks of one hook program."""

    def check_for_each(
        self, i: int, effect: Effect, info: _EffectInfo, ids: list[str]
    ) -> ValueType | None:
        fe = effect.for_each
        assert fe is not None
        if fe.as_ in ("call", "effects"):
            self.error(
                Code.E_SCHEMA,
                f"forEach variable may not be named {fe.as_!r}",
                "effects",
                i,
                "forEach",
                "as",
            )
        vt = self.resolve(fe.in_, i, ids, None, "forEach", "in")
        if vt is None:
            return None
        if vt.max_items <= 1:
            self.error(
                Code.E_CARDINALITY,
                f"forEach needs a list of handles; {fe.in_!r} denotes one",
                "effects",
                i,
                "forEach",
                "in",
            )
        info.bound = vt.max_items
        info.min_bound = vt.min_items
        return vt.one()

    def resolve(
        self,
        text: str,
        i: int,
        ids: list[str],
        element: ValueType | None,
        *parts: str | int,
    ) -> ValueType | None:
        """Parse and resolve a handle reference at effects[i].<parts>; None on error."""
        rel = ("effects", i, *parts)
        ref, diags = parse_reference(text, self.span_of(*rel), path_text(self.path(*rel)))
        self.ctx.diagnostics.extend(diags)
        if ref is None:
            return None
        return self.resolve_ref(ref, i, ids, element, rel)

    def resolve_ref(
        self,
        ref: Reference,
        i: int | None,
        ids: list[str],
        element: ValueType | None,
        rel: Path,
    ) -> ValueType | None:
        ctx = self.ctx
        path = self.path(*rel)

        def err(code: Code, message: str) -> None:
            ctx.error(code, f"{ref.text()}: {message}", ref.span, path)

        spec = ctx.plugin.descriptor.spec
        vt: ValueType | None = None
        if isinstance(ref, ConfigRef):
            err(Code.E_PORT_TYPE, "call.config is a value, not a handle")
            return None
        if isinstance(ref, SandboxRef):
            if self.hook != "connect":
                err(Code.E_REF_UNRESOLVED, "call.sandbox is only available in connect")
            else:
                err(Code.E_PORT_TYPE, "call.sandbox is a scope, not a handle")
            return None
        if isinstance(ref, VarRef):
            fe = self.prog.body.effects[i].for_each if i is not None else None
            if fe is None or fe.as_ != ref.name or element is None:
                if fe is not None and fe.as_ == ref.name:
                    return None  # the forEach list itself failed to resolve
                err(Code.E_REF_UNRESOLVED, "not a forEach variable of this effect")
                return None
            return element
        if isinstance(ref, InputRef):
            port = (spec.inputs or {}).get(ref.port)
            if port is None:
                err(Code.E_REF_UNRESOLVED, f"the descriptor has no input port {ref.port!r}")
                return None
            vt = port_value_type(port)
            index = ref.index
        elif isinstance(ref, AllocationRef):
            if self.hook != "prepare":
                err(Code.E_REF_UNRESOLVED, "call.allocation is only available in prepare")
                return None
            ports = spec.allocation or {}
            if ref.port is None:
                if len(ports) != 1:
                    err(
                        Code.E_REF_UNRESOLVED,
                        "name the allocation port (the descriptor declares "
                        f"{len(ports)} allocation ports)",
                    )
                    return None
                alloc = next(iter(ports.values()))
            else:
                found = ports.get(ref.port)
                if found is None:
                    err(
                        Code.E_REF_UNRESOLVED, f"the descriptor has no allocation port {ref.port!r}"
                    )
                    return None
                alloc = found
            vt = port_value_type(alloc)
            index = ref.index
        elif isinstance(ref, PreparedRef):
            if self.hook != "connect":
                err(Code.E_REF_UNRESOLVED, "call.prepared is only available in connect")
                return None
            prepared = ctx.prepared.get(ref.port)
            if prepared is None:
                err(Code.E_REF_UNRESOLVED, f"the prepare hook exports no {ref.port!r}")
                return None
            vt = prepared
            index = ref.index
        else:
            assert isinstance(ref, EffectRef)
            target = self.infos.get(ref.effect)
            if target is None:
                if ref.effect in ids and (i is None or ids.index(ref.effect) >= i):
                    err(Code.E_REF_FORWARD, f"effect {ref.effect!r} does not run before this one")
                else:
                    err(Code.E_REF_UNRESOLVED, f"no effect {ref.effect!r} in this program")
                return None
            if i is not None and target.index >= i:
                err(Code.E_REF_FORWARD, f"effect {ref.effect!r} does not run before this one")
                return None
            if target.spec is None:
                return None
            if ref.port not in target.spec.outputs:
                outs = ", ".join(sorted(target.spec.outputs)) or "none"
                err(
                    Code.E_REF_UNRESOLVED,
                    f"opcode {target.effect.kind} has no output {ref.port!r} (outputs: {outs})",
                )
                return None
            found_vt = target.outputs.get(ref.port)
            if found_vt is None:
                return None
            vt = found_vt
            index = ref.index
        if index is not None:
            if index >= vt.max_items:
                err(Code.E_CARDINALITY, f"index {index} is out of range (at most {vt.max_items})")
                return None
            if index >= vt.min_items:
                err(
                    Code.E_CARDINALITY,
                    f"index {index} may be absent (at least {vt.min_items} guaranteed)",
                )
                return None
            return vt.one()
        return vt

    def check_inputs(
        self,
        i: int,
        effect: Effect,
        spec: OpcodeSpec,
        info: _EffectInfo,
        element: ValueType | None,
        ids: list[str],
    ) -> None:
        bound: dict[str, ValueType] = {}
        for port, value in (effect.inputs or {}).items():
            port_spec = spec.inputs.get(port)
            refs = self._refs(port, value)
            if port_spec is None:
                known = ", ".join(sorted(spec.inputs)) or "none"
                self.error(
                    Code.E_UNKNOWN_FIELD,
                    f"opcode {spec.name} has no input port {port!r} (ports: {known})",
                    "effects",
                    i,
                    "inputs",
                    port,
                    key=True,
                )
                for parts, ref in refs:
                    self.resolve(ref.from_, i, ids, element, *parts)
                continue
            lo = hi = 0
            first: ValueType | None = None
            complete = True
            for parts, ref in refs:
                vt = self.resolve(ref.from_, i, ids, element, *parts)
                if vt is None:
                    complete = False
                    continue
                first = first or vt
                lo += vt.min_items
                hi += vt.max_items
                self.check_handle(i, spec, port, port_spec, vt, parts)
            if first is not None:
                bound[port] = replace(first, min_items=lo, max_items=hi)
            if complete and (hi > port_spec.max_items or lo < port_spec.min_items):
                self.error(
                    Code.E_CARDINALITY,
                    f"port {port!r} of {spec.name} takes {port_spec.min_items}.."
                    f"{port_spec.max_items} handles; this binds {lo}..{hi}",
                    "effects",
                    i,
                    "inputs",
                    port,
                )
        for port, port_spec in spec.inputs.items():
            if port_spec.min_items > 0 and port not in (effect.inputs or {}):
                self.error(
                    Code.E_CARDINALITY,
                    f"input port {port!r} of {spec.name} needs at least "
                    f"{port_spec.min_items} handle(s) and is not bound",
                    "effects",
                    i,
                    "inputs" if effect.inputs is not None else "kind",
                )
        # Outputs: types the later effects and exports will see.
        for name, out in spec.outputs.items():
            inherited = bound.get(out.inherits) if out.inherits else None
            accesses = inherited.accesses if inherited is not None else out.grants
            links = out.link_types
            if inherited is not None and inherited.link_types is not None:
                links = inherited.link_types if links is None else inherited.link_types & links
            info.outputs[name] = ValueType(
                type=out.type,
                link_types=links,
                accesses=frozenset(accesses),
                min_items=out.min_items * info.min_bound,
                max_items=out.max_items * info.bound,
                scope=out.scope,
            )

    def check_handle(
        self,
        i: int,
        spec: OpcodeSpec,
        port: str,
        port_spec: PortSpec,
        vt: ValueType,
        parts: tuple[str | int, ...],
    ) -> None:
        where = ("effects", i, *parts)
        need = port_spec.access
        mutating = (need is not None and need in _MUTATING_ACCESSES) or spec.mutates_parent
        if vt.shared and mutating:
            # Before the type check: handing a shared-parent grant (SharedParent/v1, or a
            # CreateChild-only interface) to a configuring port is a mutation attempt,
            # whatever handle type the port takes.
            self.error(
                Code.E_SHARED_PARENT_MUTATION,
                f"{spec.name} would {'configure' if need else 'mutate'} a shared-parent grant, "
                "which permits CreateChild only",
                *where,
            )
            return
        if vt.type is not port_spec.type:
            self.error(
                Code.E_PORT_TYPE,
                f"port {port!r} of {spec.name} takes {port_spec.type.value}, not {vt.type.value}",
                *where,
            )
            return
        if (
            port_spec.link_types is not None
            and vt.link_types is not None
            and not vt.link_types & port_spec.link_types
        ):
            want = "/".join(sorted(lt.value for lt in port_spec.link_types))
            have = "/".join(sorted(lt.value for lt in vt.link_types))
            self.error(
                Code.E_PORT_TYPE,
                f"port {port!r} of {spec.name} takes linkType {want}, not {have}",
                *where,
            )
        if port_spec.scope is not None and vt.scope is not None and port_spec.scope != vt.scope:
            self.error(
                Code.E_PORT_TYPE,
                f"port {port!r} of {spec.name} takes a {port_spec.scope.value} handle, "
                f"this one lives in the {vt.scope.value}",
                *where,
            )
        if need is not None and need not in vt.accesses:
            have = ", ".join(sorted(a.value for a in vt.accesses)) or "nothing"
            self.error(
                Code.E_ACCESS,
                f"port {port!r} of {spec.name} needs {need.value}; the handle grants {have}",
                *where,
            )
