"""The lab node's slice publication follows policies and keeps allocated devices pinned."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dmn.agent.slices import NodeSlicePublisher
from dmn.agent.slices.pins import ClaimPins
from dmn.api.cluster import Cluster
from dmn.api.cluster import resources as r
from dmn.api.identity import DRIVER
from dmn.lab.cluster import LabCluster
from dmn.lab.state_dir import StateDir
from tests.waiting import wait_for

READY = f"{DRIVER}/allocationReady"


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[LabCluster]:
    with LabCluster(StateDir(tmp_path), resync=2.0) as running:
        yield running


def _devices(cluster: Cluster) -> dict[str, dict[str, Any]]:
    return {
        d["name"]: d
        for s in cluster.list(r.RESOURCE_SLICES).items
        for d in s["spec"].get("devices") or []
    }


def _claim(cluster: Cluster, device_class: str) -> dict[str, Any]:
    request = {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": 1}
    return cluster.create(
        r.RESOURCE_CLAIMS,
        {
            "metadata": {"name": "pinned", "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "net1", "exactly": request}]}},
        },
        "default",
    )


def _macvlan_class(cluster: Cluster) -> None:
    """A DeviceClass named ``lab-macvlan`` that selects this driver's macvlan personas."""
    selector = f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].persona == "macvlan"'
    cluster.create(
        r.DEVICE_CLASSES,
        {
            "metadata": {"name": "lab-macvlan"},
            "spec": {"selectors": [{"cel": {"expression": selector}}]},
        },
    )


def test_withdrawn_policy_keeps_the_allocated_device_not_ready(lab: LabCluster) -> None:
    cluster = lab.client()
    _macvlan_class(cluster)
    [allocated] = lab.allocate([_claim(cluster, "lab-macvlan")])
    [result] = allocated["status"]["allocation"]["devices"]["results"]
    device = result["device"]
    assert device.endswith("-macvlan")

    cluster.delete(r.DEVICE_EXPOSURE_POLICIES, "lab-link-macvlan")

    def withdrawn() -> bool:
        devices = _devices(cluster)
        macvlan = [n for n in devices if n.endswith("-macvlan")]
        return macvlan == [device] and devices[device]["attributes"][READY]["bool"] is False

    # the other link's macvlan persona goes; the allocated one stays, blocked for new claims
    wait_for(withdrawn, what="the allocated macvlan device pinned with allocationReady=false")


class _ChangeDuringPass:
    """The real client; right after a pass's first read of claims, policies or its Node
    returns, it runs ``change`` once (so the pass's later reads see the world after it).
    The pass reads its policies first, through its own reader, then its Node, then the
    claims when it needs them: the change lands between the policies and the claims."""

    READS = (r.RESOURCE_CLAIMS, r.DEVICE_EXPOSURE_POLICIES, r.NODES)

    def __init__(self, cluster: Cluster, change: Any) -> None:
        self.cluster = cluster
        self.change: Any = change

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.cluster, name)
        if name not in ("list", "get"):
            return attr

        def read(res: Any, *args: Any, **kwargs: Any) -> Any:
            out = attr(res, *args, **kwargs)
            if self.change is not None and res in self.READS:
                change, self.change = self.change, None
                change()
            return out

        return read


@pytest.mark.parametrize("claim_view", ["listed", "watched-and-behind"])
def test_a_device_allocated_as_its_policy_goes_stays_pinned(
    tmp_path: Path, claim_view: str
) -> None:
    """The scheduler allocates a device, then its policy is deleted, both while a pass reads
    its inputs. A pass that read the claims first (no allocation yet) and the policies second
    (policy gone) withdrew the device, and with it the declaration the next pass needed to
    pin it: the allocated device was never published again (seen as a flake of the test
    above). Policies are read first now, so either the policy or the allocation is seen.

    ``watched-and-behind``: the pass's claim watch has seen neither (the watch is stopped
    here, as a lagging watch would be). A plan that withdraws a declaration does not trust
    that view: it lists the claims, after the policies, and finds the allocation."""
    with LabCluster(StateDir(tmp_path), resync=3600.0) as lab:
        cluster, publication = lab.client(), lab.publication
        assert publication is not None
        publication.stop()  # this test orders the passes itself
        if claim_view == "listed":
            publication.claim_pins = ClaimPins(DRIVER, "lab-node")  # never synced: lists
        else:
            assert publication.claim_pins.allocated() is not None
        _macvlan_class(cluster)
        allocated: list[str] = []

        def allocate_then_withdraw() -> None:
            [claim] = lab.allocate([_claim(cluster, "lab-macvlan")])
            [result] = claim["status"]["allocation"]["devices"]["results"]
            allocated.append(result["device"])
            cluster.delete(r.DEVICE_EXPOSURE_POLICIES, "lab-link-macvlan")

        publication.cluster = _ChangeDuringPass(cluster, allocate_then_withdraw)  # type: ignore[assignment]
        publication.publish()
        publication.publish()
        [device] = allocated
        devices = _devices(cluster)
        assert [n for n in devices if n.endswith("-macvlan")] == [device]
        assert devices[device]["attributes"][READY]["bool"] is False


