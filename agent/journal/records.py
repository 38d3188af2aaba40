"""Coordinator records kept in the node journal beside the runner's operations.

Small explicit states (design §8.2): preparations move Preparing → Prepared →
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


def _text(d: Mapping[str, Any], name: str, default: str | None = None) -> str:
    """A string field of a stored record; anything else is malformed (never coerced)."""
    value = d.get(name, default)
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, not {type(value).__name__}")
    return value


def _texts(d: Mapping[str, Any], name: str) -> list[str]:
    values = d.get(name, [])
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise TypeError(f"{name} must be a list of strings")
    return list(values)


def _count(d: Mapping[str, Any], name: str) -> int:
    """A non-negative integer field of a stored record, 0 when absent (older records)."""
    value = d.get(name, 0)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise TypeError(f"{name} must be a non-negative integer")
    return value


def _objects(d: Mapping[str, Any], name: str) -> list[Mapping[str, Any]]:
    values = d.get(name, [])
    if not isinstance(values, list) or not all(isinstance(v, Mapping) for v in values):
        raise TypeError(f"{name} must be a list of objects")
    return list(values)


def _object(d: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = d.get(name)
    if not isinstance(value, Mapping):
        raise TypeError(f"{name} must be an object")
    return value


@dataclass(frozen=True, slots=True)
class RevisionRef:
    """The NetworkTopologyRevision a claim was prepared or attached under (name, uid and
    the digest its allocation pinned); the same shape as the API's ``revisionRef``."""

    name: str
    uid: str = ""
    digest: str = ""

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "uid": self.uid, "digest": self.digest}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> RevisionRef:
        return cls(_text(d, "name"), _text(d, "uid", ""), _text(d, "digest", ""))


@dataclass(frozen=True, slots=True)
class PreparedDevice:
    """One device NodePrepare returned to the kubelet for a request of the claim."""

    request: str
    pool: str
    device: str
    share_id: str = ""

    def to_json(self) -> dict[str, str]:
        return {
            "request": self.request,
            "pool": self.pool,
            "device": self.device,
            "shareID": self.share_id,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> PreparedDevice:
        return cls(
            _text(d, "request"), _text(d, "pool"), _text(d, "device"), _text(d, "shareID", "")
        )


@dataclass(slots=True)
class PreparationRecord:
    """One NodePrepare of one claim allocation (claim UID + allocation fingerprint)."""

    claim_uid: str
    allocation_fingerprint: str
    state: PreparationState = PreparationState.PREPARING
    revision: RevisionRef = field(default_factory=lambda: RevisionRef(""))
    operations: list[str] = field(default_factory=list)  # root prepare operations, in order
    devices: list[PreparedDevice] = field(default_factory=list)  # what NodePrepare returned
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "claimUID": self.claim_uid,
            "allocationFingerprint": self.allocation_fingerprint,
            "state": self.state.value,
            "revision": self.revision.to_json(),
            "operations": list(self.operations),
            "devices": [d.to_json() for d in self.devices],
            "error": self.error,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> PreparationRecord:
        return cls(
            claim_uid=_text(d, "claimUID"),
            allocation_fingerprint=_text(d, "allocationFingerprint"),
            state=PreparationState(d["state"]),
            revision=RevisionRef.from_json(_object(d, "revision")),
            operations=_texts(d, "operations"),
            devices=[PreparedDevice.from_json(x) for x in _objects(d, "devices")],
            error=_text(d, "error", ""),
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
        return cls(
            _text(d, "nodeUID"), _text(d, "bootID"), _text(d, "podUID"), _text(d, "sandboxID")
        )


@dataclass(frozen=True, slots=True)
class AttachedClaim:
    """One claim an attachment connected: the preparation it used (claim UID + allocation
    fingerprint), where the claim object lives (for its status) and its revision."""

    claim_uid: str
    fingerprint: str
    namespace: str
    name: str
    revision: RevisionRef

    def to_json(self) -> dict[str, Any]:
        return {
            "claimUID": self.claim_uid,
            "fingerprint": self.fingerprint,
            "namespace": self.namespace,
            "name": self.name,
            "revision": self.revision.to_json(),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> AttachedClaim:
        return cls(
            _text(d, "claimUID"),
            _text(d, "fingerprint"),
            _text(d, "namespace"),
            _text(d, "name"),
            RevisionRef.from_json(_object(d, "revision")),
        )


@dataclass(slots=True)
class AttachmentRecord:
    identity: AttachmentIdentity
    state: AttachmentState = AttachmentState.CONNECTING
    claims: list[AttachedClaim] = field(default_factory=list)
    operations: list[str] = field(default_factory=list)  # connect operations, topological order
    error: str = ""
    # the sandbox's network namespace path as the runtime gave it at RunPodSandbox (the
    # runtime's own mount, which it removes when it stops the sandbox); "" if not recorded
    runtime_netns: str = ""
    # 0 for the attachment a RunPodSandbox made; n > 0 for the n-th made late, at a container
    # gate, for a sandbox whose RunPodSandbox attached nothing (its operations get a suffix,
    # so an earlier attempt's records are never reused)
    incarnation: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "identity": self.identity.to_json(),
            "state": self.state.value,
            "claims": [c.to_json() for c in self.claims],
            "operations": list(self.operations),
            "error": self.error,
            "runtimeNetns": self.runtime_netns,
            "incarnation": self.incarnation,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> AttachmentRecord:
        return cls(
            identity=AttachmentIdentity.from_json(_object(d, "identity")),
            state=AttachmentState(d["state"]),
            claims=[AttachedClaim.from_json(c) for c in _objects(d, "claims")],
            operations=_texts(d, "operations"),
            error=_text(d, "error", ""),
            runtime_netns=_text(d, "runtimeNetns", ""),
            incarnation=_count(d, "incarnation"),
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

    attachment: str  # keys.attachment_id(identity): the pin-safe hash, also the pin's name
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
