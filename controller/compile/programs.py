"""Per-step program checking: each hook program of a step's plugin, checked with that
step's validated config, and the set of opcodes it will actually run under that config.

This is the compiler's only door into the language core's checker. Until a checker is
available it still reports what it can verify here: unknown opcodes (against the opcode
registry), opcodes outside the descriptor's ``allowedEffects``, and guards on effects.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dmn.controller.compile.conditions import GuardError, evaluate_guard
from dmn.interpreter.diagnostics import Code, Diagnostic
from dmn.opcodes.spec import OpcodeRegistry


@dataclass
class StepPrograms:
    diagnostics: list[tuple[Code, str, str]] = field(default_factory=list)  # code, message, path
    opcodes: set[str] = field(default_factory=set)


def _effects(program: Any) -> list[Mapping[str, Any]]:
    if not isinstance(program, Mapping):
        return []
    effects = program.get("effects", [])
    return [e for e in effects if isinstance(e, Mapping)] if isinstance(effects, list) else []


def step_programs(
    descriptor: Mapping[str, Any],
    config: Mapping[str, Any],
    registry: OpcodeRegistry | None,
) -> StepPrograms:
    """Opcodes a step runs under ``config`` and the problems found (paths relative to the
    descriptor spec). A Builtin descriptor without inline hooks runs its allowedEffects."""
    out = StepPrograms()
    allowed = set(descriptor.get("allowedEffects", []))
    hooks = descriptor.get("hooks")
    if not isinstance(hooks, Mapping) or not hooks:
        out.opcodes |= allowed
        return out
    for hook, program in sorted(hooks.items()):
        for index, effect in enumerate(_effects(program)):
            kind = effect.get("kind")
            where = f"hooks.{hook}.effects[{index}]"
            if not isinstance(kind, str):
                continue
            guard = effect.get("when")
            if isinstance(guard, str):
                try:
                    if not evaluate_guard(guard, config):
                        continue
                except GuardError:
                    pass  # the language checker reports malformed guards; count it conservatively
            if registry is not None and len(registry) and kind not in registry:
                out.diagnostics.append((Code.E_UNKNOWN_OPCODE, f"unknown opcode {kind}", where))
            if kind not in allowed:
                out.diagnostics.append(
                    (Code.E_EFFECT_DENIED, f"{kind} is not in the plugin's allowedEffects", where)
                )
            out.opcodes.add(kind)
    return out


def as_diagnostics(found: StepPrograms, prefix: str) -> list[Diagnostic]:
    return [Diagnostic(code=c, message=m, path=f"{prefix}.{p}") for c, m, p in found.diagnostics]
