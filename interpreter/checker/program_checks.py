"""One hook program: ids, opcode/hook legality, the effect budget, then every per-effect check."""

from __future__ import annotations

from dmn.interpreter.checker.export_checks import _ExportChecks
from dmn.interpreter.checker.guard_checks import _check_guard
from dmn.interpreter.checker.limits import MAX_EFFECTS
from dmn.interpreter.checker.parameter_checks import _ParameterChecks
from dmn.interpreter.checker.program_state import _EffectInfo
from dmn.interpreter.checker.recovery_checks import _RecoveryChecks
from dmn.interpreter.checker.values import ValueType
from dmn.interpreter.diagnostics import Code
from dmn.interpreter.documents import Effect
from dmn.interpreter.expressions import Expr


class _ProgramChecker(_ExportChecks, _ParameterChecks, _RecoveryChecks):
    """Every rule of one hook program; ``run`` reports into the plugin context."""

    def run(self) -> None:
        effects = self.prog.body.effects
        seen: dict[str, int] = {}
        for i, effect in enumerate(effects):
            if seen.setdefault(effect.id, i) != i:
                self.error(
                    Code.E_DUPLICATE_ID,
                    f"effect id {effect.id!r} is already used by effects[{seen[effect.id]}]",
                    "effects",
                    i,
                    "id",
                )
        ids_in_order = [e.id for e in effects]
        total = 0
        for i, effect in enumerate(effects):
            info = self.check_effect(i, effect, ids_in_order)
            total += info.bound
            if effect.id not in self.infos:
                self.infos[effect.id] = info
                self.order.append(effect.id)
        if total > MAX_EFFECTS:
            self.error(
                Code.E_BUDGET,
                f"hook {self.hook!r} expands to up to {total} effects (the limit is {MAX_EFFECTS})",
                "effects",
            )
        self.check_exports()

    # ---- effects
    def check_effect(self, i: int, effect: Effect, ids: list[str]) -> _EffectInfo:
        ctx = self.ctx
        spec = ctx.registry.get(effect.kind)
        if spec is None:
            self.error(
                Code.E_UNKNOWN_OPCODE, f"unknown opcode {effect.kind!r}", "effects", i, "kind"
            )
        else:
            if effect.kind not in ctx.plugin.descriptor.spec.allowed_effects:
                self.error(
                    Code.E_EFFECT_DENIED,
                    f"opcode {effect.kind!r} is not in the plugin's allowedEffects",
                    "effects",
                    i,
                    "kind",
                )
            if self.hook not in {h.value for h in spec.hooks}:
                legal = ", ".join(sorted(h.value for h in spec.hooks))
                self.error(
                    Code.E_WRONG_HOOK,
                    f"opcode {effect.kind!r} may not run in {self.hook} (only in {legal})",
                    "effects",
                    i,
                    "kind",
                )
        guard: Expr | None = None
        if effect.when is not None:
            guard = _check_guard(
                ctx,
                effect.when,
                self.span_of("effects", i, "when"),
                self.path("effects", i, "when"),
            )
        if guard is not None:
            ctx.guards.append(guard)
        self.guard_at[i] = guard
        info = _EffectInfo(i, effect, spec, guard, 1, 1)
        element: ValueType | None = None
        if effect.for_each is not None:
            element = self.check_for_each(i, effect, info, ids)
        if spec is not None:
            self.check_inputs(i, effect, spec, info, element, ids)
            self.check_parameters(i, effect, spec)
            self.check_predicates(i, effect, spec)
            self.check_recovery(i, effect, spec)
        else:
            # Still resolve references so their own errors are reported.
            for port, value in (effect.inputs or {}).items():
                for parts, ref in self._refs(port, value):
                    self.resolve(ref.from_, i, ids, element, *parts)
        return info
