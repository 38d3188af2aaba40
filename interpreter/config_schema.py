"""``configSchema``: the strict JSON-Schema subset a plugin uses to describe its config.

Why a subset: a plugin's config decides guards, port contracts and opcode parameters,
so the checker must be able to *reason* about it (enumerate enum/boolean values,
compare integer ranges and string lengths with an opcode's parameter model). Full
JSON Schema cannot be reasoned about that way; this subset can.

The subset (every keyword not listed is an error, ``E_UNKNOWN_FIELD``):

* the root is ``{type: object, additionalProperties: false, properties: {...},
  required: [...]}`` — ``additionalProperties`` must be present and ``false``;
* a property is one of

  - ``{type: string, minLength?, maxLength?, pattern?, enum?, default?}``
    (``pattern`` is an RE2 full-match pattern, matched in linear time — a pattern RE2
    does not accept is ``E_PATTERN``, see :mod:`dmn.interpreter.patterns`; ``enum`` a
    non-empty list of distinct strings),
  - ``{type: string, format, default?}``: a network value (``ip-address``,
    ``ip-interface``, ``ip-prefix``, ``ip-route-destination``, ``mac-address``) checked by
    the rule the ``ip/*`` opcodes apply (:mod:`dmn.interpreter.value_formats`); a format
    fixes the values, so it takes no ``pattern``, ``enum``, ``minLength`` or ``maxLength``,
  - ``{type: integer, minimum?, maximum?, enum?, default?}``,
  - ``{type: boolean, default?}``,
  - ``{type: array, items: <string|integer|boolean|object property>, minItems?,
    maxItems?, uniqueItems?, default?}`` — an array of objects must declare ``maxItems``;
    ``uniqueItems`` compares formatted items by their identity (the address of an
    ``ip-interface``, the kernel's key of an ``ip-route``), other items by value,
  - ``{type: object, additionalProperties: false, properties, required?, minProperties?,
    format?}`` (nested, same rules as the root; ``format: ip-route`` adds the route rules
    across its ``destination``/``gateway``/``source``/``table``/``scope``, reported at the
    object);

* every property may carry ``description``;
* a property of the root object may carry ``requiredWhen: <guard>`` and/or
  ``forbiddenWhen: <guard>`` — conditional presence, for configs whose shape depends
  on a mode (design §6.1: kernel roots need ``ifName``/``mtu``/``up``, VFIO configs
  reject them). The guard is an expression of ``grammar/effects.lark`` over
  ``call.config`` — the same language and evaluation as a ``when:`` on an effect or a
  port — decided over the config with its defaults filled in. When ``requiredWhen``
  holds the key must be given; when ``forbiddenWhen`` holds it must not be given, and
  its ``default`` is not filled in. This is the restricted form of JSON Schema's
  ``if``/``then: {required: [...]}`` and ``then: {not: {required: [...]}}`` the checker
  can reason about: it enumerates the guards' enum/boolean fields and proves that every
  effect binding a required opcode parameter runs only where the bound field is present
  (``E_PARAM_TYPE`` otherwise). Guard errors are the checker's (``E_SYNTAX``,
  ``E_REF_UNRESOLVED``, ``E_GUARD_TYPE``); ``requiredWhen`` on a ``required`` property,
  ``forbiddenWhen`` on a ``required`` property, and either keyword below the root are
  ``E_SCHEMA``.

Bounds (``E_LIMIT`` at the keyword): a schema's numbers become the checker's allocations
(it builds values at a string's ``minLength`` to try an opcode's parameter model —
``minLength: 400000000`` took 1.6 GB), so ``minLength``/``maxLength`` are at most
:data:`MAX_SCHEMA_LENGTH`, ``minItems``/``maxItems`` at most :data:`MAX_SCHEMA_ITEMS`,
integers (``minimum``, ``maximum``, ``enum``, ``default``) are int64 as in Kubernetes (a
larger one raised ``OverflowError``), an ``enum`` has at most :data:`MAX_ENUM` values and an
object at most :data:`MAX_PROPERTIES` properties. A ``default`` must satisfy its own
property (``E_SCHEMA`` at ``default``): ``maximum: 9000, default: 99999`` was accepted and
the revision carried ``mtu: 99999``.

A list over its ``maxItems`` is refused whole (one diagnostic at the list), without looking
at its items.

Validation (:func:`validate_config`) is strict: no coercion (``"1"`` is not an
integer, ``1`` is not a boolean), unknown keys are ``E_UNKNOWN_FIELD``, missing
required keys and out-of-range values are ``E_SCHEMA`` with the field path. A key
that is present with value ``false`` is *present*; ``default`` fills only keys that
are absent. Conditional presence is checked after the unconditional rules; guards are
decided by :func:`dmn.interpreter.guards.holds` (a guard that does not parse or evaluate
does not hold — the checker reports it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from dmn.interpreter.diagnostics import Code, Diagnostic
from dmn.interpreter.guards import holds
from dmn.interpreter.patterns import full_match, pattern_problem
from dmn.interpreter.value_formats import (
    ObjectFormat,
    StringFormat,
    identity,
    object_problem,
    string_problem,
)
from dmn.vocabulary.ifname import ifname_problem, is_ifname_field

#: pydantic error type of a pattern RE2 refuses; reported as ``E_PATTERN``
PATTERN_ERROR_TYPE = "pattern_not_re2"
#: pydantic error type of a schema number or size over its bound; reported as ``E_LIMIT``
LIMIT_ERROR_TYPE = "schema_limit"

#: Bounds of a schema's own numbers and sizes (see the module doc).
MAX_SCHEMA_LENGTH = 65536
MAX_SCHEMA_ITEMS = 4096
MAX_ENUM = 1024
MAX_PROPERTIES = 256
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def _at_most(bound: int, what: str) -> Any:
    """A field validator: a non-negative size keyword at most ``bound``."""

    def check(value: int | None) -> int | None:
        if value is not None and value > bound:
            raise PydanticCustomError(
                LIMIT_ERROR_TYPE,
                "{what} {value} is over the limit of {bound}",
                {"what": what, "value": value, "bound": bound},
            )
        return value

    return check


def _int64(value: Any) -> Any:
    """A field validator: integers (alone or in a list) are int64, as in Kubernetes."""
    values = value if isinstance(value, list) else [value]
    for v in values:
        if isinstance(v, int) and not INT64_MIN <= v <= INT64_MAX:
            raise PydanticCustomError(
                LIMIT_ERROR_TYPE, "integer {value} is outside int64", {"value": v}
            )
    return value


def _enum_size(value: list[Any] | None) -> list[Any] | None:
    if value is not None and len(value) > MAX_ENUM:
        raise PydanticCustomError(
            LIMIT_ERROR_TYPE,
            "enum has {n} values; the limit is {bound}",
            {"n": len(value), "bound": MAX_ENUM},
        )
    return value


def _default_fits(prop: Any) -> None:
    """A property's ``default`` is a value the property itself accepts."""
    default = getattr(prop, "default", None)
    if default is None:
        return
    if isinstance(prop, ArraySchema):
        _, errs = _validate(prop, default, "default")
    else:
        errs = _validate_scalar(prop, default, "default")
    if errs:
        raise PydanticCustomError("default_invalid", "default {msg}", {"msg": errs[0].message})


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True, frozen=True)