def test_link_changes_in_the_lab_namespace_republish(tmp_path: Path) -> None:
    """With live links the publisher follows rtnetlink: the veth pair disappearing withdraws
    its devices and its return publishes them again (resync is far away, so only the
    inventory monitor can have triggered these passes)."""
    from pyroute2 import IPRoute

    with LabCluster(StateDir(tmp_path), resync=3600.0, links="netns", follow_links=True) as lab:
        cluster = lab.client()
        initial = wait_for(lambda: sorted(_devices(cluster)), what="the lab's devices")
        assert len(initial) == 6, initial  # 2 links x (kernel, macvlan, ipvlan)
        assert lab.publication is not None
        generation = lab.publication.publication.publisher.generation
        with IPRoute(netns=lab.netns) as ip:
            ip.link("del", ifname="lab0")  # its veth peer lab1 goes with it
        wait_for(lambda: not _devices(cluster), what="the links' devices withdrawn")
        withdrawn = lab.publication.publication.publisher.generation
        assert withdrawn > generation
        with IPRoute(netns=lab.netns) as ip:
            ip.link("add", ifname="lab0", kind="veth", peer="lab1")
            for name in ("lab0", "lab1"):
                ip.link("set", index=ip.link_lookup(ifname=name)[0], state="up", mtu=1500)
        wait_for(
            lambda: sorted(_devices(cluster)) == initial, what="the links' devices republished"
        )
        assert lab.publication.publication.publisher.generation > withdrawn


def _settled(ip: Any, names: tuple[str, ...]) -> bool:
    """Whether every link has a link-local IPv6 address past duplicate address detection:
    its end is the last event the kernel raises on its own for a new link."""
    tentative = 0x40  # IFA_F_TENTATIVE
    for name in names:
        index = ip.link_lookup(ifname=name)[0]
        addrs = ip.get_addr(index=index, family=10)
        if not addrs or any(a.get_attr("IFA_FLAGS", a["flags"]) & tentative for a in addrs):
            return False
    return True


def test_a_link_added_before_the_watch_starts_is_published(tmp_path: Path) -> None:
    """The publisher scans at construction and binds its rtnetlink listener at start: a link
    that appears in between raises no event the listener can see. Resync is an hour away, so
    the link is published only if start rescans once its listeners are bound."""
    from pyroute2 import IPRoute

    from dmn.agent.slices.node_publisher import InventoryWatch

    with LabCluster(StateDir(tmp_path), resync=3600.0, links="netns", follow_links=True) as lab:
        cluster, publication = lab.client(), lab.publication
        assert publication is not None
        initial = wait_for(lambda: sorted(_devices(cluster)), what="the lab's devices")
        publication.stop()
        with IPRoute(netns=lab.netns) as ip:
            ip.link("del", ifname="lab0")
        fresh = NodeSlicePublisher(
            cluster, publication.node_name, publication.scan, resync=3600.0,
            inventory_watch=InventoryWatch(netns=lab.netns, udev=False),
        )  # fmt: skip
        fresh.publish()
        assert not _devices(cluster)
        with IPRoute(netns=lab.netns) as ip:
            ip.link("add", ifname="lab0", kind="veth", peer="lab1")
            for name in ("lab0", "lab1"):
                ip.link("set", index=ip.link_lookup(ifname=name)[0], state="up", mtu=1500)
            wait_for(lambda: _settled(ip, ("lab0", "lab1")), what="IPv6 DAD on the new links")
        fresh.start()
        try:
            wait_for(lambda: sorted(_devices(cluster)) == initial, what="the added links published")
        finally:
            fresh.stop()


