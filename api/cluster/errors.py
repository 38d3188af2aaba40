"""API failures as typed exceptions, decoded from the server's ``Status`` body.

Controller code branches on *what* failed (``except Conflict``: re-read and retry;
``except NotFound``; ``except Invalid as e: e.causes``), never on HTTP numbers scattered
through the code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kubernetes.client.exceptions import ApiException


@dataclass(frozen=True)
class FieldCause:
    reason: str
    field: str
    message: str


class ApiFailure(Exception):
    """A request the API server refused; ``code``/``reason`` as in its ``Status``."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        causes: tuple[FieldCause, ...] = (),
        status: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.causes = causes
        self.status = status or {}


class NotFound(ApiFailure):
    pass


class InvalidName(ApiFailure):
    """A name or namespace that cannot be a segment of a request path (``..``, ``/``,
    ``%``, control characters, over 253 characters): refused before any request is sent,
    so no name can address another resource than the one it names."""

    def __init__(self, what: str, value: str) -> None:
        shown = repr(value[:80])
        super().__init__(400, "BadRequest", f"E_NAME_INVALID: {what} {shown} is not a valid name")


class AlreadyExists(ApiFailure):
    pass


class Conflict(ApiFailure):
    """409 on a stale resourceVersion or failed precondition: re-read and retry."""


class Invalid(ApiFailure):
    """422: the object failed validation; ``causes`` name the fields."""


class Gone(ApiFailure):
    """410: the requested resourceVersion is no longer available; relist."""


class Forbidden(ApiFailure):
    pass


class Unavailable(ApiFailure):
    """The server could not be reached or answered 5xx/429: retry later."""


def _classify(code: int, reason: str) -> type[ApiFailure]:
    if code == 404:
        return NotFound
    if code == 409:
        return AlreadyExists if reason == "AlreadyExists" else Conflict
    if code == 422:
        return Invalid
    if code == 410:
        return Gone
    if code == 403:
        return Forbidden
    if code == 0 or code == 429 or code >= 500:
        return Unavailable
    return ApiFailure


def from_status(status: dict[str, Any], code: int | None = None) -> ApiFailure:
    """Build the typed failure for a ``Status`` body (also used for watch ERROR events)."""
    code = int(status.get("code") or code or 0)
    reason = str(status.get("reason") or "")
    details = status.get("details") or {}
    causes = tuple(
        FieldCause(c.get("reason", ""), c.get("field", ""), c.get("message", ""))
        for c in details.get("causes") or []
    )
    message = str(status.get("message") or reason or f"HTTP {code}")
    return _classify(code, reason)(code, reason, message, causes, status)


def from_api_exception(exc: ApiException) -> ApiFailure:
    body: Any = getattr(exc, "body", None)
    status: dict[str, Any] = {}
    if body:
        try:
            parsed = json.loads(body)
            if isinstance(parsed, dict):
                status = parsed
        except (TypeError, ValueError):
            status = {"message": str(body)}
    code = int(getattr(exc, "status", 0) or 0)
    if not status:
        status = {
            "code": code,
            "reason": str(getattr(exc, "reason", "") or ""),
            "message": str(exc),
        }
    return from_status(status, code)