class _Property(_Strict):
    """Keywords every property shares."""

    description: str | None = None
    required_when: str | None = Field(default=None, alias="requiredWhen", min_length=1)
    forbidden_when: str | None = Field(default=None, alias="forbiddenWhen", min_length=1)


class StringSchema(_Property):
    type: Literal["string"]
    min_length: int | None = Field(default=None, alias="minLength", ge=0)
    max_length: int | None = Field(default=None, alias="maxLength", ge=0)
    pattern: str | None = None
    enum: list[str] | None = Field(default=None, min_length=1)
    format: StringFormat | None = None
    default: str | None = None

    _lengths = field_validator("min_length", "max_length")(
        _at_most(MAX_SCHEMA_LENGTH, "string length")
    )
    _enum_bound = field_validator("enum")(_enum_size)

    @field_validator("pattern")
    @classmethod
    def _linear_time(cls, pattern: str | None) -> str | None:
        if pattern is not None:
            problem = pattern_problem(pattern)
            if problem is not None:
                raise PydanticCustomError(PATTERN_ERROR_TYPE, problem)
        return pattern

    @model_validator(mode="after")
    def _coherent(self) -> StringSchema:
        if self.format is not None:
            others = [
                key
                for key, value in (
                    ("pattern", self.pattern),
                    ("enum", self.enum),
                    ("minLength", self.min_length),
                    ("maxLength", self.max_length),
                )
                if value is not None
            ]
            if others:
                raise ValueError(
                    f"format {self.format!r} fixes the values; it takes no {', '.join(others)}"
                )
        if self.enum is not None and len(set(self.enum)) != len(self.enum):
            raise ValueError("enum values must be distinct")
        if (
            self.min_length is not None
            and self.max_length is not None
            and self.min_length > self.max_length
        ):
            raise ValueError("minLength is greater than maxLength")
        if self.pattern is None or pattern_problem(self.pattern) is None:
            _default_fits(self)
        return self