class _Writes:
    """The real client, recording the slice writes made through it."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.writes: list[tuple[str, str]] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.cluster, name)
        if name not in ("create", "replace", "delete"):
            return attr

        def recorded(res: Any, body: Any, *args: Any, **kwargs: Any) -> Any:
            if res is r.RESOURCE_SLICES:
                key = body if isinstance(body, str) else body["metadata"]["name"]
                self.writes.append((name, key))
            return attr(res, body, *args, **kwargs)

        return recorded


def test_a_pass_with_nothing_changed_writes_no_slice(tmp_path: Path) -> None:
    """Issue 15: every claim change and every child created on a NIC triggers a pass; one
    whose plan is what is stored writes no slice (each was create, get and replace before),
    while a slice someone changed or deleted is written again."""
    with LabCluster(StateDir(tmp_path), resync=3600.0) as lab:
        cluster, publication = lab.client(), lab.publication
        assert publication is not None
        writes = _Writes(publication.cluster)
        publication.cluster = writes  # type: ignore[assignment]
        names = sorted(s["metadata"]["name"] for s in cluster.list(r.RESOURCE_SLICES).items)
        assert len(names) >= 2, names
        publication.publish()
        assert writes.writes == []
        changed = cluster.get(r.RESOURCE_SLICES, names[0])
        changed["metadata"]["labels"] = {}
        cluster.replace(r.RESOURCE_SLICES, changed)
        cluster.delete(r.RESOURCE_SLICES, names[-1])
        publication.publish()
        assert sorted(writes.writes) == [
            ("create", names[0]),
            ("create", names[-1]),
            ("replace", names[0]),
        ]
        labels = cluster.get(r.RESOURCE_SLICES, names[0])["metadata"]["labels"]
        assert labels == {f"{DRIVER}/node": "lab-node"}
        writes.writes.clear()
        publication.publish()
        assert writes.writes == []


def _allocated_here(cluster: Cluster, name: str, device: str, pool: str = "lab-node") -> None:
    """Create claim ``name`` and write an allocation of ``device`` in ``pool`` to its status
    (as the scheduler does; the device need not exist: only the pin set is looked at)."""
    request = {"deviceClassName": "x", "allocationMode": "ExactCount", "count": 1}
    claim = cluster.create(
        r.RESOURCE_CLAIMS,
        {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"devices": {"requests": [{"name": "net1", "exactly": request}]}},
        },
        "default",
    )
    result = {"request": "net1", "driver": DRIVER, "pool": pool, "device": device}
    claim["status"] = {"allocation": {"devices": {"results": [result]}}}
    cluster.replace(r.RESOURCE_CLAIMS, claim, status=True)


def _pass_counter(publication: NodeSlicePublisher) -> list[float]:
    import time

    passes: list[float] = []
    time.sleep(1.5)  # the passes of the lab's own start are over
    publication.add_listener(lambda: passes.append(time.monotonic()))
    passes.clear()  # add_listener calls it once right away
    return passes


def test_a_burst_of_claim_changes_is_coalesced_and_none_is_lost(tmp_path: Path) -> None:
    """Issue 15: claim events arrive several times a second in a Pod storm and each woke a
    pass at once; passes now follow each other ``coalesce`` seconds apart at the earliest
    (policy changes aside: the lab's own status writes end the pause), and the last change
    is followed by a pass."""
    import time

    with LabCluster(StateDir(tmp_path), resync=3600.0) as lab:
        cluster, publication = lab.client(), lab.publication
        assert publication is not None and publication.coalesce == 1.0
        passes = _pass_counter(publication)
        start = time.monotonic()
        for i in range(20):
            last = time.monotonic()  # before the change: its pass ends after this
            _allocated_here(cluster, f"burst-{i}", f"gone-{i}")
            time.sleep(0.05)
        wait_for(lambda: any(t > last for t in passes), what="a pass after the last change")
        elapsed = passes[-1] - start
        assert 1 <= len(passes) <= elapsed / publication.coalesce + 3, (len(passes), elapsed)
        assert publication.allocated >= {f"gone-{i}" for i in range(20)}


def test_claim_events_that_move_no_pin_of_this_node_start_no_pass(tmp_path: Path) -> None:
    """Issue 43: in a Pod storm most claim events change nothing this node pins (a claim
    created unallocated, reservedFor, the agent's own status writes, another node's
    allocation), and each pass lists every claim of the cluster while the runtime's hooks
    wait on the same interpreter. Those events start no pass; one that allocates a device of
    this node, or takes it back, does."""
    with LabCluster(StateDir(tmp_path), resync=3600.0) as lab:
        cluster, publication = lab.client(), lab.publication
        assert publication is not None
        passes = _pass_counter(publication)
        request = {"deviceClassName": "x", "allocationMode": "ExactCount", "count": 1}
        for i in range(5):
            body = {
                "metadata": {"name": f"idle-{i}", "namespace": "default"},
                "spec": {"devices": {"requests": [{"name": "net1", "exactly": request}]}},
            }
            cluster.create(r.RESOURCE_CLAIMS, body, "default")
        _allocated_here(cluster, "elsewhere", "eth0-macvlan", pool="another-node")
        mine = cluster.get(r.RESOURCE_CLAIMS, "idle-0", "default")
        mine["metadata"]["labels"] = {"touched": "yes"}
        cluster.replace(r.RESOURCE_CLAIMS, mine)
        _allocated_here(cluster, "marker", "marker-device")  # its pass follows the others
        wait_for(lambda: "marker-device" in publication.allocated, what="the marker's pass")
        wait_for(lambda: len(passes) >= 1, what="the marker's pass reported")
        assert len(passes) == 1, passes
        cluster.delete(r.RESOURCE_CLAIMS, "marker", "default")
        wait_for(lambda: "marker-device" not in publication.allocated, what="the pin released")
        assert len(passes) == 2, passes


def test_a_rescan_that_finds_the_same_inventory_starts_no_pass(tmp_path: Path) -> None:
    """Issue 43: every Pod's sandbox adds and removes links on the host (the primary
    network's veth, our children before they move), and each raised an inventory rescan and
    then a full pass. A rescan whose inventory equals the last one writes and lists nothing;
    one that differs republishes."""
    with LabCluster(StateDir(tmp_path), resync=3600.0) as lab:
        publication = lab.publication
        assert publication is not None
        passes = _pass_counter(publication)
        calls: list[str] = []
        publish = publication.publish

        def counted() -> list[Any]:
            calls.append("publish")
            return publish()

        publication.publish = counted  # type: ignore[method-assign]
        publication.inventory_changed("rtnl:RTM_NEWLINK")
        wait_for(lambda: len(passes) >= 1, what="the rescan's turn")
        assert calls == []
        scan = publication.scan
        publication.inventory = dataclasses.replace(publication.inventory, notes=("stale",))
        publication.inventory_changed("rtnl:RTM_DELLINK")
        wait_for(lambda: calls == ["publish"], what="a pass after a changed rescan")
        assert publication.inventory == scan()


def test_a_restarted_publisher_keeps_its_promises(tmp_path: Path) -> None:
    """Issue 40: the scheduler allocates a macvlan share, the agent restarts before kubelet
    prepares it, and meanwhile the administrator halves the policy's ``children`` capacity.
    The restarted publisher (a new one on the same state file) keeps the allocated device's
    declaration — the capacity it was allocated under — while the unallocated sibling takes
    the new capacity, and the pool generation moves forward. A publisher without the saved
    state (what every restart did before) re-declares the pinned device with the new
    capacity: the promise the allocation was made under is gone."""
    capacity = f"{DRIVER}/children"
    with LabCluster(StateDir(tmp_path), resync=3600.0) as lab:
        cluster, publication = lab.client(), lab.publication
        assert publication is not None
        publication.stop()  # this test orders the passes itself
        _macvlan_class(cluster)
        [claim] = lab.allocate([_claim(cluster, "lab-macvlan")])
        [result] = claim["status"]["allocation"]["devices"]["results"]
        pinned = result["device"]
        publication.publish()
        generation = publication.publication.publisher.generation
        # a merge patch, as kubectl patch sends: the agents and the controller write this
        # policy's status meanwhile (each write moves its resourceVersion), and a get-then-
        # replace lost that race once in CI with a 409
        patch = {"spec": {"exposure": {"capacity": {"children": {"value": "2"}}}}}
        cluster.patch(r.DEVICE_EXPOSURE_POLICIES, "lab-link-macvlan", patch)

        def restarted(state_file: Path | None) -> NodeSlicePublisher:
            fresh = NodeSlicePublisher(
                cluster, publication.node_name, publication.scan, resync=3600.0,
                state_file=state_file,
            )  # fmt: skip
            fresh.publish()
            return fresh

        assert publication.state_file is not None and publication.state_file.is_file()
        again = restarted(publication.state_file)
        devices = _devices(cluster)
        siblings = [n for n in devices if n.endswith("-macvlan") and n != pinned]
        assert devices[pinned]["capacity"][capacity]["value"] == "4"
        assert siblings and all(devices[n]["capacity"][capacity]["value"] == "2" for n in siblings)
        assert again.publication.publisher.generation > generation

        forgetful = restarted(None)
        assert _devices(cluster)[pinned]["capacity"][capacity]["value"] == "2"
        assert forgetful.publication.publisher.generation > again.publication.publisher.generation


class _ListSpy:
    """The real client, recording how many ResourceSlices each list of them returned, and
    which lists read the slices whole (not their metadata alone)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.slice_lists: list[int] = []
        self.whole: list[int] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.cluster, name)
        if name != "list":
            return attr

        def listed(res: Any, *args: Any, **kwargs: Any) -> Any:
            out = attr(res, *args, **kwargs)
            if res is r.RESOURCE_SLICES:
                self.slice_lists.append(len(out.items))
                if not kwargs.get("metadata_only"):
                    self.whole.append(len(out.items))
            return out

        return listed


