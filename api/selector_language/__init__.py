"""CEL device selectors, understood before they run: syntax, types and worst-case cost.

:func:`check_selector` is what every place that accepts an administrator's selector
(lint, compile, explain, the webhook, the controller) asks before compiling or evaluating
it with the ``cel`` binding, which has neither a cost limit nor a type checker.
"""

from .checker import MAX_COST, SYNTAX, TOO_COSTLY, TYPE_ERROR, Problem, Verdict, check_selector
from .syntax import MAX_EXPRESSION_LENGTH

__all__ = [
    "MAX_COST",
    "MAX_EXPRESSION_LENGTH",
    "SYNTAX",
    "TOO_COSTLY",
    "TYPE_ERROR",
    "Problem",
    "Verdict",
    "check_selector",
]