class IntegerSchema(_Property):
    type: Literal["integer"]
    minimum: int | None = None
    maximum: int | None = None
    enum: list[int] | None = Field(default=None, min_length=1)
    default: int | None = None

    _int64_bound = field_validator("minimum", "maximum", "enum", "default")(_int64)
    _enum_bound = field_validator("enum")(_enum_size)

    @model_validator(mode="after")
    def _coherent(self) -> IntegerSchema:
        if self.minimum is not None and self.maximum is not None and self.minimum > self.maximum:
            raise ValueError("minimum is greater than maximum")
        _default_fits(self)
        return self


class BooleanSchema(_Property):
    type: Literal["boolean"]
    default: bool | None = None


ScalarSchema = StringSchema | IntegerSchema | BooleanSchema


class ArraySchema(_Property):
    type: Literal["array"]
    items: StringSchema | IntegerSchema | BooleanSchema | ObjectSchema = Field(discriminator="type")
    min_items: int | None = Field(default=None, alias="minItems", ge=0)
    max_items: int | None = Field(default=None, alias="maxItems", ge=0)
    unique_items: bool | None = Field(default=None, alias="uniqueItems")
    default: list[Any] | None = None

    _items_bound = field_validator("min_items", "max_items")(
        _at_most(MAX_SCHEMA_ITEMS, "item count")
    )

    @model_validator(mode="after")
    def _coherent(self) -> ArraySchema:
        low, high = self.min_items, self.max_items
        if low is not None and high is not None and low > high:
            raise ValueError("minItems is greater than maxItems")
        if isinstance(self.items, ObjectSchema) and high is None:
            raise ValueError("an array of objects needs maxItems (a bound on what a config holds)")
        _default_fits(self)
        return self


class ObjectSchema(_Property):
    type: Literal["object"]
    additional_properties: Literal[False] = Field(alias="additionalProperties")
    properties: dict[str, PropertySchema] = Field(default_factory=dict)
    required: list[str] = Field(default_factory=list)
    min_properties: int | None = Field(default=None, alias="minProperties", ge=0)
    format: ObjectFormat | None = None

    @field_validator("properties")
    @classmethod
    def _few_enough(cls, properties: dict[str, Any]) -> dict[str, Any]:
        if len(properties) > MAX_PROPERTIES:
            raise PydanticCustomError(
                LIMIT_ERROR_TYPE,
                "{n} properties; the limit is {bound}",
                {"n": len(properties), "bound": MAX_PROPERTIES},
            )
        return properties

    @model_validator(mode="after")
    def _required_known(self) -> ObjectSchema:
        unknown = [r for r in self.required if r not in self.properties]
        if unknown:
            raise ValueError(f"required names unknown properties: {', '.join(unknown)}")
        if self.min_properties is not None and self.min_properties > len(self.properties):
            raise ValueError(
                f"minProperties {self.min_properties} is more than the "
                f"{len(self.properties)} properties"
            )
        return self


AnyProperty = StringSchema | IntegerSchema | BooleanSchema | ArraySchema | ObjectSchema
PropertySchema = Annotated[AnyProperty, Field(discriminator="type")]
ObjectSchema.model_rebuild()
ArraySchema.model_rebuild()

#: The schema every plugin config is described by.
ConfigSchema = ObjectSchema