def test_a_pass_that_finds_its_pool_as_stored_reads_only_its_metadata(tmp_path: Path) -> None:
    """Issue 42: every pass (a resync every 30 s on every node) read the node's whole pool,
    370 KB, to find it as the previous pass stored it. A pass lists the metadata first; the
    previous pass's copies serve when every name and resourceVersion matches. A slice
    someone else changed or deleted makes the pass read the pool whole and repair it."""
    with LabCluster(StateDir(tmp_path), resync=3600.0) as lab:
        cluster, publication = lab.client(), lab.publication
        assert publication is not None
        publication.stop()
        ours = publication.publish()
        spy = _ListSpy(publication.cluster)
        publication.cluster = spy  # type: ignore[assignment]
        again = publication.publish()
        assert spy.slice_lists == [len(ours)] and spy.whole == []
        assert again == ours
        changed = cluster.get(r.RESOURCE_SLICES, ours[0]["metadata"]["name"])
        changed["spec"]["devices"] = []
        cluster.replace(r.RESOURCE_SLICES, changed)
        repaired = publication.publish()
        assert spy.whole == [len(ours)]
        assert repaired[0]["spec"] == ours[0]["spec"]
        cluster.delete(r.RESOURCE_SLICES, ours[-1]["metadata"]["name"])
        publication.publish()
        assert spy.whole == [len(ours), len(ours) - 1]
        assert len(cluster.list(r.RESOURCE_SLICES).items) == len(ours)
        publication.publish()
        assert spy.whole == [len(ours), len(ours) - 1]


