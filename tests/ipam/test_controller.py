"""The IPPool reconciler on the lab API server: status counts, validity, exhaustion Events,
collection of allocations whose claim is gone, and a pool in use that is not deleted; the
controller process wires it to its watches; the webhook refuses bad pools with codes."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dmn.api.cluster import Cluster, NotFound, connect
from dmn.api.cluster import resources as r
from dmn.api.identity import GROUP
from dmn.api.ipam.allocator import AddressRequest
from dmn.api.ipam.client import Allocation, AllocationClient, Owner, Refused
from dmn.api.ipam.ippool import POOL_FINALIZER
from dmn.controller.ippool import IPPoolReconciler
from dmn.controller.manager import Controller
from dmn.controller.webhook.review import ReviewContext, review
from dmn.controller.webhook.server import WebhookServer
from dmn.lab.apiserver import LabApiServer
from dmn.opcodes.registry import default_registry
from tests import waiting
from tests.ipam.pools import pool, v4
from tests.webhook.certs import ThrowawayCA


def claim(cluster: Cluster, name: str) -> Owner:
    obj = cluster.create(
        r.RESOURCE_CLAIMS,
        {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "devices": {"requests": [{"name": "net", "exactly": {"deviceClassName": "x"}}]}
            },
        },
    )
    return Owner("default", name, obj["metadata"]["uid"], "node-a", "op-1")


def take(cluster: Cluster, pool_name: str, owner: Owner, address: str | None = None) -> Allocation:
    got = AllocationClient(cluster).allocate(pool_name, AddressRequest(4, address), owner)
    assert isinstance(got, Allocation), got
    return got


def events_for(cluster: Cluster, name: str) -> list[tuple[str, str]]:
    return [
        (e["type"], e["reason"])
        for e in cluster.list(r.EVENTS, "default").items
        if e["involvedObject"].get("name") == name and e["involvedObject"].get("kind") == "IPPool"
    ]


def status_of(cluster: Cluster, name: str) -> dict[str, Any]:
    return cluster.get(r.IP_POOLS, name).get("status") or {}


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == kind)


@pytest.fixture
def reconciler(cluster: Cluster) -> IPPoolReconciler:
    return IPPoolReconciler(cluster)


def test_status_counts_and_finalizer(cluster: Cluster, reconciler: IPPoolReconciler) -> None:
    cluster.create(r.IP_POOLS, pool("counts", v4()))
    take(cluster, "counts", claim(cluster, "counts-1"))
    take(cluster, "counts", claim(cluster, "counts-2"))
    take(cluster, "counts", claim(cluster, "counts-3"), "10.56.0.201")
    assert reconciler.reconcile("counts") is True
    obj = cluster.get(r.IP_POOLS, "counts")
    assert POOL_FINALIZER in obj["metadata"]["finalizers"]
    status = obj["status"]
    assert (status["size"], status["allocated"]) == (190 + 50, 3)
    assert (status["dynamicAllocated"], status["staticAllocated"], status["free"]) == (2, 1, 237)
    assert condition(status, "Valid")["status"] == "True"
    assert condition(status, "Exhausted")["status"] == "False"


def test_exhaustion_warns_and_recovery_is_normal(
    cluster: Cluster, reconciler: IPPoolReconciler
) -> None:
    cluster.create(
        r.IP_POOLS, pool("ex", v4("10.70.0.0/24", ranges=[("10.70.0.10", "10.70.0.11")]))
    )
    held = [take(cluster, "ex", claim(cluster, f"ex-{i}")) for i in range(2)]
    reconciler.reconcile("ex")
    exhausted = condition(status_of(cluster, "ex"), "Exhausted")
    assert (exhausted["status"], exhausted["reason"]) == ("True", "E_IPPOOL_EXHAUSTED")
    assert events_for(cluster, "ex") == [("Warning", "E_IPPOOL_EXHAUSTED")]
    reconciler.reconcile("ex")  # unchanged: no second Event
    assert events_for(cluster, "ex") == [("Warning", "E_IPPOOL_EXHAUSTED")]
    client = AllocationClient(cluster)
    assert not isinstance(client.release(held[0].name, held[0].uid), Refused)
    reconciler.reconcile("ex")
    assert condition(status_of(cluster, "ex"), "Exhausted")["status"] == "False"
    assert sorted(events_for(cluster, "ex")) == [
        ("Normal", "IPPoolAvailable"),
        ("Warning", "E_IPPOOL_EXHAUSTED"),
    ]


def test_allocations_of_gone_or_replaced_claims_are_collected(
    cluster: Cluster, reconciler: IPPoolReconciler
) -> None:
    cluster.create(r.IP_POOLS, pool("gc", v4("10.71.0.0/24")))
    kept = take(cluster, "gc", claim(cluster, "gc-kept"))
    gone_owner = claim(cluster, "gc-gone")
    gone = take(cluster, "gc", gone_owner)
    replaced_owner = claim(cluster, "gc-replaced")
    replaced = take(cluster, "gc", replaced_owner)
    never = take(cluster, "gc", Owner("default", "gc-never", str(uuid.uuid4()), "n", "op"))
    cluster.delete(r.RESOURCE_CLAIMS, "gc-gone", "default")
    cluster.delete(r.RESOURCE_CLAIMS, "gc-replaced", "default")
    claim(cluster, "gc-replaced")  # same name, new UID
    reconciler.reconcile("gc")
    assert sorted(reconciler.collected) == sorted([gone.name, replaced.name, never.name])
    cluster.get(r.IP_ALLOCATIONS, kept.name)
    for name in (gone.name, replaced.name, never.name):
        with pytest.raises(NotFound):
            cluster.get(r.IP_ALLOCATIONS, name)
    assert status_of(cluster, "gc")["allocated"] == 1
    assert ("Normal", "IPAllocationCollected") in events_for(cluster, "gc")


def test_overlapping_pool_is_reported_invalid(
    cluster: Cluster, reconciler: IPPoolReconciler
) -> None:
    cluster.create(r.IP_POOLS, pool("ov-a", v4("10.72.0.0/24")))
    cluster.create(r.IP_POOLS, pool("ov-b", v4("10.72.0.128/25", gateway="10.72.0.129")))
    reconciler.reconcile("ov-b")
    valid = condition(status_of(cluster, "ov-b"), "Valid")
    assert (valid["status"], valid["reason"]) == ("False", "E_IPPOOL_OVERLAP")
    refused = AllocationClient(cluster).allocate("ov-b", AddressRequest(4), claim(cluster, "ov"))
    assert isinstance(refused, Refused) and refused.code == "E_IPAM_POOL_INVALID"


def test_a_pool_in_use_is_not_deleted(cluster: Cluster, reconciler: IPPoolReconciler) -> None:
    cluster.create(r.IP_POOLS, pool("inuse", v4("10.73.0.0/24")))
    got = take(cluster, "inuse", claim(cluster, "inuse-1"))
    reconciler.reconcile("inuse")
    cluster.delete(r.IP_POOLS, "inuse")
    assert reconciler.reconcile("inuse") is False
    obj = cluster.get(r.IP_POOLS, "inuse")
    assert obj["metadata"]["deletionTimestamp"]
    deletable = condition(obj["status"], "Deletable")
    assert (deletable["status"], deletable["reason"]) == ("False", "E_IPPOOL_IN_USE")
    assert ("Warning", "E_IPPOOL_IN_USE") in events_for(cluster, "inuse")
    assert not isinstance(AllocationClient(cluster).release(got.name, got.uid), Refused)
    assert reconciler.reconcile("inuse") is True
    with pytest.raises(NotFound):
        cluster.get(r.IP_POOLS, "inuse")


@pytest.fixture
def controller(lab: LabApiServer) -> Iterator[Controller]:
    with Cluster(connect(url=lab.url)) as c:
        ctl = Controller(c, default_registry(), resync=1.0)
        ctl.start()
        yield ctl
        ctl.stop()


def test_the_controller_keeps_pools_and_collects_on_claim_deletion(
    cluster: Cluster, controller: Controller
) -> None:
    cluster.create(r.IP_POOLS, pool("wired", v4("10.74.0.0/24")))
    owner = claim(cluster, "wired-1")
    got = take(cluster, "wired", owner)

    def counted() -> dict[str, Any] | None:
        status = status_of(cluster, "wired")
        return status if status.get("allocated") == 1 else None

    waiting.wait_for(counted, timeout=30, what="pool status counts the allocation")
    cluster.delete(r.RESOURCE_CLAIMS, owner.claim_name, "default")

    def collected() -> bool | None:
        try:
            cluster.get(r.IP_ALLOCATIONS, got.name)
        except NotFound:
            return True
        return None

    waiting.wait_for(collected, timeout=30, what="allocation of the deleted claim collected")


@pytest.mark.parametrize(
    ("doc", "code", "field"),
    [
        (pool("wh", v4(gateway="10.56.0.50")), "E_IPPOOL_GATEWAY", "spec.subnets[0].gateway"),
        (pool("wh", v4("10.80.0.0/24")), "E_IPPOOL_OVERLAP", "spec.subnets[0].cidr"),
    ],
)
def test_webhook_refuses_bad_pools_with_codes(doc: dict[str, Any], code: str, field: str) -> None:
    ctx = ReviewContext(
        registry=default_registry(),
        plugins=dict,
        pools=lambda: [pool("other", v4("10.80.0.0/16", gateway=None))],
    )
    request = {
        "uid": "u1",
        "kind": {
            "group": "networking.dra-multi-network.schseba.github.io",
            "version": "v1alpha1",
            "kind": "IPPool",
        },
        "resource": {
            "group": "networking.dra-multi-network.schseba.github.io",
            "version": "v1alpha1",
            "resource": "ippools",
        },
        "operation": "CREATE",
        "object": doc,
        "userInfo": {"username": "admin"},
    }
    response = review(request, ctx)
    assert response["allowed"] is False, response
    cause = response["status"]["details"]["causes"][0]
    assert (cause["reason"], cause["field"]) == (code, field)
    good = review({**request, "object": pool("wh", v4())}, ctx)
    assert good["allowed"] is True, good


def test_the_webhook_server_checks_overlap_against_the_clusters_pools(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The served webhook's context lists the cluster's IPPools: an overlapping pool is
    denied at admission with E_IPPOOL_OVERLAP, not only reported by the controller."""
    ca = ThrowawayCA()
    ca.issue(tmp_path / "tls.crt", tmp_path / "tls.key")
    cluster.create(r.IP_POOLS, pool("wh-existing", v4("10.81.0.0/24")))
    server = WebhookServer(
        cluster,
        default_registry(),
        cert_file=str(tmp_path / "tls.crt"),
        key_file=str(tmp_path / "tls.key"),
    )
    request = {
        "uid": "u2",
        "kind": {"group": GROUP, "version": "v1alpha1", "kind": "IPPool"},
        "resource": {"group": GROUP, "version": "v1alpha1", "resource": "ippools"},
        "operation": "CREATE",
        "object": pool("wh-new", v4("10.81.0.0/25")),
        "userInfo": {"username": "admin"},
    }
    response = review(request, server.context)
    assert response["allowed"] is False
    assert response["status"]["details"]["causes"][0]["reason"] == "E_IPPOOL_OVERLAP"
