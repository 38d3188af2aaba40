"""An informer cache of this node's Pods and of ResourceClaims, for answers without API calls.

Why: NRI hooks of every Pod on the node pass through the agent, most of them Pods that use
no claim of ours. Asking the API server for each (list the namespace's claims, get the
Pod) made an API brownout fail or stall container starts for every Pod on the node. Two
list/watches (:class:`~dmn.api.cluster.ListWatch`, which reconnects with backoff and
jitter) keep what is needed in memory: Pods bound to this node (field selector
``spec.nodeName``) and a compact summary of every ResourceClaim (whether it carries a
result of our driver, and the Pod UIDs it is reserved for).

Contract: :meth:`NodeObjects.proves_no_claims` is True only when the cache *proves* a Pod
has no claim of ours — the Pod is cached with the runtime's UID, every claim it references
(``spec.resourceClaims`` names, ``status.resourceClaimStatuses`` for template-generated
ones, each template entry resolved) is cached *allocated* and its allocation carries no
result of our driver, and no claim of ours is reserved for its UID. A Pod's claim
references are immutable once it is created, the kubelet runs a sandbox only after its
claims are allocated and reserved for it, and a reserved claim's allocation does not
change; so a cache that lags behind can only fail to prove (an unallocated claim is
unknown, not "not ours": its allocation may be on its way), and the caller then asks the
API server as before.

For a Pod *with* claims of ours (issue 15: these reads were a third of RunPodSandbox) the
cache never answers what authorizes — the Pod and its claims are still read fresh
(:mod:`.pod_claims`) — only what is immutable or content-addressed:
:meth:`NodeObjects.pod` returns the cached Pod only when its UID is the runtime's, to name
the claims to read (``spec.resourceClaims`` is immutable for a UID, a generated claim's
name is written once), and :meth:`NodeObjects.revision` a cached NetworkTopologyRevision
only when its name, UID and spec digest are the ones the allocation pins. Its spec is then
the pinned content; its phase the verifier still checks on the cached copy. A revision a
claim allocation references is retained (:mod:`dmn.controller.revision_gc`), and the
controller never moves a Ready revision back to Pending or Failed, so a cached copy only
lags on changes that do not alter the decision. Anything the cache does not hold, or holds
under another UID or digest, is read from the API server as before.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from dmn.api.cluster import Cluster, ListWatch
from dmn.api.cluster import resources as r
from dmn.api.cluster.listwatch import SYNCED

log = logging.getLogger(__name__)

Key = tuple[str, str]


@dataclass(frozen=True)
class ClaimSummary:
    uid: str
    allocated: bool
    ours: bool
    reserved_for: frozenset[str]


def summarize_claim(claim: dict[str, Any], driver: str) -> ClaimSummary:
    status = claim.get("status") or {}
    allocation = status.get("allocation")
    results = ((allocation or {}).get("devices") or {}).get("results") or []
    return ClaimSummary(
        uid=str((claim.get("metadata") or {}).get("uid") or ""),
        allocated=isinstance(allocation, dict),
        ours=any(isinstance(x, dict) and x.get("driver") == driver for x in results),
        reserved_for=frozenset(
            str(x.get("uid")) for x in status.get("reservedFor") or [] if isinstance(x, dict)
        ),
    )


def referenced_claims(pod: dict[str, Any]) -> list[str] | None:
    """Names of every claim the Pod references; None while a template-generated claim has
    no name in the Pod's status yet (unknown, not "none")."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    generated = {
        str(s.get("name")): s.get("resourceClaimName")
        for s in status.get("resourceClaimStatuses") or []
        if isinstance(s, dict)
    }
    names: list[str] = []
    for entry in spec.get("resourceClaims") or []:
        if not isinstance(entry, dict):
            return None
        if entry.get("resourceClaimName"):
            names.append(str(entry["resourceClaimName"]))
        elif entry.get("resourceClaimTemplateName"):
            name = generated.get(str(entry.get("name")))
            if not name:
                return None
            names.append(str(name))
        else:
            return None
    # the claim the scheduler made for the Pod's extended resources (DRAExtendedResource):
    # named only in the Pod's status, never in its spec
    extended = status.get("extendedResourceClaimStatus") or {}
    if isinstance(extended, dict) and extended.get("resourceClaimName"):
        names.append(str(extended["resourceClaimName"]))
    return names


