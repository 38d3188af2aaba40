"""Strict document models: ``HookProgram`` files and ``NetworkPlugin`` custom resources.

The models describe *shape* only (design §3.2 and §4.2): unknown fields
are errors (``E_UNKNOWN_FIELD``), types are never coerced, and optional fields are
``None`` when absent so that an explicit ``false`` stays distinct from a missing key.
Everything that needs more than one document or the opcode registry — references,
opcodes, ports, exports, recovery — is the checker's job (``dmn.interpreter.checker``).

:func:`parse_document` turns one positioned YAML document into a model, converting
pydantic errors into diagnostics that point at the offending key or value.

Shapes, in brief (camelCase is the YAML spelling)::

    HookProgram:  apiVersion: effects.dra-multi-network.schseba.github.io/v1alpha1
                  kind: HookProgram
                  hook: prepare | connect
                  effects: [Effect]
                  exports: {<port>: {from: <ref>}}
    Effect:       id, kind, inputs: {<port>: {from: <ref>} | [{from: <ref>}, ...]},
                  parameters: {<field>: <literal>}, parameterBindings: {<field>: {from: <ref>}},
                  requires: [{kind}], postconditions: [{kind}], recovery: {strategy},
                  when: <guard>, forEach: {in: <ref>, as: <name>}
    NetworkPlugin: apiVersion: networking.dra-multi-network.schseba.github.io/v1alpha1
                  kind: NetworkPlugin, metadata: {name}, spec:
                    implementation: {type: Builtin|EffectProgram, handler?}
                    contractVersion: v1, stepKinds: [Allocation|Operation]
                    configSchema: (see dmn.interpreter.config_schema)
                    allocation: {<port>: InputPort}   # Allocation plugins: the DRA grant
                    inputs: {<port>: InputPort}       # Operation plugins: earlier steps
                    outputs: {<port>: OutputPort}
                    allowedEffects: [<opcode>], stateContract: {version: v1,
                    cleanup: RecordedEffects}
                    hooks: {prepare?: Program, connect?: Program,
                            unprepare?: {undo: prepare}, remove?: {undo: connect}}
    InputPort:    {type, linkType?, minItems=1, maxItems=1, access (one or a list), when?,
                   description?}
    OutputPort:   {type, linkType?, minItems=1, maxItems=1, ownership, when?, description?}
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    JsonValue,
    Tag,
    ValidationError,
    model_validator,
)

from dmn.interpreter.config_schema import LIMIT_ERROR_TYPE, PATTERN_ERROR_TYPE, ObjectSchema
from dmn.interpreter.diagnostics import Code, Diagnostic
from dmn.interpreter.source import Path, SourceMap, YamlDocument, path_text
from dmn.vocabulary.terms import (
    AccessName,
    HandleTypeName,
    HookName,
    LinkTypeName,
    OwnershipName,
    RecoveryName,
    StepKindName,
)

EFFECTS_API_VERSION = "effects.dra-multi-network.schseba.github.io/v1alpha1"
NETWORKING_API_VERSION = "networking.dra-multi-network.schseba.github.io/v1alpha1"

_ID_PATTERN = r"^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$"
_NAME_PATTERN = r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$"
_PORT_PATTERN = r"^[a-z][A-Za-z0-9]{0,62}$"

# --- The NetworkPlugin CRD is generated from these models (dmn.api.plugin, dmn generate).
# What the API server enforces is written here once: bounds pydantic validates and
# publishes alike (max_length, maxProperties), and the Kubernetes-only schema facts
# (x-kubernetes-validations mirroring a validator below, list-type set, preserve-unknown
# payloads whose contents the checker types) ride along as json_schema_extra.

#: json_schema_extra key: the schema the NetworkPlugin CRD has at this field instead of the
#: model's own — a bounded payload the API server stores as given and this model (and the
#: checker) types. ``dmn.api.crdgen`` substitutes it; ``dmn.api.editor_schema`` drops it,
#: so editors still see the typed schema.
CRD_SCHEMA = "x-dmn-crd-schema"
_PRESERVE: dict[str, Any] = {"x-kubernetes-preserve-unknown-fields": True}
_TEXT_MAX = 1024
_MAX_PORTS = 16
_MAX_ALLOWED_EFFECTS = 64


def _cel(*rules: tuple[str, str]) -> dict[str, Any]:
    """``x-kubernetes-validations``: the API server's copy of a model validator's rule."""
    return {"x-kubernetes-validations": [{"rule": r, "message": m} for r, m in rules]}


def _unique(values: list[Any]) -> list[Any]:
    """A Kubernetes list-type set: the API server refuses duplicates, and so do we."""
    seen = set()
    for value in values:
        if value in seen:
            raise ValueError(f"duplicate value {value!r}")
        seen.add(value)
    return values


def _port_count(ports: dict[str, Any]) -> dict[str, Any]:
    if len(ports) > _MAX_PORTS:
        raise ValueError(f"at most {_MAX_PORTS} ports")
    return ports


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True, frozen=True)


class Ref(_Strict):
    """``{from: <reference expression>}``."""

    from_: str = Field(alias="from")


def _ref_shape(value: Any) -> str:
    return "<refs>" if isinstance(value, list) else "<ref>"


#: An input port value: one reference (which may itself denote a list port) or a list.
PortRefs = Annotated[
    Annotated[Ref, Tag("<ref>")] | Annotated[list[Ref], Tag("<refs>")],
    Discriminator(_ref_shape),
]


def port_refs(value: Ref | list[Ref]) -> list[Ref]:
    return list(value) if isinstance(value, list) else [value]


class Predicate(_Strict):
    kind: str = Field(min_length=1)


class Recovery(_Strict):
    strategy: RecoveryName


class ForEach(_Strict):
    in_: str = Field(alias="in")
    as_: str = Field(alias="as", pattern=r"^[a-z][A-Za-z0-9]{0,30}$")


class Effect(_Strict):
    id: str = Field(pattern=_ID_PATTERN)
    kind: str = Field(min_length=1)
    inputs: dict[str, PortRefs] | None = None
    parameters: dict[str, JsonValue] | None = None
    parameter_bindings: dict[str, Ref] | None = Field(default=None, alias="parameterBindings")
    requires: list[Predicate] | None = None
    postconditions: list[Predicate] | None = None
    recovery: Recovery | None = None
    when: str | None = None
    for_each: ForEach | None = Field(default=None, alias="forEach")


class ProgramBody(_Strict):
    """A hook program's body, as written inline under ``spec.hooks.<hook>``."""

    effects: list[Effect]
    exports: dict[str, Ref] | None = None


