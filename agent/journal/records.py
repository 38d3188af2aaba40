"""Coordinator records kept in the node journal beside the runner's operations.

Small explicit states (seed 000 §11.2): preparations move Preparing → Prepared →
Unpreparing → Released; attachments Connecting → Ready → Removing → Removed. Shared-parent
references, exclusive reservations and namespace pins live here too, never in an
unprotected in-memory map, so that a restarted agent reconstructs exactly what it holds.
All records are plain dataclasses with a JSON form; keys are built in
:mod:`dmn.agent.journal.keys`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class PreparationState(StrEnum):
    PREPARING = "Preparing"
    PREPARED = "Prepared"
    UNPREPARING = "Unpreparing"
    RELEASED = "Released"


class AttachmentState(StrEnum):
    CONNECTING = "Connecting"
    READY = "Ready"
    REMOVING = "Removing"
    REMOVED = "Removed"


@dataclass(slots=True)
class PreparationRecord:
    """One NodePrepare of one claim allocation (claim UID + allocation fingerprint)."""

    claim_uid: str
    allocation_fingerprint: str
    state: PreparationState = PreparationState.PREPARING
    revision: str = ""
    contract_digest: str = ""
    operations: list[str] = field(default_factory=list)  # root prepare operations, in order
    devices: list[Any] = field(default_factory=list)  # kubelet device results (CDI ids)
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "claimUID": self.claim_uid,
            "allocationFingerprint": self.allocation_fingerprint,
            "state": self.state.value,
            "revision": self.revision,
            "contractDigest": self.contract_digest,
            "operations": list(self.operations),
            "devices": list(self.devices),
            "error": self.error,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> PreparationRecord:
        return cls(
            claim_uid=str(d["claimUID"]),
            allocation_fingerprint=str(d["allocationFingerprint"]),
            state=PreparationState(d["state"]),
            revision=str(d.get("revision", "")),
            contract_digest=str(d.get("contractDigest", "")),
            operations=[str(o) for o in d.get("operations", ())],
            devices=list(d.get("devices", ())),
            error=str(d.get("error", "")),
        )


@dataclass(frozen=True, slots=True)
class AttachmentIdentity:
    """A Pod sandbox incarnation: a new sandbox id for the same Pod is a new attachment."""

    node_uid: str
    boot_id: str
    pod_uid: str
    sandbox_id: str

    def to_json(self) -> dict[str, str]:
        return {
            "nodeUID": self.node_uid,
            "bootID": self.boot_id,
            "podUID": self.pod_uid,
            "sandboxID": self.sandbox_id,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> AttachmentIdentity:
        return cls(str(d["nodeUID"]), str(d["bootID"]), str(d["podUID"]), str(d["sandboxID"]))


@dataclass(slots=True)
class AttachmentRecord:
    identity: AttachmentIdentity
    state: AttachmentState = AttachmentState.CONNECTING
    claims: list[dict[str, str]] = field(default_factory=list)  # {claimUID, fingerprint}
    revision: str = ""
    operations: list[str] = field(default_factory=list)  # connect operations, topological order
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "identity": self.identity.to_json(),
            "state": self.state.value,
            "claims": [dict(c) for c in self.claims],
            "revision": self.revision,
            "operations": list(self.operations),
            "error": self.error,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> AttachmentRecord:
        return cls(
            identity=AttachmentIdentity.from_json(d["identity"]),
            state=AttachmentState(d["state"]),
            claims=[{str(k): str(v) for k, v in c.items()} for c in d.get("claims", ())],
            revision=str(d.get("revision", "")),
            operations=[str(o) for o in d.get("operations", ())],
            error=str(d.get("error", "")),
        )


@dataclass(frozen=True, slots=True)
class ShareRef:
    """One allocated share of a host parent; the parent may change only when none remain."""

    parent_inventory_id: str
    claim_uid: str
    share_id: str
    allocation_fingerprint: str = ""
    mode: str = ""  # persona, e.g. macvlan-parent / ipvlan-parent

    def to_json(self) -> dict[str, str]:
        return {
            "parentInventoryID": self.parent_inventory_id,
            "claimUID": self.claim_uid,
            "shareID": self.share_id,
            "allocationFingerprint": self.allocation_fingerprint,
            "mode": self.mode,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ShareRef:
        return cls(
            str(d["parentInventoryID"]),
            str(d["claimUID"]),
            str(d["shareID"]),
            str(d.get("allocationFingerprint", "")),
            str(d.get("mode", "")),
        )


@dataclass(frozen=True, slots=True)
class Reservation:
    """An exclusive hold on a resource (inventory id, reset domain, eswitch) by one holder."""

    resource: str
    holder: str  # e.g. prep/<claimUID>/<fingerprint>
    kind: str = "exclusive"

    def to_json(self) -> dict[str, str]:
        return {"resource": self.resource, "holder": self.holder, "kind": self.kind}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Reservation:
        return cls(str(d["resource"]), str(d["holder"]), str(d.get("kind", "exclusive")))


class PinState(StrEnum):
    MOUNT_INTENT = "MountIntent"
    MOUNTED = "Mounted"
    UNMOUNTING = "Unmounting"


@dataclass(frozen=True, slots=True)
class NamespacePin:
    """A sandbox netns bind-mounted at a persistent pin path, by (dev, inode) identity."""

    attachment: str  # keys.attachment_id(identity)
    path: str
    dev: int
    inode: int
    boot_id: str
    state: PinState = PinState.MOUNT_INTENT

    def to_json(self) -> dict[str, Any]:
        return {
            "attachment": self.attachment,
            "path": self.path,
            "dev": self.dev,
            "inode": self.inode,
            "bootID": self.boot_id,
            "state": self.state.value,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> NamespacePin:
        return cls(
            str(d["attachment"]),
            str(d["path"]),
            int(d["dev"]),
            int(d["inode"]),
            str(d["bootID"]),
            PinState(d.get("state", PinState.MOUNT_INTENT.value)),
        )