def test_a_pass_reads_only_its_own_pool_from_the_server(tmp_path: Path) -> None:
    """Another node's slices are not transferred to this node's pass (the server filters by
    node and driver): listing every slice made each pass cost more the more nodes the
    cluster had (benchmarks/scale.py). Its own slices are still found and kept."""
    with LabCluster(StateDir(tmp_path), resync=3600.0) as lab:
        cluster, publication = lab.client(), lab.publication
        assert publication is not None
        publication.stop()
        ours = publication.publish()
        other = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "elsewhere-network-devices-0"},
            "spec": {
                "driver": DRIVER,
                "nodeName": "elsewhere",
                "pool": {"name": "elsewhere", "generation": 1, "resourceSliceCount": 1},
                "devices": [],
            },
        }
        cluster.create(r.RESOURCE_SLICES, other)
        spy = _ListSpy(cluster)
        publication.cluster = spy  # type: ignore[assignment]
        again = publication.publish()
        assert spy.slice_lists == [len(ours)]
        assert [s["metadata"]["resourceVersion"] for s in again] == [
            s["metadata"]["resourceVersion"] for s in ours
        ]
        assert cluster.get(r.RESOURCE_SLICES, "elsewhere-network-devices-0")


def test_an_unrelated_veth_starts_no_rescan(tmp_path: Path) -> None:
    """Issue 43: every Pod's primary-network veth raised link, address and route events in
    the host namespace, and each burst cost a full inventory rescan in the agent. A veth
    that is no inventory link's relative starts none; a change of a lab link still does."""
    from pyroute2 import IPRoute

    from dmn.host.rtnetlink.links import LinkState

    def lab0_mtu(publication: NodeSlicePublisher) -> int:
        for item in publication.inventory.items.values():
            for netdev in item.netdevs:
                if netdev.ifname == "lab0" and isinstance(netdev.state, LinkState):
                    return netdev.state.mtu
        return 0

    with LabCluster(StateDir(tmp_path), resync=3600.0, links="netns", follow_links=True) as lab:
        cluster, publication = lab.client(), lab.publication
        assert publication is not None
        wait_for(lambda: _devices(cluster), what="the lab's devices")
        with IPRoute(netns=lab.netns) as ip:
            wait_for(lambda: _settled(ip, ("lab0", "lab1")), what="IPv6 DAD on the lab links")
        _pass_counter(publication)  # the rescans of the start and of DAD are over
        scans: list[str] = []
        scan = publication.scan

        def counted() -> Any:
            scans.append("scan")
            return scan()

        publication.scan = counted
        with IPRoute(netns=lab.netns) as ip:
            ip.link("add", ifname="podveth0", kind="veth", peer="podveth1")
            for name in ("podveth0", "podveth1"):
                ip.link("set", index=ip.link_lookup(ifname=name)[0], state="up", mtu=1500)
            wait_for(lambda: _settled(ip, ("podveth0", "podveth1")), what="IPv6 DAD")
            ip.link("del", ifname="podveth0")
            lab0 = ip.link_lookup(ifname="lab0")[0]
            ip.link("set", index=lab0, mtu=1400)
            wait_for(lambda: lab0_mtu(publication) == 1400, what="the lab link's change rescanned")
            assert scans == ["scan"]
            ip.link("set", index=lab0, mtu=1500)
        wait_for(lambda: lab0_mtu(publication) == 1500, what="the lab link's restore rescanned")