class HookProgram(_Strict):
    """A standalone hook program file (``programs/<plugin>/<version>/<hook>.yaml``)."""

    api_version: Literal["effects.dra-multi-network.schseba.github.io/v1alpha1"] = Field(
        alias="apiVersion"
    )
    kind: Literal["HookProgram"]
    hook: HookName
    effects: list[Effect]
    exports: dict[str, Ref] | None = None

    def body(self) -> ProgramBody:
        return ProgramBody(effects=self.effects, exports=self.exports)


_PORT_RULES = _cel(("self.minItems <= self.maxItems", "minItems exceeds maxItems"))


class InputPort(_Strict):
    """An input (or allocation grant) port. ``access`` is one access name or a list of
    them — a union a structural CRD schema cannot type, so the CRD stores it as a
    payload and this model types it."""

    model_config = ConfigDict(json_schema_extra=_PORT_RULES)

    type: HandleTypeName
    link_type: LinkTypeName | None = Field(default=None, alias="linkType")
    min_items: int = Field(default=1, alias="minItems", ge=0, le=256)
    max_items: int = Field(default=1, alias="maxItems", ge=1, le=256)
    access: AccessName | list[AccessName] = Field(json_schema_extra={CRD_SCHEMA: _PRESERVE})
    when: str | None = Field(default=None, max_length=_TEXT_MAX)
    description: str | None = Field(default=None, max_length=_TEXT_MAX)

    @model_validator(mode="after")
    def _bounds(self) -> InputPort:
        if self.min_items > self.max_items:
            raise ValueError("minItems is greater than maxItems")
        if isinstance(self.access, list) and not self.access:
            raise ValueError("access lists at least one access")
        return self

    def accesses(self) -> frozenset[str]:
        """The accesses this port grants (``access`` may be one value or a list)."""
        return frozenset(self.access if isinstance(self.access, list) else [self.access])


