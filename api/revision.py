"""NetworkTopologyRevision: the immutable, digest-named compiled form of a topology.

The controller is its only writer. ``spec`` is immutable after creation (a CEL
transition rule plus admission), its ``digest`` is the semantic SHA-256 of its
content, and it captures the locked plugin descriptors and resolved port contracts
so existing allocations never reinterpret a later descriptor (design §4.1, §4.5).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from dmn.api.model import (
    DIGEST,
    PAYLOAD_EXTRA,
    ApiModel,
    Condition,
    list_map,
    validations,
)
from dmn.api.topology import MAX_ROOTS, MAX_STEPS


class TopologyRef(ApiModel):
    name: str = Field(min_length=1, max_length=253)
    uid: str = Field(min_length=1, max_length=64)
    generation: int = Field(ge=0)


class LockedPlugin(ApiModel):
    """A plugin descriptor as compiled: its full spec and the digest of that contract."""

    name: str = Field(min_length=1, max_length=63)
    contract_digest: str = Field(pattern=DIGEST)
    descriptor: dict[str, Any] = Field(json_schema_extra=PAYLOAD_EXTRA | {"maxProperties": 4})


class RevisionRoot(ApiModel):
    root_step: str = Field(max_length=40)
    plugin: str = Field(max_length=63)
    mode: str = Field(max_length=32)
    link_type: str | None = Field(default=None, max_length=32)
    device_class_name: str = Field(max_length=253)
    plugin_contract_digest: str = Field(pattern=DIGEST)
    #: The root is a share of a parent and consumes one unit of its ``children`` capacity.
    shared: bool = False


class ResolvedPort(ApiModel):
    """The port contract a step resolved to after evaluating its descriptor's conditions."""

    step: str = Field(max_length=40)
    port: str = Field(max_length=63)
    type: str = Field(max_length=63)
    link_type: str | None = Field(default=None, max_length=32)
    min_items: int = Field(ge=0, le=64)
    max_items: int = Field(ge=0, le=64)


class NetworkTopologyRevisionSpec(ApiModel):
    topology_ref: TopologyRef
    digest: str = Field(pattern=DIGEST)
    compiler_version: str = Field(max_length=64)
    opcode_contracts_digest: str = Field(pattern=DIGEST)
    #: Opcode name -> short digest of its contract, for every opcode the revision uses: what
    #: a node's agent must run to be eligible for it (:mod:`dmn.api.node_capability`).
    #: Absent in revisions compiled before it was recorded.
    opcode_contracts: dict[str, str] | None = Field(
        default=None,
        json_schema_extra={
            "maxProperties": 256,
            "additionalProperties": {"type": "string", "maxLength": 64},
        },
    )
    normalized_spec: dict[str, Any] = Field(json_schema_extra=PAYLOAD_EXTRA | {"maxProperties": 4})
    plugins: list[LockedPlugin] = list_map("name", max_items=MAX_STEPS)
    roots: list[RevisionRoot] = list_map("rootStep", max_items=MAX_ROOTS, min_length=1)
    outputs: list[ResolvedPort] = list_map("step", "port", max_items=MAX_STEPS * 8)
    order: list[str] = Field(
        max_length=MAX_STEPS, json_schema_extra={"x-kubernetes-list-type": "atomic"}
    )


class NetworkTopologyRevisionStatus(ApiModel):
    phase: Literal["Pending", "Ready", "Failed", "Superseded"] | None = None
    observed_generation: int | None = Field(default=None, ge=0)
    conditions: list[Condition] | None = list_map("type", max_items=16, default=None)


class NetworkTopologyRevision(ApiModel):
    api_version: Literal["networking.dra-multi-network.schseba.github.io/v1alpha1"] = (
        "networking.dra-multi-network.schseba.github.io/v1alpha1"
    )
    kind: Literal["NetworkTopologyRevision"] = "NetworkTopologyRevision"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: NetworkTopologyRevisionSpec = Field(
        json_schema_extra=validations(("self == oldSelf", "revision spec is immutable"))
    )
    status: NetworkTopologyRevisionStatus | None = None
