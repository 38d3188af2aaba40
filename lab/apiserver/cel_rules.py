"""``x-kubernetes-validations``: CEL rules of CRD schemas, evaluated with the real ``cel``.

Each rule runs with ``self`` bound to the value at its schema node (``oldSelf`` to the stored
value on updates). As in Kubernetes, a *transition rule* (one that reads ``oldSelf``) is only
evaluated on updates where an old value exists, unless ``optionalOldSelf`` is set. A false
result is one field cause: ``reason`` (default ``FieldValueInvalid``), field = node path plus
``fieldPath``, message = ``messageExpression`` (when it yields a non-empty string), else
``message``, else ``failed rule: <rule>``.

Knowingly different from Kubernetes: the rule runs on the ``cel`` package's standard
environment, without the Kubernetes CEL libraries (quantity, url, ip/cidr, format, list
extensions) and without cost limits; a rule that does not compile or fails to evaluate in
this environment is *skipped* (logged at debug) rather than failing the request, so the lab
never rejects what a real server would accept because of an environment gap.
"""

from __future__ import annotations

import logging
from functools import lru_cache
from typing import Any

import cel

from . import errors, schema
from .errors import Cause

log = logging.getLogger(__name__)

_REASONS = {"FieldValueInvalid", "FieldValueForbidden", "FieldValueRequired", "FieldValueDuplicate"}


@lru_cache(maxsize=1024)
def _compile(rule: str) -> tuple[Any, bool] | None:
    try:
        program = cel.compile(rule)
    except Exception as exc:  # the cel package raises ValueError and friends
        log.debug("cel rule skipped (compile) rule=%r error=%s", rule, exc)
        return None
    try:
        uses_old = "oldSelf" in program.variables()
    except Exception:
        uses_old = "oldSelf" in rule
    return program, uses_old


def _message(rule: dict[str, Any], context: dict[str, Any]) -> str:
    """``messageExpression`` when it evaluates to a non-empty string, else ``message``."""
    expression = rule.get("messageExpression")
    if isinstance(expression, str):
        compiled = _compile(expression)
        if compiled is not None:
            try:
                result = compiled[0].execute(context)
            except Exception as exc:
                log.debug("cel messageExpression failed expression=%r error=%s", expression, exc)
            else:
                if isinstance(result, str) and result.strip():
                    return result
    return str(rule.get("message") or f"failed rule: {rule.get('rule', '')}")


def _cause(rule: dict[str, Any], value: Any, path: str, message: str) -> Cause:
    field_path = str(rule.get("fieldPath") or "")
    if field_path:
        field = (
            path + field_path
            if field_path.startswith(("[", ".")) or not path
            else f"{path}.{field_path}"
        )
        field = field.lstrip(".")
    else:
        field = path
    reason = rule.get("reason") or "FieldValueInvalid"
    if reason not in _REASONS:
        reason = "FieldValueInvalid"
    if reason == "FieldValueInvalid":
        return errors.invalid(field, value, message)
    if reason == "FieldValueForbidden":
        return errors.forbidden(field, message)
    if reason == "FieldValueRequired":
        return errors.required(field, message)
    return Cause(reason, field, f"Duplicate value: {message}")


def evaluate_rules(node: schema.Schema, value: Any, old: Any, path: str) -> list[Cause]:
    causes: list[Cause] = []
    for rule in node.get("x-kubernetes-validations") or []:
        text = rule.get("rule")
        if not isinstance(text, str):
            continue
        compiled = _compile(text)
        if compiled is None:
            continue
        program, uses_old = compiled
        if uses_old and old is None and not rule.get("optionalOldSelf"):
            continue
        context: dict[str, Any] = {"self": value}
        if uses_old:
            context["oldSelf"] = old
        try:
            result = program.execute(context)
        except Exception as exc:
            log.debug("cel rule skipped (eval) rule=%r path=%s error=%s", text, path, exc)
            continue
        if result is not True:
            causes.append(_cause(rule, value, path, _message(rule, context)))
    return causes


def rule_evaluator() -> schema.CustomRule | None:
    """The evaluator the store calls for schema nodes that carry rules."""
    return evaluate_rules
