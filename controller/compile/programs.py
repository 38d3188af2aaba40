"""Per-step program checking through the language core's checker.

Each hook program of a step's plugin is checked with *that step's* validated config
(guards decided for it), and the opcodes the step will actually run under that config
are collected for the topology's effect budget.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dmn.interpreter.checker import check_plugin
from dmn.interpreter.diagnostics import Diagnostic
from dmn.interpreter.guards import holds
from dmn.interpreter.loader import Plugin
from dmn.opcodes.spec import OpcodeRegistry


@dataclass
class StepPrograms:
    diagnostics: list[Diagnostic] = field(default_factory=list)
    opcodes: set[str] = field(default_factory=set)


def step_programs(
    plugin: Plugin, config: Mapping[str, Any], registry: OpcodeRegistry
) -> StepPrograms:
    """Checker diagnostics for ``plugin`` under ``config`` and the opcodes it runs.

    An effect whose guard cannot be decided counts as run (the budget is then checked
    conservatively); a Builtin plugin without programs runs its ``allowedEffects``.
    """
    out = StepPrograms(diagnostics=check_plugin(plugin, registry, config))
    if not plugin.programs:
        out.opcodes |= set(plugin.descriptor.spec.allowed_effects)
        return out
    for program in plugin.programs.values():
        for effect in program.body.effects:
            if effect.when is not None and not holds(effect.when, config):
                continue
            out.opcodes.add(effect.kind)
    return out
