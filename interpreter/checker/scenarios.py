"""Config scenarios: guards decided per scenario (by the one evaluator,
:mod:`dmn.interpreter.guards`) and bounded enumeration of enum/boolean fields."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from dmn.interpreter.checker.limits import MAX_SCENARIO_CANDIDATES, MAX_SCENARIOS
from dmn.interpreter.config_schema import enumerable_values
from dmn.interpreter.expressions import (
    BoolOp,
    Compare,
    ConfigRef,
    Expr,
    Literal,
    Not,
    references,
)
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


#: The value a field that guards only test for presence takes in a scenario where it is
#: present: such guards compare it with ``null`` and nothing else, so any value decides them.
PRESENT = "<present>"


def _presence_reads(expr: Expr, out: dict[str, bool]) -> None:
    """Record, per config field, whether every read of it in ``expr`` is a presence test
    (``call.config.x == null`` / ``!= null``)."""
    if isinstance(expr, Compare) and expr.op in ("==", "!="):
        sides = (expr.left, expr.right)
        for ref, other in (sides, sides[::-1]):
            if isinstance(ref, ConfigRef) and isinstance(other, Literal) and other.value is None:
                out.setdefault(ref.field, True)
                return
    if isinstance(expr, ConfigRef):
        out[expr.field] = False
    elif isinstance(expr, Compare | BoolOp):
        _presence_reads(expr.left, out)
        _presence_reads(expr.right, out)
    elif isinstance(expr, Not):
        _presence_reads(expr.operand, out)


def _scenarios(ctx: _PluginContext, guards: Iterable[Expr]) -> list[Scenario] | None:
    """Config scenarios to decide guards in: the given config, or every combination of
    the enum/boolean fields guards read — and of present/absent for an optional field they
    only test for presence (``call.config.routes != null``) — (None if that is not finite
    or too many)."""
    if ctx.config is not None:
        return [ctx.config]
    fields: list[str] = []
    presence_only: dict[str, bool] = {}
    for expr in guards:
        _presence_reads(expr, presence_only)
        for ref in references(expr):
            if isinstance(ref, ConfigRef) and ref.field not in fields:
                fields.append(ref.field)
    choices: list[list[Any]] = []
    for name in fields:
        prop = ctx.prop(name)
        values = enumerable_values(prop) if prop is not None else None
        if values is None and presence_only.get(name) and ctx.optional(name):
            choices.append([PRESENT, None])
            continue
        if values is None:
            return None
        if ctx.optional(name):
            values = [*values, None]
        choices.append(values)
    total = 1
    for c in choices:
        total *= len(c)
        if total > MAX_SCENARIO_CANDIDATES:
            return None
    out: list[Scenario] = []
    for combo in itertools.product(*choices):
        scenario = {k: v for k, v in zip(fields, combo, strict=True) if v is not None}
        if ctx.possible(scenario, fields):
            out.append(scenario)
            if len(out) > MAX_SCENARIOS:
                return None
    return out


def _scenario_text(scenario: Mapping[str, Any]) -> str:
    if not scenario:
        return "for every config"
    return "when " + ", ".join(f"{k}={v!r}" for k, v in sorted(scenario.items()))
