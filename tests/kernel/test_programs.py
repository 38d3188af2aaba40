"""Builtin programs through the real binder, runner, journal and executors on the host kernel.

host-cni moves one end of a veth pair into a pinned sandbox and back; macvlan-cni makes
children from two shares of one parent. Traffic proves each attachment; cleanup from the
journal alone proves the stand-in host is exactly as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dmn.host.rtnetlink.links import all_links, by_name
from dmn.vocabulary.terms import Access
from tests.kernel.node import Node, bind, call, unprivileged_server
from tests.kernel.world import World, add_address, host_handle, link, ping, world

pytestmark = pytest.mark.netns

ROOT_GRANTS = (Access.EXCLUSIVE_CONFIGURE,)
HOST_CONFIG = {"mode": "kernel", "ifName": "net1", "mtu": 1400, "up": True}
MACVLAN_CONFIG = {"mode": "bridge", "ifName": "net1", "mtu": 1500, "up": True}


@pytest.fixture(params=["root", "unprivileged"])
def node_world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Node, World]]:
    """The node as root, and as the unprivileged agent: the programs run in a child holding
    only the chart's capabilities (``nodeAgent.privileged=false``)."""
    server = unprivileged_server() if request.param == "unprivileged" else None
    with world() as w:
        node = Node(tmp_path / "state", w.host, server=server)
        try:
            yield node, w
        finally:
            node.release_pins()


def host_cni_attach(node: Node, w: World, root: str, sandbox: str, op: str) -> None:
    host = w.ipr(w.host)
    handle = host_handle(host, root, Access.EXCLUSIVE_CONFIGURE)
    prepared = node.run(
        f"{op}-prep",
        bind(
            "host-cni",
            "prepare",
            call(HOST_CONFIG, f"{op}-prep", allocation={"interface": (handle,)}),
        ),
    )
    ref = node.pin(op, sandbox)
    node.run(
        f"{op}-conn",
        bind(
            "host-cni",
            "connect",
            call(HOST_CONFIG, f"{op}-conn", prepared=dict(prepared.exports), sandbox=ref),
        ),
        sandbox=ref,
    )


def test_host_cni_moves_a_veth_end_in_and_back(node_world: tuple[Node, World]) -> None:
    node, w = node_world
    sandbox, peer_ns = w.sandbox(), w.sandbox()
    host = w.ipr(w.host)
    root, peer = w.veth(w.host)
    host.link("set", index=host.link_lookup(ifname=peer)[0], net_ns_fd=peer_ns)
    add_address(w.ipr(peer_ns), peer, "10.81.0.1/24")
    host.link("set", index=host.link_lookup(ifname=root)[0], ifalias="rack-7-uplink")
    baseline = w.snapshot(w.host)

    host_cni_attach(node, w, root, sandbox, "att1")
    sb = w.ipr(sandbox)
    net1 = link(sb, "net1")
    assert (net1.mtu, net1.up, net1.alias) == (1400, True, "dmn:att1-conn:move")
    add_address(sb, "net1", "10.81.0.2/24")
    assert ping(sandbox, "10.81.0.1")

    node.cleanup("att1-conn")
    node.cleanup("att1-prep")
    assert by_name(sb, "net1") is None
    assert w.snapshot(w.host) == baseline


def test_macvlan_cni_two_shares_of_one_parent(node_world: tuple[Node, World]) -> None:
    node, w = node_world
    sb1, sb2 = w.sandbox(), w.sandbox()
    host = w.ipr(w.host)
    parent, _ = w.veth(w.host)
    baseline = w.snapshot(w.host)
    for i, (sb, addr) in enumerate(((sb1, "10.82.0.1/24"), (sb2, "10.82.0.2/24"))):
        op = f"share{i}"
        handle = host_handle(host, parent, Access.CREATE_CHILD, hid="parent-1")
        prepared = node.run(
            f"{op}-prep",
            bind(
                "macvlan-cni",
                "prepare",
                call(MACVLAN_CONFIG, f"{op}-prep", allocation={"parent": (handle,)}),
            ),
        )
        ref = node.pin(op, sb)
        node.run(
            f"{op}-conn",
            bind(
                "macvlan-cni",
                "connect",
                call(MACVLAN_CONFIG, f"{op}-conn", prepared=dict(prepared.exports), sandbox=ref),
            ),
            sandbox=ref,
        )
        child = link(w.ipr(sb), "net1")
        assert child.kind == "macvlan" and child.info["IFLA_MACVLAN_MODE"] in ("bridge", 4)
        add_address(w.ipr(sb), "net1", addr)
    assert ping(sb1, "10.82.0.2") and ping(sb2, "10.82.0.1")

    node.cleanup("share0-conn")
    assert by_name(w.ipr(sb1), "net1") is None
    assert by_name(w.ipr(sb2), "net1") is not None  # only share 0's child went away
    node.cleanup("share0-prep")
    node.cleanup("share1-conn")
    node.cleanup("share1-prep")
    assert w.snapshot(w.host) == baseline
    assert [x.name for x in all_links(w.ipr(sb2))] == ["lo"]
