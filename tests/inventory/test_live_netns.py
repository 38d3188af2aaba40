"""Live link facts from the real kernel, in a network namespace this test creates."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyroute2 import IPRoute, netns

from dmn.agent.inventory import Pyroute2Links, ScanConfig, scan
from dmn.agent.inventory.facts import ItemKind, ProtectionReason
from dmn.agent.inventory.protection import protected_links
from dmn.host.inventory_sources import RecordedDevlink
from dmn.host.rtnetlink.links import LinkState

pytestmark = pytest.mark.netns


@pytest.fixture
def ns() -> Iterator[str]:
    name = f"h5inv-{uuid.uuid4().hex[:8]}"
    netns.create(name)
    try:
        yield name
    finally:
        netns.remove(name)


def build(name: str) -> None:
    """br0 (node IP, default route) with member v0; v1 (v0's peer) under macvlan mv0;
    an unrelated veth pair lab0/lab1 with nothing on it."""
    with IPRoute(netns=name) as ip:
        ip.link("add", ifname="v0", kind="veth", peer="v1")
        ip.link("add", ifname="lab0", kind="veth", peer="lab1")
        ip.link("add", ifname="br0", kind="bridge")
        v0, v1 = ip.link_lookup(ifname="v0")[0], ip.link_lookup(ifname="v1")[0]
        br = ip.link_lookup(ifname="br0")[0]
        ip.link("set", index=v0, master=br, state="up")
        ip.link("set", index=br, state="up", mtu=1450)
        ip.addr("add", index=br, address="198.51.100.2", prefixlen=24)
        ip.route("add", dst="0.0.0.0/0", gateway="198.51.100.1")
        ip.link("add", ifname="mv0", kind="macvlan", link=v1, macvlan_mode="bridge")


def test_link_state_and_default_route_from_rtnetlink(ns: str) -> None:
    build(ns)
    source = Pyroute2Links(ns)
    states = {s.name: s for s in source.links()}
    assert states["br0"].kind == "bridge" and states["br0"].mtu == 1450
    assert [a.cidr for a in states["br0"].addresses] == ["198.51.100.2/24"]
    assert states["v0"].master == states["br0"].index
    assert states["mv0"].local_lower == states["v1"].index
    assert source.default_route_ifindexes() == frozenset({states["br0"].index})


def test_protected_closure_over_real_links(ns: str) -> None:
    build(ns)
    source = Pyroute2Links(ns)
    reasons = protected_links(
        list(source.links()), source.default_route_ifindexes(), ["198.51.100.2"]
    )
    assert {ProtectionReason.DEFAULT_ROUTE, ProtectionReason.NODE_IP} <= reasons["br0"]
    assert ProtectionReason.MEMBER_OF_PROTECTED in reasons["v0"]
    assert "lab0" not in reasons and "mv0" not in reasons


def test_lab_links_become_items_with_live_state(ns: str, tmp_path: Path) -> None:
    build(ns)
    (tmp_path / "sys").mkdir()
    inv = scan(
        ScanConfig(
            sysfs_root=tmp_path / "sys",
            node_uid="lab-node",
            links=Pyroute2Links(ns),
            devlink=RecordedDevlink(),
            node_ips=["198.51.100.2"],
            lab_links=["lab0", "br0", "missing0"],
        )
    )
    items = {i.netdevs[0].ifname: i for i in inv.items.values()}
    assert set(items) == {"lab0", "br0"}
    lab0 = items["lab0"]
    assert lab0.kind is ItemKind.LINK and not lab0.protected
    assert isinstance(lab0.netdevs[0].state, LinkState)
    assert ProtectionReason.DEFAULT_ROUTE in items["br0"].protected