def enumerable_values(prop: AnyProperty) -> list[Any] | None:
    """All values a property may take, if finitely few (enum or boolean); else None."""
    if isinstance(prop, BooleanSchema):
        return [False, True]
    if isinstance(prop, StringSchema | IntegerSchema) and prop.enum is not None:
        return list(prop.enum)
    return None


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
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def _validate_scalar(
    schema: StringSchema | IntegerSchema | BooleanSchema, value: Any, path: str
) -> list[Diagnostic]:
    errs: list[Diagnostic] = []

    def bad(msg: str) -> None:
        errs.append(Diagnostic(code=Code.E_SCHEMA, message=msg, path=path))

    if isinstance(schema, BooleanSchema):
        if not isinstance(value, bool):
            bad(f"expected boolean, got {_type_name(value)}")
        return errs
    if isinstance(schema, IntegerSchema):
        if isinstance(value, bool) or not isinstance(value, int):
            bad(f"expected integer, got {_type_name(value)}")
            return errs
        if schema.enum is not None and value not in schema.enum:
            bad(f"{value} is not one of {schema.enum}")
        if schema.minimum is not None and value < schema.minimum:
            bad(f"{value} is less than the minimum {schema.minimum}")
        if schema.maximum is not None and value > schema.maximum:
            bad(f"{value} is greater than the maximum {schema.maximum}")
        return errs
    if not isinstance(value, str):
        bad(f"expected string, got {_type_name(value)}")
        return errs
    if schema.enum is not None and value not in schema.enum:
        bad(f"{value!r} is not one of {schema.enum}")
    if schema.min_length is not None and len(value) < schema.min_length:
        bad(f"{value!r} is shorter than {schema.min_length} characters")
    if schema.max_length is not None and len(value) > schema.max_length:
        bad(f"{value!r} is longer than {schema.max_length} characters")
    if schema.pattern is not None and not full_match(schema.pattern, value):
        bad(f"{value!r} does not match the pattern {schema.pattern!r}")
    if schema.format is not None:
        problem = string_problem(schema.format, value)
        if problem is not None:
            bad(f"not an {schema.format}: {problem}")
    return errs


def _validate(schema: AnyProperty, value: Any, path: str) -> tuple[Any, list[Diagnostic]]:
    if isinstance(schema, ObjectSchema):
        return _validate_object(schema, value, path)
    if isinstance(schema, ArraySchema):
        if not isinstance(value, list):
            return value, [
                Diagnostic(
                    code=Code.E_SCHEMA,
                    message=f"expected array, got {_type_name(value)}",
                    path=path,
                )
            ]
        errs: list[Diagnostic] = []
        if schema.min_items is not None and len(value) < schema.min_items:
            errs.append(
                Diagnostic(
                    code=Code.E_SCHEMA,
                    message=f"has {len(value)} items, fewer than {schema.min_items}",
                    path=path,
                )
            )
        if schema.max_items is not None and len(value) > schema.max_items:
            # the items of an over-long list are not looked at: the list is refused whole
            return list(value), [
                Diagnostic(
                    code=Code.E_SCHEMA,
                    message=f"has {len(value)} items, more than {schema.max_items}",
                    path=path,
                )
            ]
        items: list[Any] = []
        clean: list[bool] = []
        for i, item in enumerate(value):
            normalised, sub = _validate(schema.items, item, _join(path, i))
            items.append(normalised)
            clean.append(not sub)
            errs += sub
        if schema.unique_items:
            errs += _repeats(schema.items, items, clean, path)
        return items, errs
    return value, _validate_scalar(schema, value, path)


def _repeats(
    items_schema: AnyProperty, items: list[Any], clean: list[bool], path: str
) -> list[Diagnostic]:
    """``uniqueItems``: an item equal to an earlier one — by its format's identity for
    formatted items (the same address in two spellings), else by value and type."""
    fmt = getattr(items_schema, "format", None)
    errs: list[Diagnostic] = []
    seen: list[Any] = []
    for i, item in enumerate(items):
        if not clean[i]:
            continue
        key = identity(fmt, item) if fmt is not None else None
        # bool is not int here: [1, true] holds two distinct values
        mark = ("identity", key) if key is not None else ("value", type(item), item)
        if mark in seen:
            what = f"{fmt} " if key is not None else ""
            errs.append(
                Diagnostic(
                    code=Code.E_SCHEMA,
                    message=f"item {item!r} repeats an earlier {what}item (uniqueItems)",
                    path=_join(path, i),
                )
            )
        seen.append(mark)
    return errs


def value_problems(prop: AnyProperty, value: Any, path: str = "") -> list[Diagnostic]:
    """Why ``value`` is not a value of property ``prop`` (below the root: no conditional
    presence, no interface-name rule); empty when it is."""
    return _validate(prop, value, path)[1]


