"""A Pod burst's event storm makes one reconcile per key and window, and skips revisions
only their topology can release (reconcilers driven directly, no background controller)."""

from __future__ import annotations

from dmn.api.cluster import Cluster, ListWatch, WatchEvent
from dmn.api.cluster import resources as r
from dmn.controller.manager import RECHECK_WINDOW_S, Controller
from dmn.controller.workqueue import RateLimitedQueue
from dmn.opcodes.registry import default_registry
from tests.controller.support import FakeClock, example


def _known(
    ctl: Controller,
    res: r.Resource,
    names: list[str],
    cluster: Cluster,
    topologies: dict[str, str] | None = None,
) -> None:
    lw = ListWatch(cluster, res)
    lw.known = {
        ("", n): {
            "metadata": {"name": n},
            "spec": {"topologyRef": {"name": (topologies or {}).get(n, "")}},
        }
        for n in names
    }
    ctl._watches.append(lw)


def _drain(ctl: Controller) -> list[object]:
    out = []
    while (key := ctl.queue.get(0)) is not None:
        out.append(key)
        ctl.queue.done(key)
    return out


def test_a_storm_is_one_reconcile_per_key_and_window(cluster: Cluster) -> None:
    topo = example("host-device")
    topo["metadata"]["name"] = "storm"
    cluster.create(r.NETWORK_TOPOLOGIES, topo)
    clock = FakeClock()
    ctl = Controller(cluster, default_registry(), queue=RateLimitedQueue(clock=clock))
    ctl.topologies.reconcile("storm")
    current = cluster.get(r.NETWORK_TOPOLOGIES, "storm")["status"]["revision"]["name"]
    assert ctl.revisions.reconcile(current) is False
    assert current in ctl.revisions.held_by_topology  # its topology's current revision

    _known(ctl, r.NETWORK_TOPOLOGIES, ["storm"], cluster)
    _known(
        ctl,
        r.NETWORK_TOPOLOGY_REVISIONS,
        [current, "older", "foreign"],
        cluster,
        {current: "storm", "older": "storm", "foreign": "another"},
    )
    _known(ctl, r.IP_POOLS, ["pool-a", "pool-b"], cluster)
    ctl._listed.add("slice")

    claim = {"metadata": {"name": "c", "namespace": "default"}}
    allocation = {"metadata": {"name": "pool-a-1"}, "spec": {"pool": "pool-a"}}
    for _ in range(50):
        ctl._on_event("slice", WatchEvent("MODIFIED", {"metadata": {"name": "s"}}))
        ctl._on_event("claim", WatchEvent("MODIFIED", claim))
        ctl._on_event("attachment", WatchEvent("MODIFIED", claim))
        ctl._on_event("ipallocation", WatchEvent("ADDED", allocation))
    ctl._on_event("claim", WatchEvent("DELETED", claim))
    assert _drain(ctl) == []  # nothing at once: the window gathers the storm
    clock.now += RECHECK_WINDOW_S
    assert sorted(map(str, _drain(ctl))) == sorted(
        map(
            str,
            [
                ("topology", "storm"),
                ("revision", "older"),  # the current one is its topology's to release
                ("revision", "foreign"),
                ("ippool", "pool-a"),
                ("ippool", "pool-b"),  # a deleted claim's addresses are collectable anywhere
            ],
        )
    )
    clock.now += 10 * RECHECK_WINDOW_S
    assert _drain(ctl) == []

    # a topology event may have moved its current revision on: its revisions again (only
    # its own: a hundred topologies writing their status must not recheck every revision)
    ctl._on_event("topology", WatchEvent("MODIFIED", {"metadata": {"name": "storm"}}))
    assert _drain(ctl) == [("topology", "storm")]
    clock.now += RECHECK_WINDOW_S
    assert sorted(map(str, _drain(ctl))) == sorted(
        map(str, [("revision", current), ("revision", "older")])
    )


def test_a_collected_or_released_revision_is_no_longer_held_by_its_topology(
    cluster: Cluster,
) -> None:
    topo = example("host-device")
    topo["metadata"]["name"] = "moves-on"
    cluster.create(r.NETWORK_TOPOLOGIES, topo)
    ctl = Controller(cluster, default_registry())
    ctl.topologies.reconcile("moves-on")
    first = cluster.get(r.NETWORK_TOPOLOGIES, "moves-on")["status"]["revision"]["name"]
    assert ctl.revisions.reconcile(first) is False
    assert first in ctl.revisions.held_by_topology
    edited = cluster.get(r.NETWORK_TOPOLOGIES, "moves-on")
    edited["spec"]["steps"][0]["config"]["mtu"] = 1500  # a semantic change: a new revision
    cluster.replace(r.NETWORK_TOPOLOGIES, edited)
    ctl.topologies.reconcile("moves-on")
    assert ctl.revisions.reconcile(first) is True  # released: collected
    assert first not in ctl.revisions.held_by_topology
