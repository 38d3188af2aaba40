"""NetworkAttachmentStatus reporting (design §9.1): reporting, never authority.

One object per (attachment, claim) in the Pod's namespace, owned by the Pod (so the API
server's garbage collector removes it with the Pod), named from a digest of the
attachment id and claim UID and labelled with the attachment id so that later phases
find it without the Pod's name. Its immutable spec pins the attachment identity, the
claim fingerprint and the exact revision — which is what keeps the controller from
collecting a revision while a node still holds state for it. A failed write is logged
and never fails the hook: the journal governs cleanup, not this object.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from dmn.agent.coordinator.network_data import device_data, network_data
from dmn.agent.coordinator.verify import VerifiedClaim
from dmn.agent.journal.records import AttachmentIdentity
from dmn.api.attachment import NetworkAttachmentStatus
from dmn.api.cluster import AlreadyExists, ApiFailure, Cluster, Conflict, NotFound
from dmn.api.cluster import resources as r
from dmn.engine.journal import EffectRecord
from dmn.vocabulary.handles import Handle

log = logging.getLogger(__name__)

ATTACHMENT_LABEL = "dra-multi-network.schseba.github.io/attachment"
POD_UID_LABEL = "dra-multi-network.schseba.github.io/pod-uid"
_CODE_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ_")


@dataclass(frozen=True)
class ClaimBinding:
    claim_uid: str
    fingerprint: str
    revision: Mapping[str, str]  # RevisionRef JSON: name, uid, digest


def status_name(attachment: str, claim_uid: str) -> str:
    return "nas-" + hashlib.sha256(f"{attachment}/{claim_uid}".encode()).hexdigest()[:24]


def _error(error: str) -> dict[str, str] | None:
    if not error:
        return None
    code = error.split(":", 1)[0]
    if not (code.startswith(("E_", "W_")) and set(code) <= _CODE_CHARS):
        code = "E_ATTACHMENT"
    return {"code": code, "message": error[:2048]}


class AttachmentReporter:
    def __init__(self, cluster: Cluster, node_name: str) -> None:
        self.cluster = cluster
        self.node_name = node_name

    def created(
        self,
        namespace: str,
        pod_name: str,
        identity: AttachmentIdentity,
        attachment: str,
        claims: Sequence[ClaimBinding],
    ) -> None:
        """Create the objects (phase Connecting) before anything is attached."""
        for c in claims:
            doc = NetworkAttachmentStatus.model_validate(
                {
                    "metadata": {
                        "name": status_name(attachment, c.claim_uid),
                        "namespace": namespace,
                        "labels": {
                            ATTACHMENT_LABEL: attachment,
                            POD_UID_LABEL: identity.pod_uid,
                        },
                        "ownerReferences": [
                            {
                                "apiVersion": "v1",
                                "kind": "Pod",
                                "name": pod_name,
                                "uid": identity.pod_uid,
                            }
                        ],
                    },
                    "spec": {
                        "podUID": identity.pod_uid,
                        "podName": pod_name,
                        "sandboxID": identity.sandbox_id,
                        "nodeName": self.node_name,
                        "nodeUID": identity.node_uid,
                        "bootID": identity.boot_id,
                        "claimUID": c.claim_uid,
                        "claimFingerprint": c.fingerprint,
                        "revisionRef": dict(c.revision),
                    },
                }
            )
            body = doc.model_dump(mode="json", by_alias=True, exclude_none=True)
            try:
                self.cluster.create(r.NETWORK_ATTACHMENT_STATUSES, body, namespace)
            except AlreadyExists:
                pass
            except ApiFailure as exc:
                log.warning("event=status-create-failed attachment=%s error=%s", attachment, exc)
        self.phase(attachment, "Connecting")

    def phase(
        self,
        attachment: str,
        phase: str,
        *,
        error: str = "",
        outputs: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        """Set the phase (and outputs / last error) of every object of this attachment."""
        status: dict[str, Any] = {"phase": phase, "lastError": _error(error)}
        if outputs:
            status["outputs"] = [dict(o) for o in outputs]
        try:
            found = self.cluster.list(
                r.NETWORK_ATTACHMENT_STATUSES, label_selector=f"{ATTACHMENT_LABEL}={attachment}"
            ).items
            for obj in found:
                meta = obj["metadata"]
                self.cluster.patch(
                    r.NETWORK_ATTACHMENT_STATUSES,
                    meta["name"],
                    {"status": status},
                    meta["namespace"],
                    status=True,
                )
        except ApiFailure as exc:
            log.warning("event=status-write-failed attachment=%s error=%s", attachment, exc)


def _same_device(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    keys = ("driver", "pool", "device")
    return all(a.get(k) == b.get(k) for k in keys) and (a.get("shareID") or "") == (
        b.get("shareID") or ""
    )


class ClaimDeviceStatus:
    """This driver's entries of ``ResourceClaim.status.devices`` (exact driver/pool/device/
    shareID keys; other drivers' entries are preserved). Reporting only: a failed write is
    logged; a conflicting write is retried on the fresh object; a claim that is gone (deleted
    with its Pod while the node unprepares it, the usual order) has nothing left to report,
    which is no failure and is not logged as one."""

    def __init__(self, cluster: Cluster, attempts: int = 3) -> None:
        self.cluster = cluster
        self.attempts = attempts

    def write(
        self,
        namespace: str,
        name: str,
        entries: Sequence[Mapping[str, Any]],
        drop: Sequence[Mapping[str, Any]] = (),
    ) -> None:
        """Replace the entries keyed like ``entries`` and remove those keyed like ``drop``."""

        def write_once() -> None:
            claim = self.cluster.get(r.RESOURCE_CLAIMS, name, namespace)
            status = claim.setdefault("status", {})
            keep = [
                d
                for d in status.get("devices") or []
                if not any(_same_device(d, e) for e in [*entries, *drop])
            ]
            devices = keep + [dict(e) for e in entries]
            if devices:
                status["devices"] = devices
            else:
                status.pop("devices", None)
            self.cluster.replace(r.RESOURCE_CLAIMS, claim, status=True)

        report_retrying(self.attempts, write_once, log, "claim-status", f"claim={namespace}/{name}")


def report_retrying(
    attempts: int, write_once: Callable[[], None], logger: logging.Logger, event: str, subject: str
) -> None:
    """One reporting read-modify-write (``write_once`` reads the object afresh each time):
    retried on a conflict, finished when the object is gone (nothing is left to report: no
    failure, logged at debug), logged when the API fails it. Never raises: status is
    reporting, never authority."""
    for _ in range(attempts):
        try:
            write_once()
            return
        except Conflict:
            continue
        except NotFound:
            logger.debug("event=%s-gone %s", event, subject)
            return
        except ApiFailure as exc:
            logger.warning("event=%s-failed %s error=%s", event, subject, exc)
            return
    logger.warning("event=%s-conflict %s", event, subject)


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def status_outputs(
    exports: Mapping[str, Mapping[str, tuple[Handle, ...]]], verified: VerifiedClaim
) -> list[dict[str, Any]]:
    """Sanitized outputs for attachment status: step, port, type, shareID, interface name."""
    shares = {root.step: root.result.share_id for root in verified.roots}
    out: list[dict[str, Any]] = []
    for step, ports in exports.items():
        for port, handles in ports.items():
            for h in handles[:1]:
                entry: dict[str, Any] = {"step": step, "port": port, "type": h.type.value}
                entry["ready"] = True
                if shares.get(step):
                    entry["shareID"] = shares[step]
                name = h.observations.get("ifName")
                if isinstance(name, str) and name:
                    entry["description"] = {"ifName": name}
                out.append(entry)
    return out


def device_entries(
    driver: str,
    verified: VerifiedClaim,
    exports: Mapping[str, Mapping[str, tuple[Handle, ...]]],
    records: Sequence[EffectRecord] = (),
) -> list[dict[str, Any]]:
    """ResourceClaim ``status.devices`` entries of a Ready attachment's roots; ``records``
    (the connect's journaled effects, every step in order) supply ``networkData``."""
    entries = []
    for root in verified.roots:
        res = root.result
        entry: dict[str, Any] = {
            "driver": driver,
            "pool": res.pool,
            "device": res.device,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "Attached",
                    "message": f"attached in step {root.step}",
                    "lastTransitionTime": now(),
                }
            ],
        }
        if res.share_id:
            entry["shareID"] = res.share_id
        exported = [h for handles in exports.get(root.step, {}).values() for h in handles[:1]]
        data = network_data(exported[0], records) if exported else None
        if data is not None:
            entry["networkData"] = data
        granted = device_data(exported)
        if granted is not None:
            entry["data"] = granted
        entries.append(entry)
    return entries
