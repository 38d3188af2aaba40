"""Revision retention and garbage collection (design §4.6).

A revision (and its DeviceClasses and locked contracts) is retained while:

* it is the current revision of its live topology (or the topology has not settled its
  current generation yet);
* a topology root's stable DeviceClass names it (:mod:`.stable_classes`: new allocations
  through that class get this revision);
* any ResourceClaim allocation references it (class-origin TopologyRootConfiguration
  naming the revision by name or UID);
* any NetworkAttachmentStatus referencing it is in a live, prepared or cleanup-pending
  phase (or reports no phase yet);
* any node that publishes devices for this driver is not Ready — an unreachable node is
  *unknown*, not proof of release.

Only when all of that is verified absent are its generated classes deleted, the project
finalizer removed and the revision deleted. Age never collects a revision.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dmn.api.attachment import LIVE_PHASES
from dmn.api.cluster import ApiFailure, Cluster, Conflict, NotFound
from dmn.api.cluster import resources as r
from dmn.api.identity import (
    ANNOTATION_DIGEST,
    DRIVER,
    LABEL_MANAGED_BY,
    LABEL_REVISION,
    MANAGED_BY,
    REVISION_FINALIZER,
)
from dmn.controller.conditions import condition, set_condition
from dmn.controller.stable_classes import STABLE_SELECTOR, is_stable_class, pinned_revisions

log = logging.getLogger(__name__)


TOPOLOGY_REASONS = frozenset({"Current", "Settling"})
"""Retention reasons that only the revision's topology (its status, generation and the
revision being published) decides."""


@dataclass(frozen=True)
class Retention:
    retained: bool
    reason: str
    message: str


def _claim_references(claim: dict[str, Any], name: str, uid: str) -> bool:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    for cfg in (allocation.get("devices") or {}).get("config") or []:
        opaque = cfg.get("opaque") or {}
        if opaque.get("driver") != DRIVER:
            continue
        ref = (opaque.get("parameters") or {}).get("revisionRef") or {}
        if ref.get("name") == name or (uid and ref.get("uid") == uid):
            return True
    return False


def _produced_and_live(topo: dict[str, Any], ref: dict[str, Any]) -> bool:
    """Whether ``topo`` is the topology a revision's ``topologyRef`` names (same UID) and is
    not being deleted."""
    meta = topo["metadata"]
    return bool(meta.get("uid") == ref.get("uid") and not meta.get("deletionTimestamp"))


def _node_ready(node: dict[str, Any]) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return bool(cond.get("status") == "True")
    return False


@dataclass
class RevisionCollector:
    cluster: Cluster
    #: topology UID -> revision being published (shared with the topology reconciler).
    publishing: dict[str, str] = field(default_factory=dict)
    #: Revisions whose last verdict was decided by their topology alone (``Current`` or
    #: ``Settling``): no ResourceClaim, attachment or Node event can release them, so the
    #: controller skips them on those events (a topology event, or the resync, rechecks).
    held_by_topology: set[str] = field(default_factory=set)
    #: the revision and its topology as the controller's watches hold them (None: not
    #: listed yet, or the revision not there); see :meth:`_current_in_cache`
    cached: Callable[[str], tuple[dict[str, Any], dict[str, Any] | None] | None] = lambda name: None

    def _current_in_cache(self, name: str) -> bool:
        """Whether the watch caches show ``name`` as its live topology's current revision
        (or the one being published). Only that verdict is taken from the caches: it
        retains, so a cache behind the API server can only delay a collection until the
        next reconcile, never make one. At rest every resync read each revision and its
        topology from the API server for this answer (two GETs per topology)."""
        seen = self.cached(name)
        if seen is None:
            return False
        revision, topo = seen
        ref = (revision.get("spec") or {}).get("topologyRef") or {}
        if topo is None or revision["metadata"].get("deletionTimestamp"):
            return False
        if not _produced_and_live(topo, ref):
            return False
        if self.publishing.get(str(ref.get("uid"))) == name:
            return True
        return bool(((topo.get("status") or {}).get("revision") or {}).get("name") == name)

    def _live_topology(self, ref: dict[str, Any]) -> dict[str, Any] | None:
        """The topology that produced the revision, if it still exists (same UID) and is
        not being deleted."""
        try:
            topo = self.cluster.get(r.NETWORK_TOPOLOGIES, ref.get("name", ""))
        except NotFound:
            return None
        return topo if _produced_and_live(topo, ref) else None

    def retention(self, revision: dict[str, Any]) -> Retention:
        meta = revision["metadata"]
        name, uid = meta["name"], meta.get("uid", "")
        ref = (revision.get("spec") or {}).get("topologyRef") or {}
        topo = self._live_topology(ref)
        live = topo is not None
        if not live:  # its topology is gone: nothing publishes it any more (bounded memory)
            self.publishing.pop(str(ref.get("uid")), None)
        if live and self.publishing.get(str(ref.get("uid"))) == name:
            return Retention(True, "Current", "being published for its topology")
        if live and topo is not None:
            current = ((topo.get("status") or {}).get("revision") or {}).get("name")
            if current == name:
                return Retention(True, "Current", "current revision of its topology")
            ready = condition(topo, "Ready")
            generation = topo["metadata"].get("generation")
            if ready is None or ready.get("observedGeneration") != generation:
                return Retention(True, "Settling", "topology has not settled its generation")
        stable = self.cluster.list(r.DEVICE_CLASSES, label_selector=STABLE_SELECTOR).items
        holder = pinned_revisions(stable).get(name)
        if holder is not None:
            return Retention(
                True, "StableClass", f"stable DeviceClass {holder} selects for this revision"
            )
        for claim in self.cluster.list(r.RESOURCE_CLAIMS).items:
            if _claim_references(claim, name, uid):
                cmeta = claim["metadata"]
                return Retention(
                    True,
                    "AllocationReference",
                    f"ResourceClaim {cmeta.get('namespace')}/{cmeta.get('name')}"
                    " is allocated to it",
                )
        for att in self.cluster.list(r.NETWORK_ATTACHMENT_STATUSES).items:
            aref = (att.get("spec") or {}).get("revisionRef") or {}
            if aref.get("name") != name and aref.get("uid") != uid:
                continue
            phase = (att.get("status") or {}).get("phase")
            if phase is None or phase in LIVE_PHASES:
                ameta = att["metadata"]
                return Retention(
                    True,
                    "LiveAttachment",
                    f"attachment {ameta.get('namespace')}/{ameta.get('name')}"
                    f" is {phase or 'unreported'}",
                )
        nodes = {
            (s.get("spec") or {}).get("nodeName")
            for s in self.cluster.list(r.RESOURCE_SLICES).items
            if (s.get("spec") or {}).get("driver") == DRIVER
        }
        nodes.discard(None)
        for node_name in sorted(n for n in nodes if isinstance(n, str)):
            try:
                node = self.cluster.get(r.NODES, node_name)
            except NotFound:
                return Retention(True, "NodeUnknown", f"node {node_name} is not known")
            if not _node_ready(node):
                return Retention(
                    True, "NodeUnreachable", f"node {node_name} is not Ready: release unverified"
                )
        return Retention(False, "Released", "no allocation, attachment or unverified node")

    def reconcile(self, name: str) -> bool:
        """Collect ``name`` if released; True when it was (or already is) gone."""
        if self._current_in_cache(name):
            self.held_by_topology.add(name)
            return False
        self.held_by_topology.discard(name)
        try:
            revision = self.cluster.get(r.NETWORK_TOPOLOGY_REVISIONS, name)
        except NotFound:
            return True
        verdict = self.retention(revision)
        if verdict.retained:
            if verdict.reason in TOPOLOGY_REASONS:
                self.held_by_topology.add(name)
            self._record(revision, verdict)
            return False
        ref = (revision.get("spec") or {}).get("topologyRef") or {}
        if self.publishing.get(str(ref.get("uid"))) == name and self._live_topology(ref):
            # the topology changed back to this revision while we decided: keep it (the
            # reconciler copes with the remaining race — see TopologyReconciler)
            self.held_by_topology.add(name)
            return False
        log.info("revision released name=%s; collecting", name)
        self._delete_classes(revision)
        try:
            self.cluster.delete(
                r.NETWORK_TOPOLOGY_REVISIONS, name, uid=revision["metadata"].get("uid")
            )
            revision = self.cluster.get(r.NETWORK_TOPOLOGY_REVISIONS, name)
        except NotFound:
            return True
        revision["metadata"]["finalizers"] = [
            f for f in revision["metadata"].get("finalizers") or [] if f != REVISION_FINALIZER
        ]
        with contextlib.suppress(NotFound):
            self.cluster.replace(r.NETWORK_TOPOLOGY_REVISIONS, revision)
        return True

    def _delete_classes(self, revision: dict[str, Any]) -> None:
        name = revision["metadata"]["name"]
        digest = (revision.get("spec") or {}).get("digest")
        selector = f"{LABEL_REVISION}={name[:63].rstrip('-.')},{LABEL_MANAGED_BY}={MANAGED_BY}"
        for cls in self.cluster.list(r.DEVICE_CLASSES, label_selector=selector).items:
            if (cls["metadata"].get("annotations") or {}).get(ANNOTATION_DIGEST) != digest:
                continue  # another revision's class with a truncated-equal label: not ours
            if is_stable_class(cls):
                continue  # the topology's own: it withdraws it (retention kept it until then)
            with contextlib.suppress(NotFound):
                self.cluster.delete(
                    r.DEVICE_CLASSES, cls["metadata"]["name"], uid=cls["metadata"]["uid"]
                )

    def _record(self, revision: dict[str, Any], verdict: Retention) -> None:
        if verdict.reason == "Current":
            return
        status = revision.get("status") or {}
        conds = set_condition(
            status.get("conditions"),
            "Retained",
            True,
            verdict.reason,
            verdict.message,
            revision["metadata"].get("generation"),
        )
        if conds == status.get("conditions"):
            return
        try:
            self.cluster.patch(
                r.NETWORK_TOPOLOGY_REVISIONS,
                revision["metadata"]["name"],
                {"status": {"conditions": conds}},
                status=True,
            )
        except (Conflict, NotFound):
            pass
        except ApiFailure as exc:
            log.warning(
                "revision status failed name=%s error=%s", revision["metadata"]["name"], exc
            )