def test_slices_are_owned_by_their_node(lab: LabCluster) -> None:
    """As kubelet plugins' slices are: the garbage collector deletes them with the Node."""
    cluster = lab.client()

    def owners() -> list[list[dict[str, Any]]]:
        return [s["metadata"].get("ownerReferences") for s in cluster.list(r.RESOURCE_SLICES).items]

    node = cluster.get(r.NODES, "lab-node")
    want = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "name": "lab-node",
            "uid": node["metadata"]["uid"],
            "controller": True,
        }
    ]
    wait_for(lambda: owners() and all(o == want for o in owners()), what="slices owned by lab-node")


class _ClaimListSpy:
    """The real client, counting the lists of ResourceClaims."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.claim_lists = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.cluster, name)
        if name != "list":
            return attr

        def listed(res: Any, *args: Any, **kwargs: Any) -> Any:
            if res is r.RESOURCE_CLAIMS:
                self.claim_lists += 1
            return attr(res, *args, **kwargs)

        return listed


def test_a_pass_that_changes_no_declaration_reads_the_claims_from_its_watch(
    tmp_path: Path,
) -> None:
    """Issue 42: every pass listed every ResourceClaim of the cluster (1.5 MB per node per
    pass with 600 claims; nodes × claims for the cluster, and claims² over a Pod storm).
    The publisher's claim watch keeps this node's pins; a pass whose plan changes no
    declaration uses them and lists nothing, and its pins are the watch's. A pass whose
    plan changes a declaration (here a policy withdrawn) lists the claims once, after the
    policies, as before."""
    with LabCluster(StateDir(tmp_path), resync=3600.0) as lab:
        cluster, publication = lab.client(), lab.publication
        assert publication is not None
        for i in range(3):
            _allocated_here(cluster, f"here-{i}", f"gone-{i}")
        _allocated_here(cluster, "elsewhere", "eth0-macvlan", pool="another-node")
        wanted = {f"gone-{i}" for i in range(3)}
        wait_for(lambda: publication.claim_pins.allocated() == wanted, what="the watch's pins")
        spy = _ClaimListSpy(publication.cluster)
        publication.cluster = spy  # type: ignore[assignment]
        publication.publish()
        assert spy.claim_lists == 0
        assert publication.allocated == wanted
        cluster.delete(r.DEVICE_EXPOSURE_POLICIES, "lab-link-macvlan")
        wait_for(lambda: spy.claim_lists >= 1, what="the withdrawing pass")
        wait_for(
            lambda: not any(n.endswith("-macvlan") for n in _devices(cluster)),
            what="the macvlan personas withdrawn",
        )
        assert spy.claim_lists == 1
        publication.publish()
        assert spy.claim_lists == 1
