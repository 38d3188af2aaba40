"""Reading a ResourceClaim and verifying its allocation against its revision and this node.

Shared by preparation (a new allocation needs a Ready revision) and sandbox attachment
(an already prepared claim may use a revision a newer one superseded). The pure check is
:func:`.verify.verify_allocation`; this class adds the two reads it needs (the claim, its
NetworkTopologyRevision) and turns API failures into :class:`Refusal` values. The claim is
always read from the API server. The revision may come from the informer cache
(``cached=True``: preparation and attachment both ask) when the cache holds exactly the
name, UID and digest the allocation pins (:meth:`.node_objects.NodeObjects.revision`):
its spec is then the content the allocation pins, immutable under that UID and digest.
Only its phase can be older than the API server's, by the watch's delay, and only in the
accepting direction: a cached copy whose phase would refuse is never used (the API server
is asked, so a refusal is always decided on a fresh read). What that costs: a revision
superseded (or failed) less than a watch delay before a NodePrepare may still be prepared
under, as it would have been had the prepare come that moment earlier — no lock orders a
revision's phase change against a node's prepare either way. What it saves: one API round
trip per NodePrepare (about a fifth of a prepare in ``benchmarks/pod_storm.py``'s profile),
in parallel with kubelet's other Pods in a burst.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dmn.agent.coordinator.config import NodeConfig
from dmn.agent.coordinator.handles import DeviceView
from dmn.agent.coordinator.node_objects import NodeObjects
from dmn.agent.coordinator.verify import (
    Refusal,
    VerifiedClaim,
    driver_results,
    revision_usable,
    verify_allocation,
)
from dmn.api.cluster import ApiFailure, Cluster, NotFound
from dmn.api.cluster import resources as r
from dmn.interpreter.loader import Plugin


class ClaimVerifier:
    def __init__(
        self,
        config: NodeConfig,
        cluster: Cluster,
        devices: DeviceView,
        plugins: Mapping[str, Plugin],
        objects: NodeObjects | None = None,
    ) -> None:
        self.config = config
        self.cluster = cluster
        self.devices = devices
        self.plugins = plugins
        self.objects = objects

    def read(self, namespace: str, name: str, uid: str) -> dict[str, Any]:
        try:
            claim = self.cluster.get(r.RESOURCE_CLAIMS, name, namespace)
        except NotFound as exc:
            raise Refusal("E_CLAIM_NOT_FOUND", f"claim {namespace}/{name} not found") from exc
        except ApiFailure as exc:
            raise Refusal(
                "E_API", f"reading claim {namespace}/{name}: {exc}", retryable=True
            ) from exc
        if (claim.get("metadata") or {}).get("uid") != uid:
            raise Refusal(
                "E_CLAIM_UID", f"claim {namespace}/{name} is not uid {uid}", "metadata.uid"
            )
        return claim

    def verify(
        self, claim: Mapping[str, Any], accept_superseded: bool = False, cached: bool = False
    ) -> VerifiedClaim | None:
        return self.verify_with_revision(claim, accept_superseded, cached)[0]

    def verify_with_revision(
        self, claim: Mapping[str, Any], accept_superseded: bool = False, cached: bool = False
    ) -> tuple[VerifiedClaim | None, dict[str, Any]]:
        """:meth:`verify`, also returning the revision object it verified against (empty
        when the claim has no results of ours): the caller runs exactly the revision that was
        checked, without reading it a second time. ``cached``: the informer's copy when it
        is exactly the pinned revision and its phase is accepted (module doc), else the API
        server's."""
        uid = str(claim["metadata"]["uid"])
        results = driver_results(claim, self.config.driver)
        if not results:
            return None, {}
        ref = results[0].root.revision_ref
        name = ref.name
        hit = None
        if cached and self.objects is not None:
            hit = self.objects.revision(ref.name, ref.uid, ref.digest)
            if hit is not None and not revision_usable(hit, accept_superseded):
                hit = None  # a refusal is decided on the API server's copy only
        try:
            revision = (
                hit if hit is not None else self.cluster.get(r.NETWORK_TOPOLOGY_REVISIONS, name)
            )
        except NotFound as exc:
            raise Refusal(
                "E_REVISION_NOT_FOUND", f"revision {name} not found", "revisionRef"
            ) from exc
        except ApiFailure as exc:
            raise Refusal("E_API", f"reading revision {name}: {exc}", retryable=True) from exc
        verified = verify_allocation(
            uid,
            results,
            revision,
            pool=self.config.pool_name,
            personas=self.devices.personas(),
            plugins=self.plugins,
            accept_superseded=accept_superseded,
        )
        return verified, revision
