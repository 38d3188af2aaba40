"""A ValidatingAdmissionPolicy evaluated as the API server evaluates it, with a real CEL.

One request: the operation follows from which object is there (CREATE without an old one,
DELETE without a new one, else UPDATE); ``matchConditions`` first, then the variables in
order (a later one may use an earlier one), then every validation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import cel

NODE_NAME_EXTRA = "authentication.kubernetes.io/node-name"


def evaluate_policy(
    policy: Mapping[str, Any], user: str, bound_node: str | None, obj: Any, old: Any
) -> tuple[str, list[str]]:
    """('skip' (not matched), 'allow' or 'deny', the messages of the failed validations) of
    ``policy`` (the object's ``spec``) for a request by ``user`` whose token is bound to
    ``bound_node`` (None: not bound to a node)."""
    extra = {} if bound_node is None else {NODE_NAME_EXTRA: [bound_node]}
    operation = "CREATE" if old is None else "DELETE" if obj is None else "UPDATE"
    request = {"userInfo": {"username": user, "extra": extra}, "operation": operation}
    ctx: dict[str, Any] = {"request": request, "object": obj, "oldObject": old}
    if not all(cel.evaluate(m["expression"], ctx) for m in policy.get("matchConditions") or ()):
        return "skip", []
    variables: dict[str, Any] = {}
    ctx["variables"] = variables
    for v in policy.get("variables") or ():
        variables[v["name"]] = cel.evaluate(v["expression"], ctx)
    messages = []
    for v in policy["validations"]:
        if not cel.evaluate(v["expression"], ctx):
            expr = v.get("messageExpression")
            messages.append(cel.evaluate(expr, ctx) if expr else v["message"])
    return ("deny" if messages else "allow"), messages
