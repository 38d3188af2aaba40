"""``ip/pool-addresses/v1`` on the host kernel against the lab API server: addresses from an
IPPool on macvlan children in scratch sandboxes, arbitrated by real IPAllocation creates.

Proves apply/observe/undo (dual-stack, the pool's route, nothing left: no address, no route,
no IPAllocation), two owners on one pool get distinct addresses, static addresses only from
the reserved range, exhaustion refused with nothing half-applied, the refusal without an
allocation port or verified claim, recovery at each point a crash can leave the effect
(allocated but nothing on the link; everything applied but no outcome recorded), and a
hostile tenant that removes or replaces the address.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dmn.api.cluster import Cluster, connect
from dmn.api.cluster import resources as r
from dmn.api.ipam.client import AllocationClient
from dmn.api.ipam.node_pools import ClusterAddressPools
from dmn.lab.apiserver import LabApiServer
from dmn.opcodes.address_pools import ClaimOwner, PoolLease
from dmn.opcodes.device_environment import DeviceEnvironment
from dmn.opcodes.executor import EffectContext, ExecutorError, RecoveryObservation
from dmn.vocabulary.handles import Handle
from dmn.vocabulary.terms import Access
from tests.ipam.pools import pool, subnet, v4
from tests.kernel.test_ip_executors import ip_json, l3_state
from tests.kernel.world import EXECUTORS, Done, World, drive, host_handle, world

pytestmark = pytest.mark.netns

KIND = "ip/pool-addresses/v1"
MACVLAN = {"ifName": "net1", "mode": "bridge", "mtu": 1500, "up": True}
CRD_DIR = Path(__file__).resolve().parents[2] / "charts" / "dra-multi-network" / "crds"
ROUTE = {"destination": "10.58.0.0/16", "gateway": "10.56.0.1"}


@pytest.fixture(scope="module")
def lab() -> Iterator[LabApiServer]:
    """The lab API server with the CRDs and two pools: "dual" (10.56.0.0/24 with a route,
    fd56::/64) and "tiny" (two addresses)."""
    with LabApiServer(bookmark_interval=0.5) as server, Cluster(connect(url=server.url)) as c:
        for path in sorted(CRD_DIR.glob("*.yaml")):
            c.create(r.CUSTOM_RESOURCE_DEFINITIONS, yaml.safe_load(path.read_text()))
        c.create(
            r.IP_POOLS,
            pool(
                "dual", v4(routes=[ROUTE]), subnet("fd56::/64", ranges=[("fd56::10", "fd56::ff")])
            ),
        )
        c.create(r.IP_POOLS, pool("tiny", subnet("10.57.0.0/30")))
        yield server


@pytest.fixture(scope="module")
def cluster(lab: LabApiServer) -> Iterator[Cluster]:
    with Cluster(connect(url=lab.url)) as c:
        yield c


def owner(n: int) -> ClaimOwner:
    return ClaimOwner("tenant-a", f"claim-{n}", f"uid-{n}", "node-1")


def allocations(cluster: Cluster) -> list[tuple[str, str]]:
    items = cluster.list(r.IP_ALLOCATIONS).items
    return sorted((o["spec"]["address"], o["spec"]["owner"]["claimUID"]) for o in items)


def env_for(w: World, sandbox: str, cluster: Cluster, who: ClaimOwner | None) -> Any:
    base = w.env(sandbox)
    pools = ClusterAddressPools(AllocationClient(cluster))
    env = DeviceEnvironment.extend(base, address_pools=pools, claim_owner=who)
    w.stack.callback(env.close)
    return env


def child(w: World, sandbox: str, op: str) -> Done:
    host = w.ipr(w.host)
    parents = [x for x in w.snapshot(w.host) if x.startswith("va")]
    parent = parents[0] if parents else w.veth(w.host)[0]
    handle = host_handle(host, parent, Access.CREATE_CHILD, hid="parent-1")
    return drive(
        w.env(sandbox), "linux/create-macvlan/v2", {"parent": (handle,)}, MACVLAN, op, "mk"
    )


def ctx(env: Any, link: Handle, parameters: dict[str, Any], op: str) -> EffectContext:
    return EffectContext(op, "ipam", {"interface": (link,)}, parameters, env)


def test_apply_observe_undo_dual_stack_with_route(cluster: Cluster) -> None:
    ex = EXECUTORS[KIND]
    with world() as w:
        sb = w.sandbox()
        mk = child(w, sb, "op1")
        before_l3 = l3_state(sb)
        env = env_for(w, sb, cluster, owner(1))
        done = drive(env, KIND, {"interface": (mk.output(),)}, {"pool": "dual"}, "op1", "ipam")
        out = done.output().observations
        addrs = str(out["ipAddresses"]).split()
        assert len(addrs) == 2 and addrs[0].startswith("10.56.0.") and addrs[0].endswith("/24")
        assert addrs[1].startswith("fd56::") and addrs[1].endswith("/64")
        live = {
            f"{i['local']}/{i['prefixlen']}"
            for a in ip_json(sb, "addr", "show", "dev", "net1")
            for i in a["addr_info"]
        }
        assert set(addrs) <= live
        routes = ip_json(sb, "-4", "route", "show", "10.58.0.0/16")
        assert [(x["gateway"], x["dev"]) for x in routes] == [("10.56.0.1", "net1")]
        held = allocations(cluster)
        assert [a for a, _ in held] == sorted(a.split("/")[0] for a in addrs)
        assert {u for _, u in held} == {"uid-1"}
        # owner identity in the object is the verified claim, the node and op/effect
        obj = cluster.list(r.IP_ALLOCATIONS).items[0]
        assert obj["spec"]["owner"]["operationID"] == "op1/ipam"
        assert obj["spec"]["owner"]["nodeName"] == "node-1"
        assert ex.recover(done.ctx, done.before) is RecoveryObservation.APPLIED
        done.undo()
        assert l3_state(sb) == before_l3
        assert allocations(cluster) == []
        done.undo()  # idempotent
        assert allocations(cluster) == []


def test_two_owners_get_distinct_addresses_and_static_only_from_reserved(cluster: Cluster) -> None:
    with world() as w:
        sandboxes = [w.sandbox() for _ in range(4)]
        kids = [child(w, sb, f"op{i}") for i, sb in enumerate(sandboxes)]
        done = []
        for i in range(2):
            env = env_for(w, sandboxes[i], cluster, owner(10 + i))
            done.append(
                drive(
                    env,
                    KIND,
                    {"interface": (kids[i].output(),)},
                    {"pool": "dual"},
                    f"op{i}",
                    "ipam",
                )
            )
        got = [str(d.output().observations["ipAddresses"]) for d in done]
        assert len(set(" ".join(got).split())) == 4, got
        # a static address from the reserved range; one outside it is refused, nothing made
        env = env_for(w, sandboxes[2], cluster, owner(12))
        link = kids[2].output()
        ex = EXECUTORS[KIND]
        outside = ctx(env, link, {"pool": "dual", "address": "10.56.0.50"}, "op2")
        before = ex.capture(outside)
        with pytest.raises(ExecutorError) as refused:
            ex.apply(outside, before)
        assert refused.value.code == "E_IPAM_STATIC_OUTSIDE_RESERVED"
        assert ex.recover(outside, before) is RecoveryObservation.NOT_APPLIED
        assert "uid-12" not in {u for _, u in allocations(cluster)}
        static = drive(
            env,
            KIND,
            {"interface": (link,)},
            {"pool": "dual", "address": "10.56.0.240"},
            "op2s",
            "ipam",
        )
        assert str(static.output().observations["ipAddresses"]).startswith("10.56.0.240/24 ")
        # the same static address for another owner: taken
        other = env_for(w, sandboxes[3], cluster, owner(13))
        taken = ctx(other, kids[3].output(), {"pool": "dual", "address": "10.56.0.240"}, "op9")
        with pytest.raises(ExecutorError) as refused:
            ex.apply(taken, ex.capture(taken))
        assert refused.value.code == "E_IPAM_ADDRESS_TAKEN"
        for d in [*done, static]:
            d.undo()
        assert allocations(cluster) == []


def test_exhaustion_is_refused_with_nothing_half_applied(cluster: Cluster) -> None:
    ex = EXECUTORS[KIND]
    with world() as w:
        sandboxes = [w.sandbox() for _ in range(3)]
        kids = [child(w, sb, f"op{i}") for i, sb in enumerate(sandboxes)]
        done = [
            drive(
                env_for(w, sandboxes[i], cluster, owner(20 + i)),
                KIND,
                {"interface": (kids[i].output(),)},
                {"pool": "tiny"},
                f"op{i}",
                "ipam",
            )
            for i in range(2)
        ]
        before_l3 = l3_state(sandboxes[2])
        c = ctx(
            env_for(w, sandboxes[2], cluster, owner(22)), kids[2].output(), {"pool": "tiny"}, "op2"
        )
        before = ex.capture(c)
        with pytest.raises(ExecutorError) as refused:
            ex.apply(c, before)
        assert refused.value.code == "E_IPPOOL_EXHAUSTED"
        assert l3_state(sandboxes[2]) == before_l3
        assert len(allocations(cluster)) == 2
        for d in done:
            d.undo()
        assert allocations(cluster) == []


def test_refused_without_allocation_port_or_verified_claim(cluster: Cluster) -> None:
    ex = EXECUTORS[KIND]
    with world() as w:
        sb = w.sandbox()
        mk = child(w, sb, "op1")
        for env in (w.env(sb), env_for(w, sb, cluster, None)):
            with pytest.raises(ExecutorError) as refused:
                ex.capture(ctx(env, mk.output(), {"pool": "dual"}, "op1"))
            assert refused.value.code == "E_IPAM_NOT_CONFIGURED"
        with pytest.raises(ExecutorError) as refused:
            ex.capture(ctx(env_for(w, sb, cluster, owner(1)), mk.output(), {"pool": "nope"}, "op1"))
        assert refused.value.code == "E_IPAM_UNKNOWN_POOL"


def test_recovery_releases_what_a_crash_left(cluster: Cluster) -> None:
    """A crash after the allocation's create (nothing on the link) and one after the whole
    apply (no outcome recorded): recover tells them apart, undo from the before-image alone
    leaves no address, route or allocation."""
    ex = EXECUTORS[KIND]
    with world() as w:
        sb = w.sandbox()
        mk = child(w, sb, "op1")
        before_l3 = l3_state(sb)
        env = env_for(w, sb, cluster, owner(30))
        c = ctx(env, mk.output(), {"pool": "dual"}, "op1")
        before = ex.capture(c)
        assert ex.recover(c, before) is RecoveryObservation.NOT_APPLIED
        # the create happened, the response was lost, the process died
        pools = env.address_pools
        pools.allocate("dual", 4, None, owner(30), "op1/ipam")
        assert ex.recover(c, before) is RecoveryObservation.UNCERTAIN
        ex.undo(c, before, {})
        assert allocations(cluster) == []
        # the whole apply happened, the outcome was never recorded; a retry adopts nothing twice
        ex.apply(c, before)
        assert len(allocations(cluster)) == 2
        assert ex.recover(c, before) is RecoveryObservation.APPLIED
        ex.undo(c, before, {})
        assert allocations(cluster) == [] and l3_state(sb) == before_l3


@pytest.mark.adversarial
def test_hostile_tenant_removing_or_replacing_the_address(cluster: Cluster) -> None:
    with world() as w:
        sb = w.sandbox()
        mk = child(w, sb, "op1")
        env = env_for(w, sb, cluster, owner(40))
        done = drive(env, KIND, {"interface": (mk.output(),)}, {"pool": "dual"}, "op1", "ipam")
        v4addr = str(done.output().observations["ipAddresses"]).split()[0]
        # removed: undo releases the allocation (the sandbox no longer uses the address)
        run = ["ip", "netns", "exec", sb, "ip"]
        subprocess.run([*run, "addr", "del", v4addr, "dev", "net1"], check=True)
        done.undo()
        assert allocations(cluster) == []
        # replaced (deleted and added again by the tenant): left in place, its allocation
        # kept, the effect quarantined (E_ADDRESS_NOT_OWNED); the other family is released
        done = drive(env, KIND, {"interface": (mk.output(),)}, {"pool": "dual"}, "op2", "ipam")
        v4addr = str(done.output().observations["ipAddresses"]).split()[0]
        subprocess.run([*run, "addr", "del", v4addr, "dev", "net1"], check=True)
        # the kernel stamps an address in hundredths of a second: one re-added within the
        # same hundredth is indistinguishable from ours (a documented limit, STAMPS)
        time.sleep(0.02)
        subprocess.run([*run, "addr", "add", v4addr, "dev", "net1"], check=True)
        with pytest.raises(ExecutorError) as refused:
            done.undo()
        assert refused.value.code == "E_ADDRESS_NOT_OWNED"
        assert [a for a, _ in allocations(cluster)] == [v4addr.split("/")[0]]
        for obj in cluster.list(r.IP_ALLOCATIONS).items:
            cluster.delete(r.IP_ALLOCATIONS, obj["metadata"]["name"])


def test_a_second_interface_of_the_same_pool_shares_its_route_never_adopts_it(
    cluster: Cluster,
) -> None:
    """Two claims of one template in one Pod: two macvlan children, each addressed from
    "dual". The kernel takes one 10.58.0.0/16 route per key; the second effect records it as
    shared (not added, not adopted), so its undo leaves the first interface's route, and the
    first's undo removes it. A route to the prefix through another gateway still refuses."""
    with world() as w:
        sb = w.sandbox()
        before_l3 = l3_state(sb)
        first = child(w, sb, "op1")
        host = w.ipr(w.host)
        parent = next(x for x in w.snapshot(w.host) if x.startswith("va"))
        handle = host_handle(host, parent, Access.CREATE_CHILD, hid="parent-1")
        second = drive(
            w.env(sb), "linux/create-macvlan/v2", {"parent": (handle,)},
            {**MACVLAN, "ifName": "net2"}, "op2", "mk",
        )  # fmt: skip
        a = drive(env_for(w, sb, cluster, owner(1)), KIND, {"interface": (first.output(),)},
                  {"pool": "dual"}, "op1", "ipam")  # fmt: skip
        b = drive(env_for(w, sb, cluster, owner(2)), KIND, {"interface": (second.output(),)},
                  {"pool": "dual"}, "op2", "ipam")  # fmt: skip
        assert b.before["routes"] == [] and len(b.before["sharedRoutes"]) == 1, b.before
        routes = ip_json(sb, "-4", "route", "show", "10.58.0.0/16")
        assert [(x["gateway"], x["dev"]) for x in routes] == [("10.56.0.1", "net1")]
        b.undo()
        routes = ip_json(sb, "-4", "route", "show", "10.58.0.0/16")
        assert [(x["gateway"], x["dev"]) for x in routes] == [("10.56.0.1", "net1")]
        a.undo()
        assert ip_json(sb, "-4", "route", "show", "10.58.0.0/16") == []
        assert allocations(cluster) == []
        # a route with the key through another gateway is no shared route: refused
        ipr = w.ipr(sb)
        net2 = ipr.link_lookup(ifname="net2")[0]
        ipr.addr("add", index=net2, address="10.56.0.99", prefixlen=24)
        ipr.route("add", dst="10.58.0.0/16", gateway="10.56.0.254", oif=net2)
        with pytest.raises(ExecutorError) as err:
            drive(env_for(w, sb, cluster, owner(3)), KIND, {"interface": (first.output(),)},
                  {"pool": "dual"}, "op3", "ipam")  # fmt: skip
        assert err.value.code == "E_ROUTE_EXISTS", err.value
        assert allocations(cluster) == []
        ipr.route("del", dst="10.58.0.0/16", gateway="10.56.0.254", oif=net2)
        ipr.addr("del", index=net2, address="10.56.0.99", prefixlen=24)
        second.undo()
        first.undo()
        assert l3_state(sb) == before_l3


