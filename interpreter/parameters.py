"""Reasoning about opcode parameter models (pydantic) from the checker and binder.

Parameters are JSON, so every check validates *JSON* against the opcode's model in
strict mode (no coercion; enum values accepted as their JSON strings). A binding
``{from: call.config.X}`` is checked by substituting the config field's type: every
boundary value the config schema admits (enum members, both booleans, minimum and
maximum, shortest and longest string) must be accepted by the parameter's type —
otherwise a valid config could produce a payload the opcode rejects.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from typing import Annotated, Any

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from dmn.interpreter.config_schema import (
    AnyProperty,
    ArraySchema,
    BooleanSchema,
    IntegerSchema,
    ObjectSchema,
    StringSchema,
    value_problems,
)
from dmn.interpreter.value_formats import sample

#: Stand-ins for "no bound given" when sampling config ranges.
UNBOUNDED_INT = 2**63 - 1
UNBOUNDED_LENGTH = 4096


def model_fields(model: type[BaseModel]) -> dict[str, FieldInfo]:
    """Parameter name (as written in documents: alias if any) -> field."""
    out: dict[str, FieldInfo] = {}
    for name, info in model.model_fields.items():
        out[info.alias or name] = info
    return out


@lru_cache(maxsize=1024)
def _adapter(model: type[BaseModel], field: str) -> TypeAdapter[Any] | None:
    info = model_fields(model).get(field)
    if info is None:
        return None
    annotation: Any = info.annotation
    if info.metadata:
        annotation = Annotated[(annotation, *info.metadata)]
    return TypeAdapter(annotation)


_SCALARS = (str, int, float, bool, type(None))


def field_error(model: type[BaseModel], field: str, value: Any) -> str | None:
    """Why ``value`` is not acceptable for ``field`` of ``model`` (None if it is).

    Pure; a scalar value's answer is remembered per (model, field, type, value) — the type
    is part of the key because strict validation tells ``True`` from ``1`` (issue 15: the
    checker asks the same questions for every step of a topology)."""
    if type(value) in _SCALARS:
        return _scalar_field_error(model, field, type(value).__name__, value)
    return _field_error(model, field, value)


@lru_cache(maxsize=8192)
def _scalar_field_error(model: type[BaseModel], field: str, kind: str, value: Any) -> str | None:
    return _field_error(model, field, value)


def _field_error(model: type[BaseModel], field: str, value: Any) -> str | None:
    adapter = _adapter(model, field)
    if adapter is None:
        return f"unknown parameter {field!r}"
    try:
        payload = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return "value is not JSON"
    try:
        adapter.validate_json(payload, strict=True)
    except ValidationError as exc:
        return "; ".join(_clean(e["msg"]) for e in exc.errors(include_url=False))
    return None


def model_error(model: type[BaseModel], parameters: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Validate a whole parameter payload; returns (field or "", message) pairs."""
    try:
        payload = json.dumps(dict(parameters), allow_nan=False)
    except (TypeError, ValueError):
        return [("", "parameters are not JSON")]
    try:
        model.model_validate_json(payload, strict=True)
    except ValidationError as exc:
        out = []
        for e in exc.errors(include_url=False):
            loc = e["loc"]
            out.append((str(loc[0]) if loc else "", _clean(e["msg"])))
        return out
    return []


def is_required(model: type[BaseModel], field: str) -> bool:
    info = model_fields(model).get(field)
    return info is not None and info.is_required()


def required_fields(model: type[BaseModel]) -> list[str]:
    return [name for name, info in model_fields(model).items() if info.is_required()]


def _clean(message: str) -> str:
    return message[len("Value error, ") :] if message.startswith("Value error, ") else message


def config_samples(prop: AnyProperty) -> list[Any]:
    """Boundary values a config property admits (see module docstring).

    A formatted string (``format: ip-interface``, ...) is sampled by valid values of both
    families; an object by its required properties alone, by each optional one added alone
    (its first and its last sample) and by all of them — every candidate the property
    itself refuses (a route through a gateway in ``link`` scope) dropped, because no valid
    config holds it. An array of formatted strings or of objects holds distinct items when
    it declares ``uniqueItems`` (a config cannot hold the same address twice) and the same
    item repeated when it does not (a config can)."""
    if isinstance(prop, ArraySchema) and _structured(prop.items):
        return _structured_array_samples(prop)
    if isinstance(prop, StringSchema) and prop.format is not None:
        return [sample(prop.format, 0, 4), sample(prop.format, 0, 6)]
    if isinstance(prop, ObjectSchema):
        return [*_object_samples(prop, 0, 4), *_object_samples(prop, 0, 6)] or [{}]
    return _plain_samples(prop)


