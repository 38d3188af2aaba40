"""What the IPAM design relies on from the API server, as checks any server must pass.

Run against the lab API server (``tests/ipam/test_lab_agreement.py``) and against the real
kube-apiserver of the upstream lab (``tests/e2e/test_control_plane.py``), so the lab's
stand-in is held to the real thing on exactly these points:

* concurrent creates of one allocation name: exactly one succeeds, every other gets 409
  AlreadyExists (the arbiter);
* a delete whose UID precondition names another object: 409 Conflict, nothing deleted;
* the ``status`` subresource: a write to the object ignores ``status``, a write to
  ``/status`` ignores the spec;
* the allocation's spec is immutable (CEL ``self == oldSelf``): 422 Invalid;
* the pool's CRD rules: more than two subnets, two subnets of one family, and a name longer
  than 63 characters are 422 Invalid.

Every allocation is owned by a ResourceClaim that exists while the check runs
(:func:`claim_owners`): on the upstream lab our controller runs beside the checks and
collects, at once, an allocation whose claim is gone, which would turn a 409 into a 201 or a
404 (a landing run lost an allocation to it that way).
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from dmn.api.cluster import AlreadyExists, ApiFailure, Cluster, Conflict, Invalid
from dmn.api.cluster import resources as r
from dmn.api.identity import API_VERSION
from dmn.api.ipam.ipallocation import Owner, allocation_manifest


def _allocation(pool: str, address: str, owner: Owner) -> dict[str, Any]:
    return allocation_manifest(pool, address, 4, "Dynamic", owner)


@contextlib.contextmanager
def claim_owners(cluster: Cluster, prefix: str, count: int) -> Iterator[list[Owner]]:
    """``count`` ResourceClaims in ``default`` for the checks' allocations to belong to,
    deleted afterwards (their allocations are then collectable)."""
    owners: list[Owner] = []
    try:
        for i in range(count):
            name = f"{prefix}-{i}"
            claim = {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": name},
                "spec": {
                    "devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "x"}}]}
                },
            }
            uid = cluster.create(r.RESOURCE_CLAIMS, claim, "default")["metadata"]["uid"]
            owners.append(Owner("default", name, uid, "node", f"op-{i}"))
        yield owners
    finally:
        for owner in owners:
            with contextlib.suppress(ApiFailure):
                cluster.delete(r.RESOURCE_CLAIMS, owner.claim_name, "default")


def _pool(name: str, *cidrs: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "IPPool",
        "metadata": {"name": name},
        "spec": {"subnets": [{"cidr": c} for c in cidrs]},
    }


def one_winner(connect: Callable[[], Cluster], suffix: str, contenders: int = 8) -> None:
    """``contenders`` threads create the same allocation at once: one 201, the rest 409."""
    with connect() as admin, claim_owners(admin, f"arb-{suffix}", contenders) as owners:
        _one_winner(connect, suffix, owners)


def _one_winner(connect: Callable[[], Cluster], suffix: str, owners: list[Owner]) -> None:
    address = "10.90.0.7"
    outcomes: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(len(owners))

    def run(owner: Owner) -> None:
        with connect() as cluster:
            barrier.wait()
            try:
                cluster.create(r.IP_ALLOCATIONS, _allocation(f"arb-{suffix}", address, owner))
                outcome = "created"
            except AlreadyExists:
                outcome = "exists"
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=run, args=(owner,)) for owner in owners]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(outcomes) == ["created"] + ["exists"] * (len(owners) - 1)


def uid_precondition(cluster: Cluster, suffix: str) -> None:
    with claim_owners(cluster, f"pre-{suffix}", 1) as (owner,):
        _uid_precondition(cluster, suffix, owner)


def _uid_precondition(cluster: Cluster, suffix: str, owner: Owner) -> None:
    obj = cluster.create(r.IP_ALLOCATIONS, _allocation(f"pre-{suffix}", "10.90.0.8", owner))
    name = obj["metadata"]["name"]
    with pytest.raises(Conflict):
        cluster.delete(r.IP_ALLOCATIONS, name, uid=str(uuid.uuid4()))
    assert cluster.get(r.IP_ALLOCATIONS, name)["metadata"]["uid"] == obj["metadata"]["uid"]
    cluster.delete(r.IP_ALLOCATIONS, name, uid=obj["metadata"]["uid"])


def immutable_spec(cluster: Cluster, suffix: str) -> None:
    with claim_owners(cluster, f"imm-{suffix}", 1) as (owner,):
        _immutable_spec(cluster, suffix, owner)


def _immutable_spec(cluster: Cluster, suffix: str, owner: Owner) -> None:
    obj = cluster.create(r.IP_ALLOCATIONS, _allocation(f"imm-{suffix}", "10.90.0.9", owner))
    with pytest.raises(Invalid):
        cluster.patch(
            r.IP_ALLOCATIONS,
            obj["metadata"]["name"],
            {"spec": {"owner": {**owner.to_api(), "claimName": "thief"}}},
        )
    cluster.delete(r.IP_ALLOCATIONS, obj["metadata"]["name"])


def status_subresource(cluster: Cluster, suffix: str) -> None:
    name = f"st-{suffix}"
    # the created object as stored (a later read may already hold the controller's count)
    created = cluster.create(r.IP_POOLS, {**_pool(name, "10.91.0.0/24"), "status": {"size": 99}})
    assert "size" not in (created.get("status") or {})
    # the object this status write stored: a later read may already show the controller's
    # own count of the pool (on the real control plane it reconciles at once)
    written = cluster.patch(
        r.IP_POOLS,
        name,
        {"spec": {"subnets": [{"cidr": "10.92.0.0/24"}]}, "status": {"size": 5}},
        status=True,
    )
    assert written["status"]["size"] == 5
    assert written["spec"]["subnets"] == [{"cidr": "10.91.0.0/24"}]
    got = cluster.get(r.IP_POOLS, name)
    assert got["spec"]["subnets"] == [{"cidr": "10.91.0.0/24"}]
    cluster.delete(r.IP_POOLS, name)


def pool_rules(cluster: Cluster, suffix: str) -> None:
    bad = [
        _pool(f"three-{suffix}", "10.93.0.0/24", "fd00:93::/64", "10.94.0.0/24"),
        _pool(f"twov4-{suffix}", "10.93.0.0/24", "10.94.0.0/24"),
        _pool("p" * 64, "10.95.0.0/24"),
    ]
    for doc in bad:
        with pytest.raises(Invalid):
            cluster.create(r.IP_POOLS, doc)
    dual = _pool(f"dual-{suffix}", "10.93.0.0/24", "fd00:93::/64")
    dual["spec"]["subnets"][1]["ranges"] = [{"start": "fd00:93::10", "end": "fd00:93::ff"}]
    ok = cluster.create(r.IP_POOLS, dual)  # (the upstream lab's webhook admits it too)
    cluster.delete(r.IP_POOLS, ok["metadata"]["name"])


ALL: tuple[Callable[[Cluster, str], None], ...] = (
    uid_precondition,
    immutable_spec,
    status_subresource,
    pool_rules,
)
