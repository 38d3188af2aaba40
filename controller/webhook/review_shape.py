"""What an AdmissionReview request must look like before anything decides on it.

The webhook fails closed on anything it does not understand. A request whose ``kind`` is
missing, not an object, or names a kind this webhook is not registered for; whose
``operation`` is not one of Kubernetes' four (exact case); whose ``userInfo``, ``object``,
``oldObject`` or their ``metadata`` have the wrong JSON type; or whose body nests deeper
than the document limit — is denied with ``E_ADMISSION_MALFORMED`` and the field at
fault, never allowed unvalidated and never answered with an exception's text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dmn.interpreter.diagnostics import Code, Diagnostic
from dmn.interpreter.source import MAX_DEPTH

#: the kinds the chart registers this webhook for
REVIEWED_KINDS = frozenset(
    {
        "NetworkTopology",
        "NetworkPlugin",
        "DeviceExposurePolicy",
        "NetworkTopologyRevision",
        "DeviceClass",
        "IPPool",
        "Pod",
    }
)
OPERATIONS = frozenset({"CREATE", "UPDATE", "DELETE", "CONNECT"})


def nesting_depth(value: Any, limit: int = MAX_DEPTH) -> int:
    """How deep ``value`` (parsed JSON) nests, counted without recursion; stops past
    ``limit`` (returns ``limit + 1``)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > limit:
            return limit + 1
        stack.extend((child, depth + 1) for child in children)
    return deepest


def _problem(message: str, path: str) -> Diagnostic:
    return Diagnostic(Code.E_ADMISSION_MALFORMED, message, path=path)


def request_problem(request: Mapping[str, Any]) -> Diagnostic | None:
    """Why ``request`` (the AdmissionReview's ``request``) cannot be reviewed, or None."""
    if not isinstance(request.get("uid", ""), str):
        return _problem("uid must be a string", "request.uid")
    kind = request.get("kind")
    if not isinstance(kind, Mapping) or not isinstance(kind.get("kind"), str):
        return _problem("kind must be an object with a string kind", "request.kind")
    if kind["kind"] not in REVIEWED_KINDS:
        return _problem(f"this webhook does not review kind {kind['kind'][:64]!r}", "request.kind")
    operation = request.get("operation")
    if not isinstance(operation, str) or operation not in OPERATIONS:
        shown = repr(operation)[:64]
        return _problem(
            f"operation {shown} is not one of {', '.join(sorted(OPERATIONS))}",
            "request.operation",
        )
    user = request.get("userInfo")
    if user is not None and (
        not isinstance(user, Mapping) or not isinstance(user.get("username", ""), str)
    ):
        return _problem("userInfo must be an object with a string username", "request.userInfo")
    for name in ("object", "oldObject"):
        obj = request.get(name)
        if obj is None:
            continue
        if not isinstance(obj, Mapping):
            return _problem(f"{name} must be an object", f"request.{name}")
        for part in ("metadata", "spec"):
            if obj.get(part) is not None and not isinstance(obj.get(part), Mapping):
                return _problem(f"{name}.{part} must be an object", f"request.{name}.{part}")
    if operation in ("CREATE", "UPDATE") and not isinstance(request.get("object"), Mapping):
        return _problem(f"{operation} needs the object", "request.object")
    return None
