"""Standard status conditions (metav1.Condition) and reason-coded diagnostics in status."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from dmn.api.served_yaml import POSITION_NOTE
from dmn.interpreter.diagnostics import Diagnostic

MAX_DIAGNOSTICS = 64


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def set_condition(
    conditions: Sequence[dict[str, Any]] | None,
    type_: str,
    status: bool | None,
    reason: str,
    message: str,
    generation: int | None,
) -> list[dict[str, Any]]:
    """Conditions with ``type_`` set (``status`` None: ``Unknown``); lastTransitionTime moves
    only when status changes."""
    value = "Unknown" if status is None else "True" if status else "False"
    out = [dict(c) for c in conditions or [] if c.get("type") != type_]
    old = next((c for c in conditions or [] if c.get("type") == type_), None)
    changed = old is None or old.get("status") != value
    cond: dict[str, Any] = {
        "type": type_,
        "status": value,
        "reason": reason,
        "message": message[:32768],
        "lastTransitionTime": now_rfc3339() if changed else old["lastTransitionTime"],  # type: ignore[index]
    }
    if generation is not None:
        cond["observedGeneration"] = generation
    out.append(cond)
    return sorted(out, key=lambda c: c["type"])


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return dict(c)
    return None


def condition_true(obj: dict[str, Any], type_: str) -> bool:
    """Whether ``obj`` reports condition ``type_`` with status ``"True"`` (absent is not)."""
    found = condition(obj, type_)
    return found is not None and found.get("status") == "True"


def diagnostic_entries(diagnostics: Iterable[Diagnostic]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for d in list(diagnostics)[:MAX_DIAGNOSTICS]:
        entry: dict[str, Any] = {
            "code": d.code.value,
            "path": d.path[:512],
            "message": d.message[:2048],
        }
        if d.file:
            entry["line"] = d.line
            entry["column"] = d.column
        out.append(entry)
    return out


def summary(diagnostics: Sequence[Diagnostic]) -> str:
    """The first diagnostic in one line; its position (when it has one) is a line:column in
    the served object's YAML rendering, and the message says so (:mod:`dmn.api.served_yaml`)."""
    if not diagnostics:
        return ""
    first = diagnostics[0]
    more = f" (and {len(diagnostics) - 1} more)" if len(diagnostics) > 1 else ""
    where = f" ({first.file}:{first.line}:{first.column})" if first.file else ""
    note = f" [{POSITION_NOTE}]" if first.file else ""
    return f"{first.code.value} at {first.path}{where}: {first.message}{more}{note}"
