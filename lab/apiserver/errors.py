"""Kubernetes ``Status`` failures raised inside the lab API server.

Every failure the server reports is an :class:`ApiError` that already carries the exact
``Status`` body a real API server would send (kind ``Status``, ``reason``, ``code``,
``details`` with field ``causes`` for 422 Invalid), so the official client raises the same
``ApiException`` against the lab as against a cluster.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Cause:
    """One field error of a 422 Invalid (``metav1.StatusCause``)."""

    reason: str  # FieldValueRequired, FieldValueInvalid, FieldValueNotSupported, ...
    field: str  # "spec.steps[0].id"
    message: str  # "Required value", 'Invalid value: "x": ...'

    def render(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message

    def as_dict(self) -> dict[str, str]:
        return {"reason": self.reason, "message": self.render(), "field": self.field}


def describe_value(value: Any) -> str:
    """Render a value the way apimachinery field errors print it."""
    if isinstance(value, dict):
        return '"object"'
    if isinstance(value, list):
        return '"array"'
    return json.dumps(value)


def required(field: str, detail: str = "") -> Cause:
    return Cause("FieldValueRequired", field, "Required value" + (f": {detail}" if detail else ""))


def invalid(field: str, value: Any, detail: str) -> Cause:
    return Cause("FieldValueInvalid", field, f"Invalid value: {describe_value(value)}: {detail}")


def type_invalid(field: str, value: Any, detail: str) -> Cause:
    return Cause(
        "FieldValueTypeInvalid", field, f"Invalid value: {describe_value(value)}: {detail}"
    )


def not_supported(field: str, value: Any, allowed: list[Any]) -> Cause:
    options = ", ".join(json.dumps(v) for v in allowed)
    return Cause(
        "FieldValueNotSupported",
        field,
        f"Unsupported value: {json.dumps(value)}: supported values: {options}",
    )


def too_long(field: str, limit: int) -> Cause:
    return Cause("FieldValueTooLong", field, f"Too long: may not be more than {limit} bytes")


def too_many(field: str, actual: int, limit: int) -> Cause:
    return Cause("FieldValueTooMany", field, f"Too many: {actual}: must have at most {limit} items")


def duplicate(field: str, value: Any) -> Cause:
    return Cause(
        "FieldValueDuplicate", field, f"Duplicate value: {json.dumps(value, sort_keys=True)}"
    )


def forbidden(field: str, detail: str) -> Cause:
    return Cause("FieldValueForbidden", field, f"Forbidden: {detail}")


class ApiError(Exception):
    """A request failure with the ``Status`` body to send."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def _details(qualified: str, name: str, group: str) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name, "kind": qualified.split(".", 1)[0]}
    if group:
        details["group"] = group
    return details


def not_found(qualified: str, name: str, group: str = "") -> ApiError:
    return ApiError(
        404, "NotFound", f'{qualified} "{name}" not found', _details(qualified, name, group)
    )


def path_not_found() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def already_exists(qualified: str, name: str, group: str = "") -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{qualified} "{name}" already exists',
        _details(qualified, name, group),
    )


def conflict(qualified: str, name: str, detail: str, group: str = "") -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified} "{name}": {detail}',
        _details(qualified, name, group),
    )


STALE = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


def invalid_object(kind: str, group: str, name: str, causes: list[Cause]) -> ApiError:
    qualified_kind = f"{kind}.{group}" if group else kind
    rendered = [c.render() for c in causes]
    summary = rendered[0] if len(rendered) == 1 else "[" + ", ".join(rendered) + "]"
    details: dict[str, Any] = {
        "name": name,
        "kind": kind,
        "causes": [c.as_dict() for c in causes],
    }
    if group:
        details["group"] = group
    return ApiError(422, "Invalid", f'{qualified_kind} "{name}" is invalid: {summary}', details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def gone(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def method_not_allowed(message: str) -> ApiError:
    return ApiError(405, "MethodNotAllowed", message)


def unsupported_media_type(accepted: list[str]) -> ApiError:
    return ApiError(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        + ", ".join(accepted),
    )


def forbidden_request(message: str, details: dict[str, Any] | None = None) -> ApiError:
    return ApiError(403, "Forbidden", message, details)


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


def internal(message: str) -> ApiError:
    return ApiError(500, "InternalError", message)
