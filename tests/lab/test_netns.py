"""``--links netns``: the lab node's links as a real veth pair in a namespace the lab owns."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from pyroute2 import netns

from dmn.agent.inventory.facts import ItemKind
from dmn.host.rtnetlink.links import LinkState
from dmn.lab import node, node_netns
from dmn.lab.cluster import LabCluster
from dmn.lab.demo import run_demo
from dmn.lab.state_dir import StateDir

pytestmark = pytest.mark.netns


def test_demo_on_real_links_removes_its_namespace() -> None:
    report = run_demo(timeout=60, links="netns")
    assert report.ok, report.problems
    assert report.links.startswith("netns:dmn-lab-")
    assert report.devices == 6
    # Pods ran through the real node agent: net1 inside each, traffic, a whole-link handoff
    assert all(line.startswith("ok") for line in report.pods), report.pods
    assert any("pings demo-b over net1 (10.56.0." in line for line in report.pods)
    # each net1 addressed by the node agent from examples/ipam's macvlan-v4, with its route
    addressed = [x for x in report.pods if "networkData)" in x and " net1 10.56.0." in x]
    assert len(addressed) == 2, report.pods
    routes = [x for x in report.pods if "pool route on net1: 10.58.0.0/16 via 10.56.0.1" in x]
    assert len(routes) == 2, report.pods
    assert any("IPAllocations left []" in line for line in report.pods)
    assert any("handed off whole" in line for line in report.pods)
    assert len(report.pods) == 14
    # (other namespaces on this host come and go with other tests: check only our own)
    assert report.links.removeprefix("netns:") not in netns.listnetns()


def test_inventory_reads_the_lab_namespace(tmp_path: Path) -> None:
    """The pair is operationally up when :func:`node_netns.create` returns: the lab scans
    its inventory right after, and a link read as ``LOWERLAYERDOWN`` then was published as
    unhealthy (tainted) for the rest of the lab's life."""
    name = node_netns.create(tmp_path, node.LAB_LINKS)
    try:
        inventory = node.inventory(tmp_path / "sys", node_netns.link_source(name))
        items = {i.netdevs[0].ifname: i for i in inventory.items.values()}
        assert set(items) == set(node.LAB_LINKS)
        for item in items.values():
            assert item.kind is ItemKind.LINK and not item.protected
            state = item.netdevs[0].state
            assert isinstance(state, LinkState) and state.kind == "veth" and state.mtu == 1500
            # the kernel's operstate, not just the admin flag, at once (the lab scans now)
            assert state.operstate.upper() == "UP", state
    finally:
        node_netns.remove_recorded(tmp_path)
    assert name not in netns.listnetns()
    assert not (tmp_path / "netns").exists()


def test_a_recorded_namespace_left_by_a_killed_lab_is_removed_on_up(tmp_path: Path) -> None:
    leftover = node_netns.create(tmp_path, node.LAB_LINKS)  # as if the lab was SIGKILLed
    assert leftover in netns.listnetns()
    lab = LabCluster(StateDir(tmp_path))
    try:
        lab.start()
        assert leftover not in netns.listnetns()
    finally:
        lab.stop()


def test_a_record_that_is_not_a_lab_name_is_never_acted_on(tmp_path: Path) -> None:
    foreign = f"l1test-{uuid.uuid4().hex[:8]}"
    netns.create(foreign)
    try:
        (tmp_path / "netns").write_text(foreign + "\n")
        node_netns.remove_recorded(tmp_path)
        assert foreign in netns.listnetns()
        assert not (tmp_path / "netns").exists()
    finally:
        netns.remove(foreign)
