"""The one guard evaluator: does a guard hold for a config?

Guards (``when:`` on effects and ports, ``requiredWhen:`` / ``forbiddenWhen:`` on config
fields) are decided in four places — config validation (``config_schema``), the checker's
scenario analysis, the binder and the topology compiler's effect budget — and all of them
call :func:`holds`, so lint, compile and bind can never disagree about one program.

The one answer: a guard holds if and only if it parses and evaluates to exactly ``true``
over the config. Everything else does not hold: ``false``, a guard that does not parse,
reads anything but ``call.config``, or is ill-typed for the values it meets (an ordering
of an absent field, ``and`` over a string: :class:`~dmn.interpreter.expressions.GuardError`).
Those guards are checker errors (``E_SYNTAX``, ``E_REF_UNRESOLVED``, ``E_GUARD_TYPE``), and
the checker's typing is sound for configs that validate — a guard that checks clean never
raises for them — so "does not hold" is only ever the answer for a program the checker
refused. Whether an *absent* guard holds (an effect without ``when`` runs; a field without
``requiredWhen`` is not required) is the caller's to say.

Pure; parsed guards are cached by text.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from dmn.interpreter.expressions import Expr, GuardError, evaluate, parse_guard


@lru_cache(maxsize=4096)
def parsed_guard(text: str) -> Expr | None:
    """The guard's AST, or None if it does not parse."""
    expr, problems = parse_guard(text)
    return None if problems else expr


def holds(guard: str | Expr, config: Mapping[str, Any]) -> bool:
    """Does ``guard`` (source text or a parsed guard) hold for ``config``? See the module."""
    expr = parsed_guard(guard) if isinstance(guard, str) else guard
    if expr is None:
        return False
    try:
        return evaluate(expr, config) is True
    except GuardError:
        return False