def _plain_samples(prop: AnyProperty) -> list[Any]:
    if isinstance(prop, BooleanSchema):
        return [False, True]
    if isinstance(prop, IntegerSchema):
        if prop.enum is not None:
            return list(prop.enum)
        lo = prop.minimum if prop.minimum is not None else -UNBOUNDED_INT
        hi = prop.maximum if prop.maximum is not None else UNBOUNDED_INT
        return [lo, hi]
    if isinstance(prop, StringSchema):
        if prop.enum is not None:
            return list(prop.enum)
        shortest = prop.min_length if prop.min_length is not None else 0
        longest = prop.max_length if prop.max_length is not None else UNBOUNDED_LENGTH
        return ["a" * shortest, "a" * longest]
    if isinstance(prop, ArraySchema):
        items = _plain_samples(prop.items)
        lo = prop.min_items or 0
        hi = prop.max_items if prop.max_items is not None else max(lo, 1)
        return [[items[0]] * lo, [items[-1]] * hi]
    return [{}]  # pragma: no cover


def _structured(prop: AnyProperty) -> bool:
    return isinstance(prop, ObjectSchema) or (
        isinstance(prop, StringSchema) and prop.format is not None
    )


def _indexed_samples(prop: AnyProperty, index: int, family: int) -> list[Any]:
    """Valid samples of ``prop``, distinct from those of another ``index``."""
    if isinstance(prop, StringSchema) and prop.format is not None:
        return [sample(prop.format, index, family)]
    if isinstance(prop, ObjectSchema):
        return _object_samples(prop, index, family)
    if isinstance(prop, ArraySchema) and _structured(prop.items):
        return _structured_array_samples(prop)
    return _plain_samples(prop)


def _object_samples(schema: ObjectSchema, index: int, family: int) -> list[dict[str, Any]]:
    each = {name: _indexed_samples(prop, index, family) for name, prop in schema.properties.items()}
    if any(not values for values in each.values()):
        return []
    base = {name: each[name][0] for name in schema.required}
    candidates = [base]
    for name in schema.properties:
        if name not in schema.required:
            candidates += [{**base, name: each[name][0]}, {**base, name: each[name][-1]}]
    candidates += [
        {name: values[0] for name, values in each.items()},
        {name: values[-1] for name, values in each.items()},
    ]
    out: list[dict[str, Any]] = []
    for candidate in candidates:
        if candidate not in out and not value_problems(schema, candidate):
            out.append(candidate)
    return out


def _structured_array_samples(prop: ArraySchema) -> list[list[Any]]:
    lo = prop.min_items or 0
    hi = prop.max_items if prop.max_items is not None else max(lo, 1)
    out: list[list[Any]] = []
    for family in (4, 6):
        per_index = [_indexed_samples(prop.items, k, family) for k in range(max(hi, 1))]
        for variant in range(min(len(v) for v in per_index)):
            if prop.unique_items:
                items = [per_index[k][variant] for k in range(hi)]
            else:
                items = [per_index[0][variant]] * hi
            out += [items[:lo], items]
    return out or [[]]


def describe(prop: AnyProperty) -> str:
    """Short human description of a config property's type."""
    if isinstance(prop, IntegerSchema):
        if prop.enum is not None:
            return f"integer one of {prop.enum}"
        lo = prop.minimum if prop.minimum is not None else "-inf"
        hi = prop.maximum if prop.maximum is not None else "inf"
        return f"integer {lo}..{hi}"
    if isinstance(prop, StringSchema):
        if prop.enum is not None:
            return f"string one of {prop.enum}"
        if prop.format is not None:
            return f"string of format {prop.format}"
        longest = prop.max_length if prop.max_length is not None else "unbounded"
        return f"string of length {prop.min_length or 0}..{longest}"
    if isinstance(prop, ArraySchema):
        bound = prop.max_items if prop.max_items is not None else "unbounded"
        return f"array of {prop.min_items or 0}..{bound} {describe(prop.items)}"
    if isinstance(prop, ObjectSchema) and prop.format is not None:
        return f"object of format {prop.format}"
    return prop.type
