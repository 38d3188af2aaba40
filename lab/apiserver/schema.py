"""Structural OpenAPI v3 schemas of CustomResourceDefinitions: pruning, defaulting, validation.

The order matches the real API server: unknown fields are pruned (reported as warnings, or
rejected when the request asks ``fieldValidation=Strict``), ``null`` values of non-nullable
fields are dropped, defaults are applied, then the object is validated and every violation
becomes one field cause of a 422 Invalid.

Supported keywords: ``type``, ``nullable``, ``properties``, ``additionalProperties``,
``items``, ``required``, ``enum``, ``minimum``/``maximum`` (+ ``exclusiveMinimum`` /
``exclusiveMaximum`` booleans), ``multipleOf``, ``minLength``/``maxLength``, ``pattern``
(RE2, linear time, as the real API server: :mod:`dmn.interpreter.patterns`),
``minItems``/``maxItems``,
``minProperties``/``maxProperties``, ``allOf``/``anyOf``/``oneOf``/``not``, ``default``,
``x-kubernetes-preserve-unknown-fields``, ``x-kubernetes-int-or-string``,
``x-kubernetes-embedded-resource``, ``x-kubernetes-list-type`` (``set`` / ``map`` with
``x-kubernetes-list-map-keys`` — duplicates rejected). ``format`` is not checked.
``x-kubernetes-validations`` (CEL rules) are evaluated by :mod:`.cel_rules` when the CEL
implementation can compile them.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

from dmn.interpreter.patterns import pattern_problem, search

from . import errors
from .errors import Cause

Schema = dict[str, Any]


def child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def index(path: str, i: int) -> str:
    return f"{path}[{i}]"


def _preserves(schema: Schema) -> bool:
    return bool(schema.get("x-kubernetes-preserve-unknown-fields")) or (
        schema.get("additionalProperties") is True
    )


def prune(schema: Schema, value: Any, path: str = "", *, root: bool = True) -> list[str]:
    """Drop unknown fields and non-nullable nulls in place; return the unknown field paths."""
    unknown: list[str] = []
    if isinstance(value, dict):
        props: dict[str, Schema] = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        keep_meta = root or bool(schema.get("x-kubernetes-embedded-resource"))
        for key in list(value):
            if keep_meta and key in ("apiVersion", "kind", "metadata"):
                continue
            sub = props.get(key)
            if sub is None and isinstance(extra, dict):
                sub = extra
            if sub is None:
                if not _preserves(schema):
                    unknown.append(child(path, key))
                    del value[key]
                continue
            if value[key] is None and not sub.get("nullable"):
                del value[key]
                continue
            sub_path = child(path, key) if key in props else f"{path}[{key}]"
            unknown += prune(sub, value[key], sub_path, root=False)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                unknown += prune(items, item, index(path, i), root=False)
    return unknown


def apply_defaults(schema: Schema, value: Any) -> None:
    """Fill in ``default`` values of absent properties, recursively, in place."""
    if isinstance(value, dict):
        props: dict[str, Schema] = schema.get("properties") or {}
        for key, sub in props.items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                apply_defaults(sub, value[key])
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key, item in value.items():
                if key not in props:
                    apply_defaults(extra, item)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for item in value:
                apply_defaults(items, item)


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _type_ok(expected: str, value: Any) -> bool:
    actual = _type_name(value)
    return actual == expected or (expected == "number" and actual == "integer")


def _fmt(number: Any) -> str:
    return json.dumps(number)


CustomRule = Callable[[Schema, Any, Any, str], list[Cause]]


def validate(
    schema: Schema,
    value: Any,
    path: str = "",
    *,
    old: Any = None,
    rules: CustomRule | None = None,
) -> list[Cause]:
    """Validate ``value`` against a structural schema; return the field causes (empty = valid).

    ``rules`` evaluates ``x-kubernetes-validations`` of a node, given (schema, value, old value
    or None, path); ``old`` is the stored object for updates (transition rules).
    """
    causes: list[Cause] = []
    _validate(schema, value, path, old, rules, causes)
    return causes


def _validate(
    schema: Schema,
    value: Any,
    path: str,
    old: Any,
    rules: CustomRule | None,
    out: list[Cause],
) -> None:
    if value is None:
        if not schema.get("nullable") and schema.get("type"):
            out.append(
                errors.type_invalid(
                    path,
                    value,
                    f'{path or "<root>"} in body must be of type {schema["type"]}: "null"',
                )
            )
        return
    if schema.get("x-kubernetes-int-or-string"):
        if _type_name(value) not in ("integer", "string"):
            out.append(
                errors.type_invalid(
                    path,
                    value,
                    f'{path} in body must be of type integer or string: "{_type_name(value)}"',
                )
            )
            return
    elif "type" in schema and not _type_ok(schema["type"], value):
        out.append(
            errors.type_invalid(
                path,
                value,
                f'{path} in body must be of type {schema["type"]}: "{_type_name(value)}"',
            )
        )
        return
    before = len(out)
    if "enum" in schema and value not in schema["enum"]:
        out.append(errors.not_supported(path, value, list(schema["enum"])))
    if isinstance(value, str):
        _validate_string(schema, value, path, out)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        _validate_number(schema, value, path, out)
    elif isinstance(value, list):
        _validate_array(schema, value, path, old, rules, out)
    elif isinstance(value, dict):
        _validate_object(schema, value, path, old, rules, out)
    _validate_combinators(schema, value, path, out)
    if rules is not None and schema.get("x-kubernetes-validations") and len(out) == before:
        out.extend(rules(schema, value, old, path))


def _validate_string(schema: Schema, value: str, path: str, out: list[Cause]) -> None:
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        out.append(errors.too_long(path, schema["maxLength"]))
    if "minLength" in schema and len(value) < schema["minLength"]:
        out.append(
            errors.invalid(
                path, value, f"{path} in body should be at least {schema['minLength']} chars long"
            )
        )
    pattern = schema.get("pattern")
    if pattern is not None:
        problem = pattern_problem(pattern)
        if problem is not None:
            out.append(errors.invalid(path, value, f"{path}: schema {problem}"))
        elif not search(pattern, value):
            out.append(errors.invalid(path, value, f"{path} in body should match '{pattern}'"))


def _validate_number(schema: Schema, value: float, path: str, out: list[Cause]) -> None:
    if "maximum" in schema:
        limit = schema["maximum"]
        if schema.get("exclusiveMaximum") and value >= limit:
            out.append(
                errors.invalid(path, value, f"{path} in body should be less than {_fmt(limit)}")
            )
        elif value > limit:
            out.append(
                errors.invalid(
                    path, value, f"{path} in body should be less than or equal to {_fmt(limit)}"
                )
            )
    if "minimum" in schema:
        limit = schema["minimum"]
        if schema.get("exclusiveMinimum") and value <= limit:
            out.append(
                errors.invalid(path, value, f"{path} in body should be greater than {_fmt(limit)}")
            )
        elif value < limit:
            out.append(
                errors.invalid(
                    path, value, f"{path} in body should be greater than or equal to {_fmt(limit)}"
                )
            )
    step = schema.get("multipleOf")
    if step and (value / step) != int(value / step):
        out.append(
            errors.invalid(path, value, f"{path} in body should be a multiple of {_fmt(step)}")
        )


def _validate_array(
    schema: Schema,
    value: list[Any],
    path: str,
    old: Any,
    rules: CustomRule | None,
    out: list[Cause],
) -> None:
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        out.append(errors.too_many(path, len(value), schema["maxItems"]))
    if "minItems" in schema and len(value) < schema["minItems"]:
        out.append(
            errors.invalid(
                path, value, f"{path} in body should have at least {schema['minItems']} items"
            )
        )
    list_type = schema.get("x-kubernetes-list-type")
    if list_type == "set":
        seen: list[Any] = []
        for i, item in enumerate(value):
            if item in seen:
                out.append(errors.duplicate(index(path, i), item))
            else:
                seen.append(item)
    elif list_type == "map":
        map_keys = schema.get("x-kubernetes-list-map-keys") or []
        seen_keys: set[str] = set()
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                continue
            key = json.dumps({k: item.get(k) for k in map_keys}, sort_keys=True)
            if key in seen_keys:
                out.append(errors.duplicate(index(path, i), {k: item.get(k) for k in map_keys}))
            seen_keys.add(key)
    items = schema.get("items")
    if isinstance(items, dict):
        old_items = _old_list_items(schema, old)
        for i, item in enumerate(value):
            _validate(items, item, index(path, i), old_items(item, i), rules, out)


def _old_list_items(schema: Schema, old: Any) -> Callable[[Any, int], Any]:
    """Correlate list items with their old values (map lists by key), for transition rules."""
    if not isinstance(old, list) or schema.get("x-kubernetes-list-type") != "map":
        return lambda _item, _i: None
    keys = schema.get("x-kubernetes-list-map-keys") or []
    by_key = {
        json.dumps({k: o.get(k) for k in keys}, sort_keys=True): o
        for o in old
        if isinstance(o, dict)
    }

    def lookup(item: Any, _i: int) -> Any:
        if not isinstance(item, dict):
            return None
        return by_key.get(json.dumps({k: item.get(k) for k in keys}, sort_keys=True))

    return lookup


def _validate_object(
    schema: Schema,
    value: dict[str, Any],
    path: str,
    old: Any,
    rules: CustomRule | None,
    out: list[Cause],
) -> None:
    for name in schema.get("required") or []:
        if name not in value:
            out.append(errors.required(child(path, name)))
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        out.append(errors.too_many(path, len(value), schema["maxProperties"]))
    if "minProperties" in schema and len(value) < schema["minProperties"]:
        out.append(
            errors.invalid(
                path,
                value,
                f"{path} in body should have at least {schema['minProperties']} properties",
            )
        )
    props: dict[str, Schema] = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    old_map = old if isinstance(old, dict) else {}
    for key, item in value.items():
        if key in props:
            _validate(props[key], item, child(path, key), old_map.get(key), rules, out)
        elif isinstance(extra, dict):
            _validate(extra, item, f"{path}[{key}]", old_map.get(key), rules, out)


def _validate_combinators(schema: Schema, value: Any, path: str, out: list[Cause]) -> None:
    for sub in schema.get("allOf") or []:
        _validate(sub, value, path, None, None, out)
    any_of = schema.get("anyOf")
    if any_of and not any(not validate(s, value, path) for s in any_of):
        out.append(
            errors.invalid(path, value, f"{path} in body must validate at least one schema (anyOf)")
        )
    one_of = schema.get("oneOf")
    if one_of and sum(1 for s in one_of if not validate(s, value, path)) != 1:
        out.append(
            errors.invalid(
                path, value, f"{path} in body must validate one and only one schema (oneOf)"
            )
        )
    negated = schema.get("not")
    if isinstance(negated, dict) and not validate(negated, value, path):
        out.append(
            errors.invalid(path, value, f"{path} in body must not validate the schema (not)")
        )
