"""Per-step program checking through the language core's checker.

Each hook program of a step's plugin is checked with *that step's* validated config
(guards decided for it), and the opcodes the step will actually run under that config
are collected for the topology's effect budget. A clean verdict is reused for a later step
of the same plugin whose config the checker reads the same way
(:class:`~dmn.interpreter.checker.CleanVerdicts`, one per compile).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dmn.interpreter.checker import CleanVerdicts
from dmn.interpreter.diagnostics import Diagnostic
from dmn.interpreter.guards import holds
from dmn.interpreter.loader import Plugin
from dmn.opcodes.spec import OpcodeRegistry


@dataclass
class StepPrograms:
    diagnostics: list[Diagnostic] = field(default_factory=list)
    opcodes: set[str] = field(default_factory=set)


def step_opcodes(plugin: Plugin, config: Mapping[str, Any]) -> frozenset[str]:
    """The opcodes ``plugin`` runs under ``config``.

    An effect whose guard cannot be decided counts as run (the budget is then checked
    conservatively); a Builtin plugin without programs runs its ``allowedEffects``.
    """
    if not plugin.programs:
        return frozenset(plugin.descriptor.spec.allowed_effects)
    out: set[str] = set()
    for program in plugin.programs.values():
        for effect in program.body.effects:
            if effect.when is not None and not holds(effect.when, config):
                continue
            out.add(effect.kind)
    return frozenset(out)


def step_verdicts() -> CleanVerdicts[frozenset[str]]:
    """The clean verdicts of one compile (see :func:`step_programs`)."""
    return CleanVerdicts(step_opcodes)


def step_programs(
    plugin: Plugin,
    config: Mapping[str, Any],
    registry: OpcodeRegistry,
    verdicts: CleanVerdicts[frozenset[str]] | None = None,
) -> StepPrograms:
    """Checker diagnostics for ``plugin`` under ``config`` (validated: the normalised output
    of a clean ``validate_config``) and the opcodes it runs (:func:`step_opcodes`);
    ``verdicts`` is the compile's memo (:func:`step_verdicts`), a fresh one without it."""
    memo = verdicts if verdicts is not None else step_verdicts()
    diagnostics, opcodes = memo.check(plugin, registry, config)
    return StepPrograms(diagnostics=diagnostics, opcodes=set(opcodes))
