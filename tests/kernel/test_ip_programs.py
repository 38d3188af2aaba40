"""A plugin using the ``ip/*`` opcodes (``tests/kernel/plugins/macvlan-l3``) through the
real binder, runner, RocksDB journal and executors on the host kernel, as root and as the
unprivileged agent: its macvlan child gets an IPv4 address from config, an IPv6 one and
routes through a neighbour; traffic and the kernel's route lookup in the sandbox prove them,
and cleanup from the journal alone leaves the sandbox and the stand-in host as before."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dmn.engine.binder import bind_program
from dmn.engine.bound import BoundProgram
from dmn.host.rtnetlink.links import by_name
from dmn.interpreter.loader import load_plugin_dir
from dmn.vocabulary.terms import Access
from tests.kernel.node import Node, call, unprivileged_server
from tests.kernel.test_ip_executors import ip_json, l3_state, route_get
from tests.kernel.world import World, host_handle, ping, world

pytestmark = pytest.mark.netns

PLUGIN_DIR = Path(__file__).parent / "plugins/macvlan-l3/v1"
CONFIG = {"ifName": "net1", "mtu": 1500, "up": True, "addresses": ["10.84.0.2/24"]}


def bind_l3(hook: str, config: dict[str, Any], op: str, **call_args: Any) -> BoundProgram:
    plugin, diagnostics = load_plugin_dir(PLUGIN_DIR)
    assert plugin is not None, diagnostics
    bound = bind_program(plugin, hook, call(config, op, **call_args))
    assert isinstance(bound, BoundProgram), [str(d) for d in bound]
    return bound


def neighbour(w: World, parent: str) -> str:
    """A namespace with a macvlan of the same parent answering at the plugin's gateways
    (10.84.0.1, fd84::1) and, behind them, at 10.85.0.1 and 2001:db8::1."""
    ns = w.sandbox()
    host = w.ipr(w.host)
    host.link(
        "add",
        ifname="gw0",
        kind="macvlan",
        link=host.link_lookup(ifname=parent)[0],
        macvlan_mode="bridge",
        net_ns_fd=ns,
    )
    ipr = w.ipr(ns)
    index = ipr.link_lookup(ifname="gw0")[0]
    ipr.addr("add", index=index, address="10.84.0.1", prefixlen=24)
    ipr.addr("add", index=index, address="fd84::1", prefixlen=64, flags=0x02)  # nodad
    lo = ipr.link_lookup(ifname="lo")[0]
    ipr.addr("add", index=lo, address="10.85.0.1", prefixlen=32)
    ipr.addr("add", index=lo, address="2001:db8::1", prefixlen=128)
    ipr.link("set", index=index, state="up")
    return ns


@pytest.fixture(params=["root", "unprivileged"])
def node_world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Node, World]]:
    server = unprivileged_server() if request.param == "unprivileged" else None
    with world() as w:
        node = Node(tmp_path / "state", w.host, server=server)
        try:
            yield node, w
        finally:
            node.release_pins()


def test_macvlan_l3_addresses_and_routes_carry_traffic_and_clean_up(
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
        "l3-prep", bind_l3("prepare", CONFIG, "l3-prep", allocation={"parent": (handle,)})
    )
    ref = node.pin("l3", sb)
    result = node.run(
        "l3-conn",
        bind_l3("connect", CONFIG, "l3-conn", prepared=dict(prepared.exports), sandbox=ref),
        sandbox=ref,
    )
    exported = result.exports["interface"][0]
    assert exported.observations["ifName"] == "net1"

    assert ping(sb, "10.84.0.1") and ping(sb, "fd84::1")
    assert ping(sb, "10.85.0.1") and ping(sb, "2001:db8::1")  # only through our routes
    got = route_get(sb, "10.85.0.1")
    assert (got["gateway"], got["dev"], got["prefsrc"]) == ("10.84.0.1", "net1", "10.84.0.2")
    got6 = route_get(sb, "2001:db8::1")
    assert (got6["gateway"], got6["dev"]) == ("fd84::1", "net1")
    ours = [r for r in ip_json(sb, "route") if r["dst"] == "10.85.0.0/16"]
    assert [(r["metric"], r["protocol"]) for r in ours] == [(10, "static")]

    node.cleanup("l3-conn")
    node.cleanup("l3-prep")
    assert by_name(w.ipr(sb), "net1") is None
    assert l3_state(sb) == sandbox_baseline
    assert w.snapshot(w.host) == host_baseline
    assert ping(gateway, "10.84.0.1")  # the neighbour is untouched