class OutputPort(_Strict):
    model_config = ConfigDict(json_schema_extra=_PORT_RULES)

    type: HandleTypeName
    link_type: LinkTypeName | None = Field(default=None, alias="linkType")
    min_items: int = Field(default=1, alias="minItems", ge=0, le=256)
    max_items: int = Field(default=1, alias="maxItems", ge=1, le=256)
    ownership: OwnershipName
    when: str | None = Field(default=None, max_length=_TEXT_MAX)
    description: str | None = Field(default=None, max_length=_TEXT_MAX)

    @model_validator(mode="after")
    def _bounds(self) -> OutputPort:
        if self.min_items > self.max_items:
            raise ValueError("minItems is greater than maxItems")
        return self


class Implementation(_Strict):
    model_config = ConfigDict(
        json_schema_extra=_cel(
            ("self.type != 'Builtin' || has(self.handler)", "Builtin plugins name their handler"),
            (
                "self.type != 'EffectProgram' || !has(self.handler)",
                "EffectProgram plugins have no handler",
            ),
        )
    )

    type: Literal["Builtin", "EffectProgram"]
    handler: str | None = Field(default=None, max_length=63)

    @model_validator(mode="after")
    def _handler(self) -> Implementation:
        if self.type == "Builtin" and not self.handler:
            raise ValueError("a Builtin implementation names its handler")
        if self.type == "EffectProgram" and self.handler is not None:
            raise ValueError("an EffectProgram implementation has no handler")
        return self


class StateContract(_Strict):
    version: Literal["v1"]
    cleanup: Literal["RecordedEffects"]


class UndoPrepare(_Strict):
    undo: Literal["prepare"]


class UndoConnect(_Strict):
    undo: Literal["connect"]


class Hooks(_Strict):
    prepare: ProgramBody | None = None
    connect: ProgramBody | None = None
    unprepare: UndoPrepare | None = None
    remove: UndoConnect | None = None