def _validate_object(
    schema: ObjectSchema, value: Any, path: str, root: bool = False
) -> tuple[dict[str, Any], list[Diagnostic]]:
    if not isinstance(value, dict):
        return {}, [
            Diagnostic(
                code=Code.E_SCHEMA,
                message=f"expected object, got {_type_name(value)}",
                path=path,
            )
        ]
    errs: list[Diagnostic] = []
    out: dict[str, Any] = {}
    for key, item in value.items():
        prop = schema.properties.get(key)
        if prop is None:
            errs.append(
                Diagnostic(
                    code=Code.E_UNKNOWN_FIELD,
                    message=f"unknown config field {key!r}",
                    path=_join(path, key),
                )
            )
            continue
        out[key], sub = _validate(prop, item, _join(path, key))
        errs += sub
    for name in schema.required:
        if name not in value:
            errs.append(
                Diagnostic(
                    code=Code.E_SCHEMA,
                    message=f"required config field {name!r} is missing",
                    path=_join(path, name),
                )
            )
    for name, prop in schema.properties.items():
        if name not in value and prop.type != "object" and prop.default is not None:
            out[name] = prop.default
    if schema.min_properties is not None and len(value) < schema.min_properties:
        errs.append(
            Diagnostic(
                code=Code.E_SCHEMA,
                message=f"has {len(value)} fields, fewer than {schema.min_properties}",
                path=path,
            )
        )
    if schema.format is not None and not errs:
        problem = object_problem(schema.format, out)
        if problem is not None:
            errs.append(
                Diagnostic(
                    code=Code.E_SCHEMA, message=f"not an {schema.format}: {problem}", path=path
                )
            )
    if root:  # guards read call.config.<field>: top-level fields only
        errs += _conditional_presence(schema, value, out, path)
        errs += _interface_names(out, errs, path)
    return out, errs


def _interface_names(
    config: Mapping[str, Any], errs: list[Diagnostic], path: str
) -> list[Diagnostic]:
    """``E_IFNAME`` for an interface-name field (``ifName``, ``*IfName``) whose value — given
    or defaulted — is not one a workload may choose (:mod:`dmn.vocabulary.ifname`); a field
    that already failed its schema is not reported twice."""
    failed = {d.path for d in errs}
    out: list[Diagnostic] = []
    for name, value in config.items():
        where = _join(path, name)
        if not is_ifname_field(name) or where in failed:
            continue
        problem = ifname_problem(value)
        if problem is not None:
            out.append(Diagnostic(code=Code.E_IFNAME, message=problem, path=where))
    return out


def _conditional_presence(
    schema: ObjectSchema, given: Mapping[str, Any], out: dict[str, Any], path: str
) -> list[Diagnostic]:
    """``requiredWhen`` / ``forbiddenWhen``, decided over the defaulted config ``out``."""
    errs: list[Diagnostic] = []
    decided = dict(out)  # guards see the defaults of every field, forbidden or not
    for name, prop in schema.properties.items():
        if prop.forbidden_when is not None and holds(prop.forbidden_when, decided):
            if name in given:
                errs.append(
                    Diagnostic(
                        code=Code.E_SCHEMA,
                        message=f"config field {name!r} must be absent when {prop.forbidden_when}",
                        path=_join(path, name),
                    )
                )
            out.pop(name, None)
        elif (
            prop.required_when is not None
            and name not in given
            and holds(prop.required_when, decided)
        ):
            errs.append(
                Diagnostic(
                    code=Code.E_SCHEMA,
                    message=f"config field {name!r} is required when {prop.required_when}",
                    path=_join(path, name),
                )
            )
    return errs


def validate_config(
    schema: ConfigSchema, config: Mapping[str, Any] | Any, path: str = "config"
) -> tuple[dict[str, Any], list[Diagnostic]]:
    """Validate ``config`` against ``schema``; returns (normalised config, diagnostics).

    The normalised config has defaults filled in for absent keys only; explicit values
    (including ``false`` and ``0``) are kept as given. Diagnostics carry field paths
    (``config.vlanId``) but no file position; callers add the position they know.
    """
    value = dict(config) if isinstance(config, Mapping) else config
    return _validate_object(schema, value, path, root=True)