class CountingPools(ClusterAddressPools):
    """The cluster port, counting the owner lookups (each one an IPAllocation list)."""

    def __init__(self, client: AllocationClient) -> None:
        super().__init__(client)
        self.held_calls = 0

    def held(self, owner: ClaimOwner, operation: str) -> tuple[PoolLease, ...]:
        self.held_calls += 1
        return super().held(owner, operation)


def test_apply_then_observe_lists_the_allocations_once_recovery_reads_afresh(
    cluster: Cluster,
) -> None:
    """Issue 38 speed: an attach's observe takes the leases its apply just got (no owner
    lookup), once; a second observe, and recovery, list them afresh; the leases are the same
    either way. IPAllocation lists per dual-stack attach: none (each family's first candidate
    is created without a snapshot of the pool, whose allocations hold nothing of this owner),
    was 2 (one per family in apply), and 3 before that."""
    ex = EXECUTORS[KIND]
    with world() as w:
        sb = w.sandbox()
        mk = child(w, sb, "op1")
        before_l3 = l3_state(sb)
        client = AllocationClient(cluster)
        pools = CountingPools(client)
        lists: list[str] = []
        pool_allocations = client._pool_allocations

        def counted(pool: str) -> list[dict[str, Any]]:
            lists.append(pool)
            return pool_allocations(pool)

        client._pool_allocations = counted  # type: ignore[method-assign]
        env = DeviceEnvironment.extend(w.env(sb), address_pools=pools, claim_owner=owner(50))
        w.stack.callback(env.close)
        c = ctx(env, mk.output(), {"pool": "dual"}, "op1")
        before = ex.capture(c)
        ex.apply(c, before)
        first = ex.observe(c, before)
        assert first.postconditions_ok, first.detail
        assert pools.held_calls == 0 and lists == []
        again = ex.observe(c, before)  # no apply before it: a fresh read
        assert pools.held_calls == 1
        leases = first.outputs["interface"][0].observations["ipamLeases"]
        assert again.outputs["interface"][0].observations["ipamLeases"] == leases
        assert ex.recover(c, before) is RecoveryObservation.APPLIED
        assert pools.held_calls == 2
        late = ex.observe(c, before)  # recovery dropped the handover: read again
        assert pools.held_calls == 3 and late.postconditions_ok
        ex.undo(c, before, dict(first.outputs))
        assert allocations(cluster) == [] and l3_state(sb) == before_l3
