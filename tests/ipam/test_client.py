"""The allocation client against the lab API server: the create arbitrates, concurrent
requesters get distinct addresses, exhaustion, static rules, release with a UID
precondition, and finding what a lost response created."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest

from dmn.api.cluster import Cluster, connect
from dmn.api.cluster import resources as r
from dmn.api.ipam.addresses import allocation_name
from dmn.api.ipam.allocator import AddressRequest, dynamic_candidates
from dmn.api.ipam.client import Allocation, AllocationClient, Owner, Refused, Released
from dmn.api.ipam.ipallocation import LABEL_CLAIM_UID, LABEL_POOL
from dmn.api.ipam.pool_plan import SubnetPlan, plan_pool
from dmn.lab.apiserver import LabApiServer
from tests.ipam.pools import pool, subnet, v4


def owner(n: int | str, operation: str = "op-1") -> Owner:
    return Owner(
        "default", f"claim-{n}", str(uuid.uuid5(uuid.NAMESPACE_OID, str(n))), "node-a", operation
    )


def subnet_of(cluster: Cluster, name: str) -> SubnetPlan:
    plan, _ = plan_pool(cluster.get(r.IP_POOLS, name))
    assert plan is not None
    return plan.subnets[4]


def create_pool(cluster: Cluster, doc: dict[str, Any]) -> None:
    cluster.create(r.IP_POOLS, doc)


def allocated(result: Allocation | Refused) -> Allocation:
    assert isinstance(result, Allocation), result
    return result


def test_dynamic_allocation_creates_the_arbiter_object(cluster: Cluster) -> None:
    create_pool(
        cluster, pool("dyn", v4(routes=[{"destination": "10.58.0.0/16", "gateway": "10.56.0.1"}]))
    )
    client = AllocationClient(cluster)
    me = owner(1)
    got = allocated(client.allocate("dyn", AddressRequest(4), me))
    assert got.interface_address.endswith("/24")
    assert got.gateway == "10.56.0.1"
    assert [rt.destination for rt in got.routes] == ["10.58.0.0/16"]
    obj = cluster.get(r.IP_ALLOCATIONS, allocation_name("dyn", got.address))
    assert obj["metadata"]["uid"] == got.uid
    assert obj["metadata"]["labels"] == {LABEL_POOL: "dyn", LABEL_CLAIM_UID: me.claim_uid}
    assert obj["spec"]["kind"] == "Dynamic" and obj["spec"]["family"] == "IPv4"
    assert obj["spec"]["owner"]["operationID"] == "op-1"
    # idempotent per owner, pool and family: a retry never takes a second address
    again = allocated(client.allocate("dyn", AddressRequest(4), me))
    assert again.holding == got.holding
    other_op = allocated(client.allocate("dyn", AddressRequest(4), owner(1, "op-2")))
    assert other_op.address != got.address


def _race(lab: LabApiServer, name: str, n: int, fresh: bool) -> list[str]:
    """``n`` requesters, each with its own client and connection, allocating from pool
    ``name`` at once; the addresses they got."""
    results: list[Allocation | Refused] = []
    lock = threading.Lock()
    barrier = threading.Barrier(n)

    def run(i: int) -> None:
        with Cluster(connect(url=lab.url)) as own:
            client = AllocationClient(own)
            barrier.wait()
            got = client.allocate(name, AddressRequest(4), owner(f"{name}-{i}"), fresh=fresh)
        with lock:
            results.append(got)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return [allocated(res).address for res in results]


def test_concurrent_requesters_get_distinct_addresses(lab: LabApiServer, cluster: Cluster) -> None:
    create_pool(cluster, pool("busy", v4(ranges=[("10.56.0.10", "10.56.0.49")], reserved=None)))
    addresses = _race(lab, "busy", 24, fresh=False)
    assert len(addresses) == 24
    assert len(set(addresses)) == 24
    objects = cluster.list(r.IP_ALLOCATIONS, label_selector=f"{LABEL_POOL}=busy").items
    assert sorted(o["spec"]["address"] for o in objects) == sorted(addresses)


def test_exhaustion_is_refused_with_a_reason(cluster: Cluster) -> None:
    create_pool(cluster, pool("tiny", v4(ranges=[("10.56.0.10", "10.56.0.12")], reserved=None)))
    client = AllocationClient(cluster)
    held = {
        allocated(client.allocate("tiny", AddressRequest(4), owner(f"t{i}"))).address
        for i in range(3)
    }
    assert held == {"10.56.0.10", "10.56.0.11", "10.56.0.12"}
    refused = client.allocate("tiny", AddressRequest(4), owner("t-late"))
    assert isinstance(refused, Refused) and refused.code == "E_IPPOOL_EXHAUSTED"


def test_static_rules(cluster: Cluster) -> None:
    create_pool(
        cluster,
        pool(
            "stat",
            v4(
                "10.58.0.0/24",
                gateway="10.58.0.1",
                ranges=[("10.58.0.10", "10.58.0.20")],
                reserved=[("10.58.0.200", "10.58.0.210")],
            ),
        ),
    )
    client = AllocationClient(cluster)
    got = allocated(client.allocate("stat", AddressRequest(4, "10.58.0.200"), owner("s1")))
    assert got.holding.kind == "Static" and got.address == "10.58.0.200"
    assert (
        allocated(client.allocate("stat", AddressRequest(4, "10.58.0.200"), owner("s1"))).uid
        == got.uid
    )
    # the same owner's dynamic request is its own: never answered with its static address
    dynamic = allocated(client.allocate("stat", AddressRequest(4), owner("s1")))
    assert dynamic.holding.kind == "Dynamic" and dynamic.address != got.address
    taken = client.allocate("stat", AddressRequest(4, "10.58.0.200"), owner("s2"))
    assert isinstance(taken, Refused) and taken.code == "E_IPAM_ADDRESS_TAKEN"
    outside = client.allocate("stat", AddressRequest(4, "10.58.0.15"), owner("s3"))
    assert isinstance(outside, Refused) and outside.code == "E_IPAM_STATIC_OUTSIDE_RESERVED"
    family = client.allocate("stat", AddressRequest(6), owner("s4"))
    assert isinstance(family, Refused) and family.code == "E_IPAM_FAMILY_MISMATCH"
    unknown = client.allocate("nope", AddressRequest(4), owner("s5"))
    assert isinstance(unknown, Refused) and unknown.code == "E_IPAM_UNKNOWN_POOL"


def test_ipv6_allocation(cluster: Cluster) -> None:
    create_pool(
        cluster,
        pool(
            "six",
            subnet(
                "fd00:58::/64",
                "fd00:58::1",
                [("fd00:58::100", "fd00:58::1ff")],
                [("fd00:58::f000", "fd00:58::f00f")],
            ),
        ),
    )
    client = AllocationClient(cluster)
    got = allocated(client.allocate("six", AddressRequest(6), owner("v6")))
    assert got.interface_address.startswith("fd00:58::1") and got.interface_address.endswith("/64")
    name = allocation_name("six", got.address)
    assert cluster.get(r.IP_ALLOCATIONS, name)["spec"]["family"] == "IPv6"
    static = allocated(client.allocate("six", AddressRequest(6, "fd00:58:0::f00f"), owner("v6s")))
    assert static.address == "fd00:58::f00f"


def test_release_requires_the_allocations_uid(cluster: Cluster) -> None:
    create_pool(cluster, pool("rel", v4("10.59.0.0/24", gateway="10.59.0.1")))
    client = AllocationClient(cluster)
    got = allocated(client.allocate("rel", AddressRequest(4), owner("r1")))
    wrong = client.release(got.name, str(uuid.uuid4()))
    assert isinstance(wrong, Refused) and wrong.code == "E_IPAM_NOT_OWNER"
    assert cluster.get(r.IP_ALLOCATIONS, got.name)["metadata"]["uid"] == got.uid
    assert client.release(got.name, got.uid) == Released(got.name, already_gone=False)
    assert client.release(got.name, got.uid) == Released(got.name, already_gone=True)
    # the address went to someone else meanwhile: the old holder's release must not free it
    again = allocated(client.allocate("rel", AddressRequest(4, None), owner("r1")))
    if again.address == got.address:
        stale = client.release(again.name, got.uid)
        assert isinstance(stale, Refused) and stale.code == "E_IPAM_NOT_OWNER"


def test_find_what_a_lost_response_created(cluster: Cluster) -> None:
    create_pool(cluster, pool("lost", v4("10.60.0.0/24", gateway="10.60.0.1")))
    me = owner("lost-1", "op-9")
    made = allocated(AllocationClient(cluster).allocate("lost", AddressRequest(4), me))
    allocated(
        AllocationClient(cluster).allocate("lost", AddressRequest(4), owner("lost-2", "op-9"))
    )
    # a restarted node knows only the owner it journaled before the create
    found = AllocationClient(cluster).find(me)
    assert [h.name for h in found] == [made.name]
    assert found[0].uid == made.uid and found[0].owner == me
    assert AllocationClient(cluster).find(owner("lost-1", "op-other")) == []


def test_a_terminating_pool_hands_out_nothing(cluster: Cluster) -> None:
    doc = pool("term", v4("10.61.0.0/24", gateway="10.61.0.1"))
    doc["metadata"]["finalizers"] = ["example.com/hold"]
    create_pool(cluster, doc)
    cluster.delete(r.IP_POOLS, "term")
    refused = AllocationClient(cluster).allocate("term", AddressRequest(4), owner("term"))
    assert isinstance(refused, Refused) and refused.code == "E_IPAM_POOL_TERMINATING"
    cluster.patch(r.IP_POOLS, "term", {"metadata": {"finalizers": None}})


@pytest.mark.parametrize(
    ("status_condition", "code"),
    [({"type": "Valid", "status": "False", "reason": "E_IPPOOL_OVERLAP"}, "E_IPAM_POOL_INVALID")],
)
def test_a_pool_the_controller_reports_invalid_hands_out_nothing(
    cluster: Cluster, status_condition: dict[str, str], code: str
) -> None:
    create_pool(cluster, pool("inv", v4("10.62.0.0/24", gateway="10.62.0.1")))
    cond = {**status_condition, "message": "overlaps", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    cluster.patch(r.IP_POOLS, "inv", {"status": {"conditions": [cond]}}, status=True)
    refused = AllocationClient(cluster).allocate("inv", AddressRequest(4), owner("inv"))
    assert isinstance(refused, Refused) and refused.code == code
    assert "E_IPPOOL_OVERLAP" in refused.message


def test_bad_input_is_a_refusal_not_a_traceback(cluster: Cluster) -> None:
    create_pool(cluster, pool("badin", v4("10.63.0.0/24")))
    client = AllocationClient(cluster)
    bad_owner = Owner("Not_A_Namespace", "c", "uid-x", "node", "op")
    refused = client.allocate("badin", AddressRequest(4), bad_owner)
    assert isinstance(refused, Refused) and refused.code == "E_SCHEMA"
    assert "claimNamespace" in refused.message
    assert cluster.list(r.IP_ALLOCATIONS, label_selector=f"{LABEL_POOL}=badin").items == []
    unknown = client.allocate("../ippools/x", AddressRequest(4), owner("badin"))
    assert isinstance(unknown, Refused) and unknown.code == "E_IPAM_UNKNOWN_POOL"
    released = client.release("..", "uid")
    assert isinstance(released, Refused) and released.code == "E_SCHEMA"


def test_the_node_allocates_from_the_pool_its_capture_just_read(cluster: Cluster) -> None:
    """ip/pool-addresses reads the pool at capture (subnets) and allocates right after: the
    node's port reuses that read for PLAN_REUSE_SECONDS after it was read (one GET fewer
    per family, and per Pod for the next captures), then reads again; a pool that could not
    be read is never reused."""
    from dmn.api.ipam.node_pools import PLAN_REUSE_SECONDS, ClusterAddressPools
    from dmn.opcodes.address_pools import ClaimOwner, PoolLease

    create_pool(cluster, pool("reuse", v4()))
    now = [100.0]
    client = AllocationClient(cluster)
    pools = ClusterAddressPools(client, clock=lambda: now[0])
    reads: list[str] = []
    real_get = cluster.get

    def counting_get(res: Any, name: str, namespace: str | None = None) -> Any:
        if res is r.IP_POOLS:
            reads.append(name)
        return real_get(res, name, namespace)

    cluster.get = counting_get  # type: ignore[method-assign]
    try:
        claim = ClaimOwner("default", "c", str(uuid.uuid4()), "node-a")
        assert not isinstance(pools.subnets("reuse"), Exception)
        lease = pools.allocate("reuse", 4, None, claim, "op-a")
        assert isinstance(lease, PoolLease) and reads == ["reuse"]
        now[0] += PLAN_REUSE_SECONDS - 0.1  # the next Pod's capture: the same read serves
        assert not isinstance(pools.subnets("reuse"), Exception)
        assert reads == ["reuse"]
        now[0] += 0.2  # older than the window since the read (a use never refreshes it)
        again = pools.allocate("reuse", 4, None, claim, "op-b")
        assert isinstance(again, PoolLease) and reads == ["reuse", "reuse"]
        now[0] += 0.1
        assert not isinstance(pools.subnets("reuse"), Exception)
        assert reads == ["reuse", "reuse"]
        now[0] += PLAN_REUSE_SECONDS + 0.1
        assert not isinstance(pools.subnets("reuse"), Exception)
        assert reads == ["reuse", "reuse", "reuse"]
        assert pools.subnets("missing").code == "E_IPAM_UNKNOWN_POOL"  # type: ignore[union-attr]
        assert pools.allocate("missing", 4, None, claim, "op-c").code == "E_IPAM_UNKNOWN_POOL"  # type: ignore[union-attr]
    finally:
        cluster.get = real_get  # type: ignore[method-assign]


def test_a_fresh_owner_is_served_by_one_create_when_its_first_candidate_is_free(
    cluster: Cluster,
) -> None:
    """The node's effect allocates for an owner that holds nothing: the first candidate is
    created without listing the pool; when another owner holds it, the snapshot path runs,
    and the address the client met taken is skipped from then on."""
    create_pool(cluster, pool("fresh", v4(ranges=[("10.56.0.10", "10.56.0.13")], reserved=None)))
    client = AllocationClient(cluster)
    first = allocated(client.allocate("fresh", AddressRequest(4), owner("f-1"), fresh=True))
    assert (client.snapshots, client.creates) == (0, 1)

    # another node's client (no memory) whose owner starts at the held address
    other = AllocationClient(cluster)
    rival = next(
        o
        for o in (owner(f"f-rival-{i}") for i in range(400))
        if next(dynamic_candidates(subnet_of(cluster, "fresh"), o.key, ())) == first.address
    )
    got = allocated(other.allocate("fresh", AddressRequest(4), rival, fresh=True))
    assert got.address != first.address
    assert other.snapshots == 1 and other.creates == 2  # the conflict, then the snapshot's
    # this client now knows the first address taken: a third owner starting there skips it
    third = next(
        o
        for o in (owner(f"f-third-{i}") for i in range(400))
        if next(dynamic_candidates(subnet_of(cluster, "fresh"), o.key, ())) == first.address
    )
    got3 = allocated(other.allocate("fresh", AddressRequest(4), third, fresh=True))
    assert got3.address not in {first.address, got.address}
    assert other.snapshots == 1 and other.creates == 3

    # the pool full: the fresh path finds no candidate it does not know taken, and the
    # snapshot refuses with the pool's reason
    allocated(client.allocate("fresh", AddressRequest(4), owner("f-4"), fresh=True))
    refused = client.allocate("fresh", AddressRequest(4), owner("f-5"), fresh=True)
    assert isinstance(refused, Refused) and refused.code == "E_IPPOOL_EXHAUSTED"
    held = cluster.list(r.IP_ALLOCATIONS, label_selector=f"{LABEL_POOL}=fresh").items
    assert len({o["spec"]["address"] for o in held}) == len(held) == 4


def test_concurrent_fresh_requesters_get_distinct_addresses(
    lab: LabApiServer, cluster: Cluster
) -> None:
    create_pool(cluster, pool("race", v4(ranges=[("10.56.0.10", "10.56.0.29")], reserved=None)))
    addresses = _race(lab, "race", 16, fresh=True)
    assert len(addresses) == 16 == len(set(addresses))