def _key(obj: dict[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


class NodeObjects:
    def __init__(self, cluster: Cluster, node_name: str, driver: str) -> None:
        self.driver = driver
        self._lock = threading.Lock()
        self._pods: dict[Key, dict[str, Any]] = {}
        self._claims: dict[Key, ClaimSummary] = {}
        self._ours_reserved: dict[str, set[Key]] = {}  # pod uid -> claims of ours
        self._revisions: dict[str, dict[str, Any]] = {}
        self._synced = {"pods": threading.Event(), "claims": threading.Event()}
        self._revisions_synced = threading.Event()  # not part of :attr:`synced`
        self._watches = {
            "pods": ListWatch(
                cluster, r.PODS, field_selector=f"spec.nodeName={node_name}", timeout_seconds=60
            ),
            "claims": ListWatch(cluster, r.RESOURCE_CLAIMS, timeout_seconds=60),
            "revisions": ListWatch(cluster, r.NETWORK_TOPOLOGY_REVISIONS, timeout_seconds=60),
        }
        self._threads: list[threading.Thread] = []

    @property
    def synced(self) -> bool:
        return all(e.is_set() for e in self._synced.values())

    def wait_synced(self, timeout: float) -> bool:
        return all(e.wait(timeout) for e in self._synced.values())

    def start(self) -> NodeObjects:
        for kind in self._watches:
            t = threading.Thread(target=self._consume, args=(kind,), name=f"informer-{kind}")
            t.daemon = True
            t.start()
            self._threads.append(t)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        for lw in self._watches.values():
            lw.stop()
        for t in self._threads:
            t.join(timeout)
        self._threads = []

    def _consume(self, kind: str) -> None:
        synced = self._synced.get(kind, self._revisions_synced)
        try:
            for event in self._watches[kind].events():
                if event.type == SYNCED:
                    synced.set()
                elif kind == "pods":
                    self._pod_event(event.type, event.object)
                elif kind == "claims":
                    self._claim_event(event.type, event.object)
                else:
                    self._revision_event(event.type, event.object)
        except Exception:  # a bug must not leave a half-working cache: prove nothing
            log.exception("event=informer-failed kind=%s", kind)
            synced.clear()

    def _revision_event(self, kind: str, revision: dict[str, Any]) -> None:
        name = _key(revision)[1]
        with self._lock:
            if kind == "DELETED":
                self._revisions.pop(name, None)
            else:
                self._revisions[name] = revision

    def _pod_event(self, kind: str, pod: dict[str, Any]) -> None:
        with self._lock:
            if kind == "DELETED":
                self._pods.pop(_key(pod), None)
            else:
                self._pods[_key(pod)] = pod

    def _claim_event(self, kind: str, claim: dict[str, Any]) -> None:
        key = _key(claim)
        with self._lock:
            old = self._claims.pop(key, None)
            if old is not None and old.ours:
                for uid in old.reserved_for:
                    self._ours_reserved.get(uid, set()).discard(key)
                    if not self._ours_reserved.get(uid, True):
                        del self._ours_reserved[uid]
            if kind == "DELETED":
                return
            new = summarize_claim(claim, self.driver)
            self._claims[key] = new
            if new.ours:
                for uid in new.reserved_for:
                    self._ours_reserved.setdefault(uid, set()).add(key)

    def proves_no_claims(self, namespace: str, pod_name: str, pod_uid: str) -> bool:
        """True only when the cache proves the Pod uses no claim of ours (module doc)."""
        if not self.synced:
            return False
        with self._lock:
            pod = self._pods.get((namespace, pod_name))
            if pod is None or (pod.get("metadata") or {}).get("uid") != pod_uid:
                return False
            if not (pod.get("spec") or {}).get("nodeName"):
                # a version from before the binding may lack the extended-resource claim
                # the scheduler records in status before it binds: not proof of "none"
                return False
            if self._ours_reserved.get(pod_uid):
                return False
            names = referenced_claims(pod)
            if names is None:
                return False
            for name in names:
                summary = self._claims.get((namespace, name))
                if summary is None or not summary.allocated or summary.ours:
                    return False
            return True

    def pod(self, namespace: str, pod_name: str, pod_uid: str) -> dict[str, Any] | None:
        """The cached Pod when it has the runtime's UID, else None.

        Read-only: the object is shared with the cache (events replace it, never edit it).
        Only names claims to read (module doc): it never stands in for the Pod GET."""
        if not self._synced["pods"].is_set():
            return None
        with self._lock:
            pod = self._pods.get((namespace, pod_name))
        if pod is None or (pod.get("metadata") or {}).get("uid") != pod_uid:
            return None
        return pod

    def reserved_ours(self, namespace: str, pod_uid: str) -> set[str]:
        """Names of the cached claims of ours in ``namespace`` reserved for ``pod_uid``
        (a hint of which claims to read; the reads decide)."""
        with self._lock:
            return {n for ns, n in self._ours_reserved.get(pod_uid, set()) if ns == namespace}

    def revision(self, name: str, uid: str, digest: str) -> dict[str, Any] | None:
        """The cached revision when its name, UID and spec digest are exactly these (its
        spec is then the content the allocation pins), else None (ask the API server).
        Read-only, like :meth:`pod`."""
        if not self._revisions_synced.is_set():
            return None
        with self._lock:
            rev = self._revisions.get(name)
        if rev is None:
            return None
        if (rev.get("metadata") or {}).get("uid") != uid:
            return None
        if (rev.get("spec") or {}).get("digest") != digest:
            return None
        return rev
