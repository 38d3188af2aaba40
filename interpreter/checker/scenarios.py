"""Config scenarios: guards decided per scenario (by the one evaluator,
:mod:`dmn.interpreter.guards`) and bounded enumeration of enum/boolean fields."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from dmn.interpreter.checker.limits import MAX_SCENARIOS
from dmn.interpreter.config_schema import enumerable_values
from dmn.interpreter.expressions import ConfigRef, Expr, references
from dmn.interpreter.guards import holds

if TYPE_CHECKING:
    from dmn.interpreter.checker.context import _PluginContext


Scenario = Mapping[str, Any]
Presence = Callable[[Scenario], bool]


def _always(scenario: Scenario) -> bool:
    return True


def _decided(expr: Expr | None, config: Mapping[str, Any]) -> bool:
    """A conditional-presence guard (``requiredWhen``/``forbiddenWhen``): an absent one
    never holds; otherwise :func:`dmn.interpreter.guards.holds` decides."""
    return expr is not None and holds(expr, config)


def _guard_holds(expr: Expr | None, config: Mapping[str, Any]) -> bool:
    """A ``when`` guard of an effect, port or output: an absent one always holds;
    otherwise :func:`dmn.interpreter.guards.holds` decides."""
    return expr is None or holds(expr, config)


def _scenarios(ctx: _PluginContext, guards: Iterable[Expr]) -> list[Scenario] | None:
    """Config scenarios to decide guards in: the given config, or every combination of
    the enum/boolean fields guards read (None if that is not finite or too many)."""
    if ctx.config is not None:
        return [ctx.config]
    fields: list[str] = []
    for expr in guards:
        for ref in references(expr):
            if isinstance(ref, ConfigRef) and ref.field not in fields:
                fields.append(ref.field)
    choices: list[list[Any]] = []
    for name in fields:
        prop = ctx.prop(name)
        values = enumerable_values(prop) if prop is not None else None
        if values is None:
            return None
        if ctx.optional(name):
            values = [*values, None]
        choices.append(values)
    total = 1
    for c in choices:
        total *= len(c)
        if total > MAX_SCENARIOS:
            return None
    out: list[Scenario] = []
    for combo in itertools.product(*choices):
        scenario = {k: v for k, v in zip(fields, combo, strict=True) if v is not None}
        if ctx.possible(scenario, fields):
            out.append(scenario)
    return out


def _scenario_text(scenario: Mapping[str, Any]) -> str:
    if not scenario:
        return "for every config"
    return "when " + ", ".join(f"{k}={v!r}" for k, v in sorted(scenario.items()))
