"""Exports vs descriptor outputs (conditional ones per scenario), required-parameter
obligations and guarded references — ``E_EXPORT_*``, ``E_REF_UNRESOLVED``.
"""

from __future__ import annotations

from collections.abc import Mapping

from dmn.interpreter.checker.program_state import _Obligation
from dmn.interpreter.checker.reference_checks import _ReferenceChecks
from dmn.interpreter.checker.scenarios import (
    Presence,
    Scenario,
    _always,
    _decided,
    _guard_holds,
    _scenario_text,
    _scenarios,
)
from dmn.interpreter.checker.values import ValueType
from dmn.interpreter.diagnostics import Code
from dmn.interpreter.documents import OutputPort
from dmn.interpreter.expressions import (
    AllocationRef,
    ConfigRef,
    EffectRef,
    InputRef,
    PreparedRef,
    Reference,
    parse_reference,
    references,
)
from dmn.interpreter.source import path_text


class _ExportChecks(_ReferenceChecks):
    """Export, obligation and guarded-reference checks over config scenarios."""

    def check_exports(self) -> None:
        ctx = self.ctx
        spec = ctx.plugin.descriptor.spec
        exports = self.prog.body.exports or {}
        ids = [e.id for e in self.prog.body.effects]
        export_types: dict[str, ValueType] = {}
        presence: dict[str, Presence] = {}
        for name, ref in exports.items():
            rel = ("exports", name, "from")
            parsed, diags = parse_reference(
                ref.from_, self.span_of(*rel), path_text(self.path(*rel))
            )
            ctx.diagnostics.extend(diags)
            if parsed is None:
                continue
            presence[name] = self.presence(parsed)
            vt = self.resolve_ref(parsed, None, ids, None, rel)
            if vt is not None:
                export_types[name] = vt
        self.exports = export_types
        terminal = self.hook == "connect" or ctx.plugin.program("connect") is None
        if not terminal:
            # prepare's exports become call.prepared.* for connect
            ctx.prepared_presence = presence
            self.check_scenarios({}, {})
            return
        outputs: dict[str, OutputPort] = spec.outputs or {}
        for name in exports:
            if name not in outputs:
                declared = ", ".join(sorted(outputs)) or "none"
                self.error(
                    Code.E_EXPORT_UNDECLARED,
                    f"export {name!r} is not a descriptor output (outputs: {declared})",
                    "exports",
                    name,
                    key=True,
                )
        for name, out in outputs.items():
            vt = export_types.get(name)
            if vt is None:
                continue
            want_links = {out.link_type} if out.link_type else None
            have_links = {lt.value for lt in vt.link_types} if vt.link_types else None
            if vt.type.value != out.type or (
                want_links is not None and have_links is not None and not have_links & want_links
            ):
                self.error(
                    Code.E_EXPORT_TYPE,
                    f"output {name!r} is {out.type}"
                    + (f" ({out.link_type})" if out.link_type else "")
                    + f" but the export is {vt.describe()}",
                    "exports",
                    name,
                    "from",
                )
            elif vt.max_items > out.max_items or vt.min_items < out.min_items:
                self.error(
                    Code.E_CARDINALITY,
                    f"output {name!r} carries {out.min_items}..{out.max_items} handles; "
                    f"the export yields {vt.min_items}..{vt.max_items}",
                    "exports",
                    name,
                    "from",
                )
        self.check_scenarios(outputs, presence)

    def presence(self, ref: Reference) -> Presence:
        """When the handle(s) ``ref`` denotes exist, as a function of config."""
        ctx = self.ctx
        if isinstance(ref, EffectRef):
            target = self.infos.get(ref.effect)
            if target is None or target.guard is None:
                return _always
            guard = target.guard
            return lambda s: _guard_holds(guard, s)
        if isinstance(ref, AllocationRef | InputRef):
            group = "allocation" if isinstance(ref, AllocationRef) else "inputs"
            port = ref.port
            if port is None:
                ports = list(ctx.plugin.descriptor.spec.allocation or {})
                port = ports[0] if len(ports) == 1 else None
            port_guard = ctx.port_guards.get((group, port or ""))
            if port_guard is None:
                return _always
            return lambda s: _guard_holds(port_guard, s)
        if isinstance(ref, PreparedRef):
            return ctx.prepared_presence.get(ref.port, _always)
        return _always

    def check_scenarios(
        self, outputs: Mapping[str, OutputPort], presence: Mapping[str, Presence]
    ) -> None:
        """Conditional outputs and guarded effects, decided per config scenario."""
        ctx = self.ctx
        out_guards = {n: g.expr for n, g in ctx.output_guards.items()}
        scenarios = _scenarios(ctx, ctx.guards)
        if scenarios == [] and ctx.config is None:
            # Every combination was pruned: no config can pass validation, and every
            # conditional check below would hold vacuously.
            ctx.error(
                Code.E_SCHEMA,
                "no config satisfies configSchema: its requiredWhen/forbiddenWhen rules "
                "contradict each other for every value of the fields they read",
                ctx.plugin.source.span(("spec", "configSchema")),
                ("spec", "configSchema"),
            )
        self.check_obligations(scenarios)
        exports = self.prog.body.exports or {}
        missing_at = "exports" if self.prog.body.exports is not None else "effects"
        reported: set[tuple[Code, str]] = set()
        if scenarios is None:
            for name, out in outputs.items():
                if out.when is None and name not in exports:
                    self.error(
                        Code.E_EXPORT_MISSING,
                        f"descriptor output {name!r} is not exported",
                        missing_at,
                    )
            return
        for scenario in scenarios:
            for name in outputs:
                on = _guard_holds(out_guards.get(name), scenario)
                present = presence.get(name)
                problem: tuple[Code, str, tuple[str, ...]] | None = None
                if on and name not in exports:
                    problem = (
                        Code.E_EXPORT_MISSING,
                        f"descriptor output {name!r} is not exported ({_scenario_text(scenario)})",
                        (missing_at,),
                    )
                elif on and present is not None and not present(scenario):
                    problem = (
                        Code.E_EXPORT_MISSING,
                        f"output {name!r} is declared but {exports[name].from_!r} does not "
                        f"exist {_scenario_text(scenario)}",
                        ("exports", name, "from"),
                    )
                elif not on and present is not None and present(scenario):
                    problem = (
                        Code.E_EXPORT_UNDECLARED,
                        f"export {name!r} is produced although the descriptor output is "
                        f"off {_scenario_text(scenario)}",
                        ("exports", name, "from"),
                    )
                if problem is not None and (problem[0], name) not in reported:
                    reported.add((problem[0], name))
                    self.error(problem[0], problem[1], *problem[2])
            self.check_guarded_refs(scenario, reported)

    def check_obligations(self, scenarios: list[Scenario] | None) -> None:
        """A required opcode parameter bound to a config field that may be absent.

        A field that declares ``requiredWhen`` opts into the proof: in every config
        scenario where the effect runs, the field must be present (``required``, a
        default, or ``requiredWhen`` holding) — ``E_PARAM_TYPE`` otherwise. For a field
        without ``requiredWhen`` the checker reports what is certain to fail: an unguarded
        effect binding it, or an effect that runs where ``forbiddenWhen`` removes it; a
        guarded effect is otherwise left to the config validation at bind time.
        """
        ctx = self.ctx
        for ob in self.obligations:
            guard = self.guard_at.get(ob.index)
            unguarded = self.prog.body.effects[ob.index].when is None
            proven = ob.field in ctx.required_when
            if scenarios is None:
                if not unguarded or proven:
                    continue
                where = ""
            else:
                running = [s for s in scenarios if _guard_holds(guard, s)]
                if proven or unguarded:
                    bad = [s for s in running if not ctx.present(ob.field, s)]
                else:
                    forbidden = ctx.forbidden_when.get(ob.field)
                    bad = [s for s in running if _decided(forbidden, s)]
                if not bad:
                    continue
                where = f" {self.scenario_text(bad[0], ob)}" if bad[0] else ""
            ctx.error(
                Code.E_PARAM_TYPE,
                f"parameter {ob.parameter!r} is required but call.config.{ob.field} may be "
                f"absent{where} (make the field required, give it a default, or declare "
                "requiredWhen)",
                ob.span,
                ob.path,
            )

    def scenario_text(self, scenario: Scenario, ob: _Obligation) -> str:
        """The scenario, narrowed to the fields the effect's guard and the field's
        presence guards read."""
        ctx = self.ctx
        exprs = [self.guard_at.get(ob.index)]
        exprs += [ctx.required_when.get(ob.field), ctx.forbidden_when.get(ob.field)]
        read = {
            r.field
            for e in exprs
            if e is not None
            for r in references(e)
            if isinstance(r, ConfigRef)
        }
        return _scenario_text({k: v for k, v in scenario.items() if k in read} or scenario)

    def check_guarded_refs(self, scenario: Scenario, reported: set[tuple[Code, str]]) -> None:
        """An effect that runs may only read handles that exist in the same scenario."""
        for eid in self.order:
            info = self.infos[eid]
            if not _guard_holds(info.guard, scenario):
                continue
            texts: list[tuple[str, tuple[str | int, ...]]] = []
            for port, value in (info.effect.inputs or {}).items():
                texts += [(ref.from_, parts) for parts, ref in self._refs(port, value)]
            if info.effect.for_each is not None:
                texts.append((info.effect.for_each.in_, ("forEach", "in")))
            for text, parts in texts:
                ref, _ = parse_reference(text)
                if ref is None or self.presence(ref)(scenario):
                    continue
                key = (Code.E_REF_UNRESOLVED, f"{eid}:{'.'.join(map(str, parts))}")
                if key in reported:
                    continue
                reported.add(key)
                self.error(
                    Code.E_REF_UNRESOLVED,
                    f"{text}: does not exist {_scenario_text(scenario)}, but effect {eid!r} runs",
                    "effects",
                    info.index,
                    *parts,
                )
