"""The builtin plugins' optional addressing config (issue 38) on the host kernel, through the
real binder, runner, RocksDB journal and executors, as root and as the unprivileged agent.

macvlan-cni with ``sysctls``, ``addresses`` and ``routes`` in its config: the child in the
sandbox carries the settings, both addresses and the routes (traffic through the gateway and
the kernel's route lookup prove them); removal from the journal alone deletes the child and
leaves the sandbox's layer-3 state and the stand-in host exactly as before. host-cni with the
same config: the moved netdevice returns to the host without the addresses, routes and
settings the Pod had."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dmn.host.rtnetlink.links import by_name
from dmn.vocabulary.terms import Access
from tests.kernel.interface_readback import sysctl_in
from tests.kernel.node import Node, bind, call, unprivileged_server
from tests.kernel.test_ip_executors import ip_json, l3_state, route_get
from tests.kernel.test_ip_programs import neighbour
from tests.kernel.world import World, host_handle, ping, world
from tests.waiting import wait_for

pytestmark = pytest.mark.netns

ADDRESSING: dict[str, Any] = {
    "sysctls": {"ipv4RpFilter": 2, "ipv4ArpIgnore": 1, "ipv6AcceptRa": 0},
    "addresses": ["10.84.0.2/24", "fd84::2/64"],
    "routes": [
        {
            "destination": "10.85.0.0/16",
            "gateway": "10.84.0.1",
            "source": "10.84.0.2",
            "metric": 10,
        },
        {"destination": "2001:db8::/64", "gateway": "fd84::1"},
    ],
}
MACVLAN = {"ifName": "net1", "mtu": 1500, "up": True, **ADDRESSING}


@pytest.fixture(params=["root", "unprivileged"])
def node_world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Node, World]]:
    server = unprivileged_server() if request.param == "unprivileged" else None
    with world() as w:
        node = Node(tmp_path / "state", w.host, server=server)
        try:
            yield node, w
        finally:
            node.release_pins()


def _settings(ns: str, name: str) -> tuple[int, int, int]:
    return (
        sysctl_in(ns, "ipv4", name, "rp_filter"),
        sysctl_in(ns, "ipv4", name, "arp_ignore"),
        sysctl_in(ns, "ipv6", name, "accept_ra"),
    )


def _dad_done(sb: str) -> bool:
    """The static IPv6 address has left duplicate address detection (the builtins add it
    with DAD: a real network may hold the address already)."""
    infos = ip_json(sb, "-6", "addr", "show", "dev", "net1")[0]["addr_info"]
    return any(a["local"] == "fd84::2" and not a.get("tentative") for a in infos)


def _assert_addressed(sb: str) -> None:
    assert _settings(sb, "net1") == (2, 1, 0)
    ours = {
        (a["local"], a["prefixlen"])
        for a in ip_json(sb, "addr", "show", "dev", "net1")[0]["addr_info"]
    }
    assert {("10.84.0.2", 24), ("fd84::2", 64)} <= ours
    got = route_get(sb, "10.85.0.1")
    assert (got["gateway"], got["dev"], got["prefsrc"]) == ("10.84.0.1", "net1", "10.84.0.2")
    assert route_get(sb, "2001:db8::1")["gateway"] == "fd84::1"


def test_macvlan_cni_addressing_config_carries_traffic_and_removal_undoes_it(
    node_world: tuple[Node, World],
) -> None:
    node, w = node_world
    sb = w.sandbox()
    host = w.ipr(w.host)
    parent, _ = w.veth(w.host)
    gateway = neighbour(w, parent)
    host_baseline = w.snapshot(w.host)
    sandbox_baseline = l3_state(sb)

    handle = host_handle(host, parent, Access.CREATE_CHILD, hid="parent-1")
    prepared = node.run(
        "a-prep",
        bind("macvlan-cni", "prepare", call(MACVLAN, "a-prep", allocation={"parent": (handle,)})),
    )
    ref = node.pin("a", sb)
    connect = bind(
        "macvlan-cni",
        "connect",
        call(MACVLAN, "a-conn", prepared=dict(prepared.exports), sandbox=ref),
    )
    assert [e.id for e in connect.effects] == ["create", "sysctls", "addresses", "routes"]
    result = node.run("a-conn", connect, sandbox=ref)
    assert result.exports["interface"][0].observations["ifName"] == "net1"

    _assert_addressed(sb)
    assert ping(sb, "10.84.0.1") and ping(sb, "10.85.0.1")  # 10.85/16 only through our route
    wait_for(lambda: _dad_done(sb), what="fd84::2 past DAD")
    assert ping(sb, "fd84::1") and ping(sb, "2001:db8::1")

    node.cleanup("a-conn")
    node.cleanup("a-prep")
    assert by_name(w.ipr(sb), "net1") is None
    assert l3_state(sb) == sandbox_baseline
    assert w.snapshot(w.host) == host_baseline
    assert ping(gateway, "10.84.0.1")


def test_macvlan_cni_without_addressing_config_runs_as_before(
    node_world: tuple[Node, World],
) -> None:
    node, w = node_world
    sb = w.sandbox()
    parent, _ = w.veth(w.host)
    config = {"ifName": "net1", "mtu": 1500, "up": True}
    handle = host_handle(w.ipr(w.host), parent, Access.CREATE_CHILD, hid="parent-1")
    prepared = node.run(
        "b-prep",
        bind("macvlan-cni", "prepare", call(config, "b-prep", allocation={"parent": (handle,)})),
    )
    ref = node.pin("b", sb)
    connect = bind(
        "macvlan-cni",
        "connect",
        call(config, "b-conn", prepared=dict(prepared.exports), sandbox=ref),
    )
    assert [e.id for e in connect.effects] == ["create"]
    node.run("b-conn", connect, sandbox=ref)
    infos = ip_json(sb, "addr", "show", "dev", "net1")[0]["addr_info"]
    assert [a["scope"] for a in infos] in ([], ["link"])  # at most the kernel's fe80::
    node.cleanup("b-conn")
    node.cleanup("b-prep")


def test_host_cni_netdevice_returns_without_the_pods_addressing(
    node_world: tuple[Node, World],
) -> None:
    node, w = node_world
    sb = w.sandbox()
    host = w.ipr(w.host)
    root, peer = w.veth(w.host)
    peer_ns = w.sandbox()
    host.link("set", index=host.link_lookup(ifname=peer)[0], net_ns_fd=peer_ns)
    peer_ipr = w.ipr(peer_ns)
    index = peer_ipr.link_lookup(ifname=peer)[0]
    peer_ipr.addr("add", index=index, address="10.84.0.1", prefixlen=24)
    peer_ipr.addr("add", index=index, address="fd84::1", prefixlen=64, flags=0x02)
    lo = peer_ipr.link_lookup(ifname="lo")[0]
    peer_ipr.addr("add", index=lo, address="10.85.0.1", prefixlen=32)
    peer_ipr.addr("add", index=lo, address="2001:db8::1", prefixlen=128)
    peer_ipr.link("set", index=index, state="up")
    baseline = w.snapshot(w.host)
    config = {"mode": "kernel", "ifName": "net1", "mtu": 1500, "up": True, **ADDRESSING}

    handle = host_handle(host, root, Access.EXCLUSIVE_CONFIGURE)
    prepared = node.run(
        "c-prep",
        bind("host-cni", "prepare", call(config, "c-prep", allocation={"interface": (handle,)})),
    )
    ref = node.pin("c", sb)
    connect = bind(
        "host-cni", "connect", call(config, "c-conn", prepared=dict(prepared.exports), sandbox=ref)
    )
    assert [e.id for e in connect.effects] == ["move", "state", "sysctls", "addresses", "routes"]
    node.run("c-conn", connect, sandbox=ref)
    _assert_addressed(sb)
    wait_for(lambda: _dad_done(sb), what="fd84::2 past DAD")
    assert ping(sb, "10.85.0.1") and ping(sb, "2001:db8::1")

    node.cleanup("c-conn")
    node.cleanup("c-prep")
    assert by_name(w.ipr(sb), "net1") is None
    assert w.snapshot(w.host) == baseline  # back under its own name, no address, no route
