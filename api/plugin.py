"""NetworkPlugin: a plugin's strict contract — config, ports, effects, state (seed 000 §4.3).

This is the CRD shape. The descriptor's *meaning* — its hook programs, config schema
and conditional ports — is checked by the language core (``dmn.interpreter``); the
CRD only bounds it structurally. ``configSchema`` and ``hooks`` are the bounded
payloads whose unknown fields are preserved for that checker.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from dmn.api.model import (
    DIGEST,
    PAYLOAD_EXTRA,
    ApiModel,
    Condition,
    DiagnosticEntry,
    list_map,
    list_set,
    validations,
)

HandleTypeName = Literal[
    "KernelInterface/v1",
    "VfioDevice/v1",
    "RdmaDevice/v1",
    "SharedParent/v1",
    "HostRepresentor/v1",
    "PciFunction/v1",
]
AccessName = Literal[
    "Read", "CreateChild", "ExclusiveConfigure", "ExclusiveMaster", "AttachMember", "DeviceAccess"
]


class Implementation(ApiModel):
    model_config = ApiModel.model_config | {
        "json_schema_extra": validations(
            ("self.type != 'Builtin' || has(self.handler)", "Builtin plugins name their handler"),
            (
                "self.type != 'EffectProgram' || !has(self.handler)",
                "EffectProgram plugins have no handler",
            ),
        )
    }

    type: Literal["Builtin", "EffectProgram"]
    handler: str | None = Field(default=None, max_length=63)


_PORT_RULES = validations(("self.minItems <= self.maxItems", "minItems exceeds maxItems"))


class InputPortDecl(ApiModel):
    """An input (or allocation grant) port. ``access`` is one access name or a list of
    them — a union a structural schema cannot type, so it is a bounded payload the
    language checker validates."""

    model_config = ApiModel.model_config | {"json_schema_extra": _PORT_RULES}

    type: HandleTypeName
    link_type: Literal["ethernet", "infiniband"] | None = None
    min_items: int = Field(default=1, ge=0, le=256)
    max_items: int = Field(default=1, ge=1, le=256)
    access: Any = Field(json_schema_extra={"x-kubernetes-preserve-unknown-fields": True})
    when: str | None = Field(default=None, max_length=1024)
    description: str | None = Field(default=None, max_length=1024)


class OutputPortDecl(ApiModel):
    model_config = ApiModel.model_config | {"json_schema_extra": _PORT_RULES}

    type: HandleTypeName
    link_type: Literal["ethernet", "infiniband"] | None = None
    min_items: int = Field(default=1, ge=0, le=256)
    max_items: int = Field(default=1, ge=1, le=256)
    ownership: Literal["Created", "Moved", "Granted", "Configured", "Attached"]
    when: str | None = Field(default=None, max_length=1024)
    description: str | None = Field(default=None, max_length=1024)


class StateContract(ApiModel):
    version: Literal["v1"]
    cleanup: Literal["RecordedEffects"]


class NetworkPluginSpec(ApiModel):
    model_config = ApiModel.model_config | {
        "json_schema_extra": validations(
            (
                "self.implementation.type != 'EffectProgram' || has(self.hooks)",
                "EffectProgram plugins carry hooks",
            ),
        )
    }

    implementation: Implementation
    contract_version: Literal["v1"]
    step_kinds: list[Literal["Allocation", "Operation"]] = list_set(max_items=2, min_length=1)
    config_schema: dict[str, Any] = Field(json_schema_extra=PAYLOAD_EXTRA | {"maxProperties": 8})
    allocation: dict[str, InputPortDecl] | None = Field(
        default=None, json_schema_extra={"maxProperties": 16}
    )
    inputs: dict[str, InputPortDecl] | None = Field(
        default=None, json_schema_extra={"maxProperties": 16}
    )
    outputs: dict[str, OutputPortDecl] | None = Field(
        default=None, json_schema_extra={"maxProperties": 16}
    )
    allowed_effects: list[str] = list_set(max_items=64)
    state_contract: StateContract
    hooks: dict[str, Any] | None = Field(
        default=None,
        json_schema_extra={
            "maxProperties": 4,
            "additionalProperties": {
                "type": "object",
                "x-kubernetes-preserve-unknown-fields": True,
            },
        },
    )


class NetworkPluginStatus(ApiModel):
    observed_generation: int | None = Field(default=None, ge=0)
    contract_digest: str | None = Field(default=None, pattern=DIGEST)
    conditions: list[Condition] | None = list_map("type", max_items=16, default=None)
    diagnostics: list[DiagnosticEntry] | None = Field(default=None, max_length=64)


class NetworkPlugin(ApiModel):
    api_version: Literal["networking.dra-multi-network.schseba.github.io/v1alpha1"] = (
        "networking.dra-multi-network.schseba.github.io/v1alpha1"
    )
    kind: Literal["NetworkPlugin"] = "NetworkPlugin"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: NetworkPluginSpec
    status: NetworkPluginStatus | None = None
