"""Per-step program checking through the language core's checker.

Each hook program of a step's plugin is checked with *that step's* validated config (the
normalised config of its plan, :func:`dmn.engine.config_plan.plan_for_config`), and the
opcodes the step will actually run under that config — the plan's, the same answer the
binder binds — are what the topology's effect budget is checked against. A clean verdict is
reused for a later step of the same plugin whose config the checker reads the same way
(:class:`~dmn.interpreter.checker.CleanVerdicts`, one per compile).
"""

from __future__ import annotations

from dataclasses import dataclass

from dmn.engine.config_plan import ConfigPlan
from dmn.interpreter.checker import CleanVerdicts
from dmn.interpreter.diagnostics import Diagnostic
from dmn.interpreter.loader import Plugin
from dmn.opcodes.spec import OpcodeRegistry


@dataclass(frozen=True)
class StepPrograms:
    """A step's checker diagnostics and the opcodes its plan runs."""

    diagnostics: list[Diagnostic]
    opcodes: frozenset[str]


def step_verdicts() -> CleanVerdicts:
    """The clean verdicts of one compile (see :func:`step_programs`)."""
    return CleanVerdicts()


def step_programs(
    plugin: Plugin,
    plan: ConfigPlan,
    registry: OpcodeRegistry,
    verdicts: CleanVerdicts | None = None,
) -> StepPrograms:
    """Checker diagnostics for ``plugin`` under ``plan``'s config and the opcodes the plan
    runs; ``verdicts`` is the compile's memo (:func:`step_verdicts`), a fresh one without it."""
    memo = verdicts if verdicts is not None else step_verdicts()
    return StepPrograms(memo.check(plugin, registry, plan.config), plan.opcodes)