class Metadata(BaseModel):
    """Object metadata. Server-managed fields (uid, resourceVersion, ...) are allowed and
    ignored; ``name`` is required and must be a DNS label."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)

    name: str = Field(pattern=_NAME_PATTERN)
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


#: Ports of one kind (allocation grants, inputs, outputs): at most 16 per plugin.
InputPorts = Annotated[dict[str, InputPort], AfterValidator(_port_count)]
OutputPorts = Annotated[dict[str, OutputPort], AfterValidator(_port_count)]
_PORTS_EXTRA: dict[str, Any] = {"maxProperties": _MAX_PORTS}


#: A top-level configSchema property named by the plugin contract (``workloadSettable``).
ConfigFieldName = Annotated[str, Field(min_length=1, max_length=63)]


class PluginSpec(_Strict):
    """The plugin contract: what checking reads and what the NetworkPlugin CRD's
    ``spec`` is generated from (one model; ``dmn.api.plugin`` adds only the status)."""

    model_config = ConfigDict(
        json_schema_extra=_cel(
            (
                "self.implementation.type != 'EffectProgram' || has(self.hooks)",
                "EffectProgram plugins carry hooks",
            ),
        )
    )

    implementation: Implementation
    contract_version: Literal["v1"] = Field(alias="contractVersion")
    step_kinds: Annotated[list[StepKindName], AfterValidator(_unique)] = Field(
        alias="stepKinds",
        min_length=1,
        max_length=2,
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    config_schema: ObjectSchema = Field(
        alias="configSchema",
        json_schema_extra={CRD_SCHEMA: {"maxProperties": 8, "type": "object", **_PRESERVE}},
    )
    workload_settable: Annotated[list[ConfigFieldName], AfterValidator(_unique)] | None = Field(
        default=None,
        alias="workloadSettable",
        max_length=8,
        description=(
            "Top-level config fields of scalar type a workload may set for its own claim "
            "(ResourceClaim config of kind WorkloadParameters), for example a static address "
            "or an interface name; every other field only the administrator's topology sets."
        ),
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    allocation: InputPorts | None = Field(default=None, json_schema_extra=_PORTS_EXTRA)
    inputs: InputPorts | None = Field(default=None, json_schema_extra=_PORTS_EXTRA)
    outputs: OutputPorts | None = Field(default=None, json_schema_extra=_PORTS_EXTRA)
    allowed_effects: Annotated[list[str], AfterValidator(_unique)] = Field(
        alias="allowedEffects",
        max_length=_MAX_ALLOWED_EFFECTS,
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    state_contract: StateContract = Field(alias="stateContract")
    hooks: Hooks | None = Field(
        default=None,
        json_schema_extra={
            CRD_SCHEMA: {"additionalProperties": {"type": "object", **_PRESERVE}, "type": "object"},
            "maxProperties": 4,
        },
    )


class NetworkPlugin(_Strict):
    api_version: Literal["networking.dra-multi-network.schseba.github.io/v1alpha1"] = Field(
        alias="apiVersion"
    )
    kind: Literal["NetworkPlugin"]
    metadata: Metadata
    spec: PluginSpec
    status: dict[str, JsonValue] | None = None


_UNION_TAGS = {"<ref>", "<refs>"}


#: tags pydantic puts in ``loc`` for the configSchema property union (discriminated by
#: ``type``): ``properties.<name>.<tag>.…`` and ``items.<tag>.…``; not YAML keys
_SCHEMA_TYPE_TAGS = {"string", "integer", "boolean", "array", "object"}


def _is_schema_tag(loc: tuple[int | str, ...], index: int) -> bool:
    if loc[index] not in _SCHEMA_TYPE_TAGS:
        return False
    return (index >= 2 and loc[index - 2] == "properties") or (
        index >= 1 and loc[index - 1] == "items"
    )


def _loc_path(loc: tuple[int | str, ...]) -> Path:
    return tuple(
        part
        for index, part in enumerate(loc)
        if part not in _UNION_TAGS and not _is_schema_tag(loc, index)
    )


def validation_diagnostics(
    exc: ValidationError, source: SourceMap, base: Path = ()
) -> list[Diagnostic]:
    """Turn a pydantic error into diagnostics at the YAML position of each failing field."""
    out: list[Diagnostic] = []
    seen: set[tuple[Code, Path, str]] = set()
    for err in exc.errors(include_url=False):
        path = (*base, *_loc_path(tuple(err["loc"])))
        kind = err["type"]
        if kind == "extra_forbidden":
            code = Code.E_UNKNOWN_FIELD
            message = f"unknown field {path[-1]!r}" if path else "unknown field"
            span = source.key_span(path)
        elif kind in (PATTERN_ERROR_TYPE, LIMIT_ERROR_TYPE):
            code = Code.E_PATTERN if kind == PATTERN_ERROR_TYPE else Code.E_LIMIT
            message = str(err["msg"])
            span = source.span(path)
        elif kind == "default_invalid":
            code = Code.E_SCHEMA
            message = str(err["msg"])
            span = source.span((*path, "default")) or source.span(path)
        elif kind == "missing":
            code = Code.E_SCHEMA
            message = f"required field {path[-1]!r} is missing" if path else "missing value"
            span = source.span(path[:-1])
        else:
            code = Code.E_SCHEMA
            message = str(err["msg"])
            if message.startswith("Value error, "):
                message = message[len("Value error, ") :]
            span = source.span(path)
        key = (code, path, message)
        if key in seen:
            continue
        seen.add(key)
        out.append(Diagnostic.at(code, message, span, path_text(path)))
    return out


Document = HookProgram | NetworkPlugin

#: kind -> model for the documents this module knows. Other kinds (topologies) are
#: registered with the lint driver by their owners.
DOCUMENT_MODELS: dict[str, type[HookProgram] | type[NetworkPlugin]] = {
    "HookProgram": HookProgram,
    "NetworkPlugin": NetworkPlugin,
}


def document_kind(doc: YamlDocument) -> str | None:
    """The ``kind`` of a document, if it is a mapping with a string kind."""
    data = doc.data
    if isinstance(data, dict) and isinstance(data.get("kind"), str):
        kind: str = data["kind"]
        return kind
    return None


def parse_document(doc: YamlDocument) -> tuple[Document | None, list[Diagnostic]]:
    """Validate a HookProgram or NetworkPlugin document; never raises."""
    data = doc.data
    source = doc.source
    if not isinstance(data, dict):
        return None, [
            Diagnostic.at(Code.E_SCHEMA, "a document must be a mapping", source.span(()), "")
        ]
    kind = document_kind(doc)
    model = DOCUMENT_MODELS.get(kind or "")
    if model is None:
        known = ", ".join(sorted(DOCUMENT_MODELS))
        return None, [
            Diagnostic.at(
                Code.E_SCHEMA,
                f"unknown document kind {data.get('kind')!r} (expected one of {known})",
                source.span(("kind",)),
                "kind",
            )
        ]
    try:
        return model.model_validate(data), []
    except ValidationError as exc:
        return None, validation_diagnostics(exc, source)
    except (RecursionError, ValueError, TypeError) as exc:
        return None, [Diagnostic.at(Code.E_SCHEMA, f"invalid document: {exc}", source.span(()))]
