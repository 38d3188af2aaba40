"""The strict base model every CRD document derives from.

Documents are validated strictly: unknown fields are errors (``extra="forbid"``),
no type coercion (``strict=True``), and field names are camelCase on the wire while
Python code uses snake_case. Enumerations are ``Literal`` types so that a JSON string
validates in strict mode and the generated CRD carries an ``enum``.

Kubernetes-specific schema facts that pydantic cannot express (list-map keys,
``x-kubernetes-validations``, preserve-unknown payloads) ride along in
``json_schema_extra`` and are copied into the generated CRD by :mod:`crdgen`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class ApiModel(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
    )

    def to_api(self) -> dict[str, Any]:
        """Wire form: camelCase, absent optional fields omitted."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def list_map(*keys: str, max_items: int, **extra: Any) -> Any:
    """A Field that is a Kubernetes list-map keyed by ``keys`` with a bounded length."""
    schema: dict[str, Any] = {
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": list(keys),
    }
    return Field(max_length=max_items, json_schema_extra=schema, **extra)


def list_set(*, max_items: int, **extra: Any) -> Any:
    return Field(max_length=max_items, json_schema_extra={"x-kubernetes-list-type": "set"}, **extra)


def validations(*rules: tuple[str, str]) -> dict[str, Any]:
    """``x-kubernetes-validations`` entries from (rule, message) pairs."""
    return {"x-kubernetes-validations": [{"rule": r, "message": m} for r, m in rules]}


#: A bounded JSON object whose fields are validated elsewhere (plugin config, programs).
PAYLOAD_EXTRA: dict[str, Any] = {"x-kubernetes-preserve-unknown-fields": True}

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
STEP_ID = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
OPCODE_NAME = r"^[a-z0-9-]+/[a-z0-9-]+/v[0-9]+$"
DIGEST = r"^sha256:[0-9a-f]{64}$"


class Condition(ApiModel):
    """A standard Kubernetes condition (metav1.Condition shape)."""

    type: str = Field(min_length=1, max_length=316)
    status: Literal["True", "False", "Unknown"]
    observed_generation: int | None = Field(default=None, ge=0)
    last_transition_time: str = Field(json_schema_extra={"format": "date-time"})
    reason: str = Field(
        min_length=1, max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
    )
    message: str = Field(max_length=32768)


def conditions_field() -> Any:
    return list_map("type", max_items=16, default=None)


class DiagnosticEntry(ApiModel):
    """A reason-coded rejection reported in status (same fields as ``dmn lint --json``)."""

    code: str = Field(max_length=64, pattern=r"^[EW]_[A-Z_]+$")
    path: str = Field(default="", max_length=512)
    line: int | None = Field(default=None, ge=0)
    column: int | None = Field(default=None, ge=0)
    message: str = Field(max_length=2048)


class ObjectRef(ApiModel):
    name: str = Field(min_length=1, max_length=253)


class RevisionRef(ApiModel):
    """Pins one revision exactly: a same-name recreation cannot take over its authority."""

    name: str = Field(min_length=1, max_length=253)
    uid: str = Field(min_length=1, max_length=64)
    digest: str = Field(pattern=DIGEST)
