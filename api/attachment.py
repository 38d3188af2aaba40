"""NetworkAttachmentStatus: the node's report on one attachment (design §9.1).

Namespaced beside the Pod. The immutable ``spec`` identifies the attachment exactly
(Pod, sandbox, node, boot, claim fingerprint, revision); the node-owned ``status``
carries phase, conditions, sanitized outputs, last error and cleanup progress. Status
is reporting, never authority: the node journal governs cleanup. The controller reads
these to decide whether a revision may be collected.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from dmn.api.model import ApiModel, Condition, DiagnosticEntry, RevisionRef, list_map, validations

AttachmentPhase = Literal[
    "Pending",
    "Prepared",
    "Connecting",
    "Ready",
    "CleanupPending",
    "CleaningUp",
    "Released",
    "Failed",
]

#: Phases in which the attachment still holds (or may hold) state on the node: the
#: revision it references must be retained.
LIVE_PHASES: frozenset[str] = frozenset(
    {"Pending", "Prepared", "Connecting", "Ready", "CleanupPending", "CleaningUp", "Failed"}
)


class NetworkAttachmentStatusSpec(ApiModel):
    pod_uid: str = Field(min_length=1, max_length=64, alias="podUID")
    pod_name: str = Field(min_length=1, max_length=253)
    sandbox_id: str = Field(min_length=1, max_length=128, alias="sandboxID")
    node_name: str = Field(min_length=1, max_length=253)
    node_uid: str = Field(default="", max_length=64, alias="nodeUID")
    boot_id: str = Field(min_length=1, max_length=64, alias="bootID")
    claim_uid: str = Field(min_length=1, max_length=64, alias="claimUID")
    claim_fingerprint: str = Field(min_length=1, max_length=80)
    revision_ref: RevisionRef


class AttachmentOutput(ApiModel):
    step: str = Field(max_length=40)
    port: str = Field(max_length=63)
    type: str = Field(max_length=63)
    share_id: str | None = Field(default=None, max_length=64, alias="shareID")
    ready: bool = False
    description: dict[str, Any] | None = Field(
        default=None,
        json_schema_extra={
            "maxProperties": 16,
            "additionalProperties": {"type": "string", "maxLength": 256},
        },
    )


class CleanupProgress(ApiModel):
    pending_effects: int = Field(default=0, ge=0, le=4096)
    completed_effects: int = Field(default=0, ge=0, le=4096)


class NetworkAttachmentStatusStatus(ApiModel):
    phase: AttachmentPhase | None = None
    observed_generation: int | None = Field(default=None, ge=0)
    conditions: list[Condition] | None = list_map("type", max_items=16, default=None)
    outputs: list[AttachmentOutput] | None = list_map("step", "port", max_items=256, default=None)
    last_error: DiagnosticEntry | None = None
    cleanup: CleanupProgress | None = None


class NetworkAttachmentStatus(ApiModel):
    api_version: Literal["networking.dra-multi-network.schseba.github.io/v1alpha1"] = (
        "networking.dra-multi-network.schseba.github.io/v1alpha1"
    )
    kind: Literal["NetworkAttachmentStatus"] = "NetworkAttachmentStatus"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: NetworkAttachmentStatusSpec = Field(
        json_schema_extra=validations(("self == oldSelf", "attachment identity is immutable"))
    )
    status: NetworkAttachmentStatusStatus | None = None
