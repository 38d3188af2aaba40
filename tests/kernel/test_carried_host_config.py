"""host-cni's ``carryHostAddresses`` (issue 38) on the host kernel, through the real binder,
runner, RocksDB journal and executors: a netdevice with host addresses and routes through it
is moved into a sandbox with them, and returns to the host with them.

The stand-in netdevice is one end of a veth in a scratch "host" namespace; its peer lives in
a namespace of its own and answers for the gateway (10.86.0.1, fd86::1) and for the networks
behind it (10.87.0.1, 2001:db8:87::1 on its loopback), so traffic proves the carried routes.
The host end has two IPv4 addresses of one subnet (a primary and its secondary, one with an
explicit broadcast), an IPv6 address without duplicate address detection, routes via the
gateways in the main table and in table 100, and an ``onlink`` route through a gateway no
prefix covers.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dmn.agent.coordinator.network_data import recorded_addresses
from dmn.engine.journal import EffectState
from dmn.host.rtnetlink.addresses import IFA_F_NODAD
from dmn.host.rtnetlink.carried_config import MAX_ADDRESSES, CarriedConfig, read_carried
from dmn.host.rtnetlink.links import by_name
from dmn.opcodes.executor import EffectContext, ExecutorError
from dmn.vocabulary.handles import CARRIED_HOST_CONFIG
from dmn.vocabulary.terms import Access
from tests.kernel.node import Node, bind, call, unprivileged_server
from tests.kernel.test_ip_executors import ip_json, l3_state, route_get
from tests.kernel.world import EXECUTORS, World, drive, host_handle, ping, world

pytestmark = pytest.mark.netns

CONFIG = {"mode": "kernel", "ifName": "net1", "mtu": 1500, "up": True, "carryHostAddresses": True}
CARRIED_ADDRESSES = {("10.86.0.2", 24), ("10.86.0.3", 24), ("fd86::2", 64)}


def in_ns(ns: str, *args: str) -> None:
    subprocess.run(["ip", "netns", "exec", ns, "ip", *args], check=True)


def carrying_host(w: World) -> tuple[str, str]:
    """The host netdevice (its name) with the addresses and routes above, and the peer's
    namespace."""
    root, peer = w.veth(w.host)
    peer_ns = w.sandbox()
    in_ns(w.host, "link", "set", peer, "netns", peer_ns)
    in_ns(peer_ns, "addr", "add", "10.86.0.1/24", "dev", peer)
    in_ns(peer_ns, "addr", "add", "fd86::1/64", "dev", peer, "nodad")
    in_ns(peer_ns, "addr", "add", "10.87.0.1/32", "dev", "lo")
    in_ns(peer_ns, "addr", "add", "2001:db8:87::1/128", "dev", "lo")
    in_ns(peer_ns, "link", "set", "lo", "up")
    in_ns(peer_ns, "link", "set", peer, "up")
    in_ns(peer_ns, "route", "add", "192.0.2.0/24", "dev", peer)  # answers the onlink gateway
    in_ns(w.host, "addr", "add", "10.86.0.2/24", "brd", "10.86.0.255", "dev", root)
    in_ns(w.host, "addr", "add", "10.86.0.3/24", "dev", root)  # secondary of 10.86.0.2
    in_ns(w.host, "addr", "add", "fd86::2/64", "dev", root, "nodad")
    in_ns(w.host, "route", "add", "10.87.0.0/16", "via", "10.86.0.1", "dev", root, "metric", "10")
    in_ns(w.host, "route", "add", "2001:db8:87::/64", "via", "fd86::1", "dev", root)
    in_ns(w.host, "route", "add", "default", "via", "10.86.0.1", "dev", root, "table", "100")
    in_ns(w.host, "route", "add", "10.89.0.0/16", "via", "192.0.2.1", "dev", root, "onlink")
    return root, peer_ns


def sandbox_addresses(sb: str, name: str = "net1") -> set[tuple[str, int]]:
    found = ip_json(sb, "addr", "show", "dev", name)
    return {
        (a["local"], a["prefixlen"])
        for a in found[0]["addr_info"]
        if not a["local"].startswith("fe80:")
    }


def host_state(w: World) -> Any:
    """The host's addresses and routes of every table, and its links (by name)."""
    return l3_state(w.host), w.snapshot(w.host)


def differences(now: Any, then: Any) -> list[Any]:
    """What is in one host state and not in the other (addresses, IPv4 and IPv6 routes,
    neighbours and rules, links)."""
    (l3_now, links_now), (l3_then, links_then) = now, then
    out: list[Any] = []
    for a, b in zip(l3_now, l3_then, strict=True):
        out.append(([x for x in a if x not in b], [x for x in b if x not in a]))
    out.append({k: (links_now.get(k), links_then.get(k)) for k in {*links_now, *links_then}
                if links_now.get(k) != links_then.get(k)})  # fmt: skip
    return out


@pytest.fixture(params=["root", "unprivileged"])
def node_world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Node, World]]:
    server = unprivileged_server() if request.param == "unprivileged" else None
    with world() as w:
        node = Node(tmp_path / "state", w.host, server=server)
        try:
            yield node, w
        finally:
            node.release_pins()


def attach(node: Node, w: World, root: str, sb: str, op: str) -> Any:
    handle = host_handle(w.ipr(w.host), root, Access.EXCLUSIVE_CONFIGURE)
    prepared = node.run(
        f"{op}-prep",
        bind(
            "host-cni", "prepare", call(CONFIG, f"{op}-prep", allocation={"interface": (handle,)})
        ),
    )
    ref = node.pin(op, sb)
    connect = bind(
        "host-cni",
        "connect",
        call(CONFIG, f"{op}-conn", prepared=dict(prepared.exports), sandbox=ref),
    )
    assert [e.id for e in connect.effects] == ["move", "state", "carried"]
    return node.run(f"{op}-conn", connect, sandbox=ref)


def test_a_moved_netdevice_carries_its_host_addresses_and_routes_and_brings_them_back(
    node_world: tuple[Node, World],
) -> None:
    node, w = node_world
    sb = w.sandbox()
    root, _ = carrying_host(w)
    baseline = host_state(w)

    result = attach(node, w, root, sb, "a")
    # in the sandbox: the permanent global addresses (not the one with a lifetime) and the
    # routes, through the link under its new name; traffic goes through them
    assert sandbox_addresses(sb) == CARRIED_ADDRESSES
    got = route_get(sb, "10.87.0.1")
    assert (got["gateway"], got["dev"]) == ("10.86.0.1", "net1")
    assert route_get(sb, "2001:db8:87::1")["gateway"] == "fd86::1"
    table100 = ip_json(sb, "-4", "route", "show", "table", "100")
    assert [(r["dst"], r["gateway"], r["dev"]) for r in table100] == [
        ("default", "10.86.0.1", "net1")
    ]
    onlink = ip_json(sb, "-4", "route", "show", "10.89.0.0/16")
    assert onlink[0]["gateway"] == "192.0.2.1" and "onlink" in onlink[0]["flags"]
    brd = [a for a in ip_json(sb, "-4", "addr", "show", "dev", "net1")[0]["addr_info"]]
    assert {a["local"]: a.get("broadcast") for a in brd}["10.86.0.2"] == "10.86.0.255"
    assert ping(sb, "10.87.0.1") and ping(sb, "2001:db8:87::1")
    # the host lost the netdevice, and with it its addresses and routes
    assert by_name(w.ipr(w.host), root) is None
    assert not ip_json(w.host, "-4", "route", "show", "10.87.0.0/16")
    # the move's outcome carries the record; the claim reports the carried addresses
    handle = result.exports["interface"][0]
    assert "10.87.0.0" in str(handle.observations[CARRIED_HOST_CONFIG])
    with node.runner() as r:
        op = r.journal.load_operation("a-conn")
    assert op is not None
    assert recorded_addresses(handle, op.effects) == ["10.86.0.2/24", "10.86.0.3/24", "fd86::2/64"]

    node.cleanup("a-conn")
    node.cleanup("a-prep")
    assert by_name(w.ipr(sb), "net1") is None
    assert host_state(w) == baseline, differences(host_state(w), baseline)
    host_got = route_get(w.host, "10.87.0.1")
    assert (host_got["gateway"], host_got["dev"]) == ("10.86.0.1", root)


def test_without_the_option_the_move_carries_nothing(node_world: tuple[Node, World]) -> None:
    node, w = node_world
    sb = w.sandbox()
    root, _ = carrying_host(w)
    config = {**CONFIG, "carryHostAddresses": False}
    handle = host_handle(w.ipr(w.host), root, Access.EXCLUSIVE_CONFIGURE)
    prepared = node.run(
        "b-prep",
        bind("host-cni", "prepare", call(config, "b-prep", allocation={"interface": (handle,)})),
    )
    ref = node.pin("b", sb)
    connect = bind(
        "host-cni", "connect", call(config, "b-conn", prepared=dict(prepared.exports), sandbox=ref)
    )
    assert [e.id for e in connect.effects] == ["move", "state"]
    result = node.run("b-conn", connect, sandbox=ref)
    assert CARRIED_HOST_CONFIG not in result.exports["interface"][0].observations
    assert sandbox_addresses(sb) == set()
    node.cleanup("b-conn")
    node.cleanup("b-prep")


@pytest.mark.adversarial
def test_a_tenant_renaming_removing_and_adding_does_not_change_what_returns(
    tmp_path: Path,
) -> None:
    """The tenant (CAP_NET_ADMIN in its sandbox) renames the link, deletes a carried address
    and a carried route, and adds an address and a route of its own: removal still succeeds
    (nothing quarantined), deletes none of the tenant's entries in the sandbox, and the host
    gets back exactly what was recorded — never the tenant's address."""
    with world() as w:
        node = Node(tmp_path / "state", w.host)
        try:
            sb = w.sandbox()
            root, _ = carrying_host(w)
            baseline = host_state(w)
            attach(node, w, root, sb, "t")
            in_ns(sb, "link", "set", "net1", "name", "tenant0")
            in_ns(sb, "addr", "del", "fd86::2/64", "dev", "tenant0")
            in_ns(sb, "route", "del", "10.87.0.0/16", "via", "10.86.0.1", "dev", "tenant0",
                  "metric", "10")  # fmt: skip
            in_ns(sb, "addr", "add", "10.99.0.5/24", "dev", "tenant0")
            in_ns(sb, "route", "add", "10.98.0.0/16", "via", "10.86.0.1", "dev", "tenant0")
            with node.runner() as r:
                result = r.cleanup("t-conn")
                op = r.journal.load_operation("t-conn")
            assert result.state.value == "Undone", result
            assert op is not None
            assert {e.id: e.state for e in op.effects} == {
                "move": EffectState.UNDONE,
                "state": EffectState.UNDONE,
                "carried": EffectState.UNDONE,
            }
            node.cleanup("t-prep")
            assert host_state(w) == baseline, differences(host_state(w), baseline)
            assert "10.99.0.5" not in str(ip_json(w.host, "addr"))
        finally:
            node.release_pins()


@pytest.mark.adversarial
def test_an_address_the_tenant_re_added_is_left_and_only_the_carry_is_quarantined(
    tmp_path: Path,
) -> None:
    """A carried address the tenant deleted and added again is not provably ours: the carry
    effect is quarantined with E_ADDRESS_NOT_OWNED, the rest of it is undone, the move still
    returns the link, and the host gets back what was recorded."""
    with world() as w:
        node = Node(tmp_path / "state", w.host)
        try:
            sb = w.sandbox()
            root, _ = carrying_host(w)
            baseline = host_state(w)
            attach(node, w, root, sb, "q")
            in_ns(sb, "addr", "del", "fd86::2/64", "dev", "net1")
            time.sleep(0.02)  # past the creation stamp's 1/100 s: a re-add within it is ours
            in_ns(sb, "addr", "add", "fd86::2/64", "dev", "net1", "nodad")
            with node.runner() as r:
                r.cleanup("q-conn")
                op = r.journal.load_operation("q-conn")
            assert op is not None
            states = {e.id: (e.state, e.failure.code if e.failure else None) for e in op.effects}
            assert states["carried"] == (EffectState.QUARANTINED, "E_ADDRESS_NOT_OWNED")
            assert states["move"][0] is EffectState.UNDONE
            node.cleanup("q-prep")
            assert host_state(w) == baseline, differences(host_state(w), baseline)
        finally:
            node.release_pins()


def test_an_entry_the_host_already_has_on_return_is_left_as_it_is(
    node_world: tuple[Node, World],
) -> None:
    """While the netdevice is away the host's own tooling adds a route with the key of a
    carried one (through another link): the return leaves that route alone, puts back the
    rest, and the removal succeeds."""
    node, w = node_world
    sb = w.sandbox()
    root, _ = carrying_host(w)
    other, _ = w.veth(w.host)
    in_ns(w.host, "addr", "add", "10.97.0.2/24", "dev", other)
    attach(node, w, root, sb, "h")
    in_ns(w.host, "route", "add", "10.87.0.0/16", "via", "10.97.0.1", "dev", other, "metric", "10")
    with node.runner() as r:
        assert r.cleanup("h-conn").state.value == "Undone"
    node.cleanup("h-prep")
    kept = route_get(w.host, "10.87.0.1")
    assert (kept["gateway"], kept["dev"]) == ("10.97.0.1", other)  # theirs, left in place
    assert route_get(w.host, "2001:db8:87::1")["dev"] == root  # ours, put back
    on_root = ip_json(w.host, "addr", "show", "dev", root)[0]["addr_info"]
    assert {(a["local"], a["prefixlen"]) for a in on_root if a["scope"] == "global"} == (
        CARRIED_ADDRESSES
    )


def test_what_a_link_carries_is_what_an_administrator_configured() -> None:
    """Read on the host before any move: permanent global addresses with their writable
    flags and broadcast, and the routes through the link an administrator added — not an
    address with a lifetime, not link-local ones, not the kernel's connected and local
    routes, not routes through another link."""
    with world() as w:
        root, _ = carrying_host(w)
        other, _ = w.veth(w.host)
        in_ns(w.host, "addr", "add", "fd86::99/64", "dev", root, "nodad", "valid_lft", "3000",
              "preferred_lft", "3000")  # fmt: skip
        in_ns(w.host, "addr", "add", "10.96.0.2/24", "dev", other)
        in_ns(w.host, "route", "add", "10.95.0.0/16", "via", "10.96.0.1", "dev", other)
        host = w.ipr(w.host)
        carried = read_carried(host, host.link_lookup(ifname=root)[0])
        assert [(a.cidr, a.flags, a.broadcast) for a in carried.addresses] == [
            ("10.86.0.2/24", 0, "10.86.0.255"),
            ("10.86.0.3/24", 0, ""),
            ("fd86::2/64", IFA_F_NODAD, ""),
        ]
        routes = {(r.route.describe(), r.route.protocol, r.onlink) for r in carried.routes}
        assert routes == {
            ("10.87.0.0/16 via 10.86.0.1 table 254 metric 10", 3, False),
            ("0.0.0.0/0 via 10.86.0.1 table 100 metric 0", 3, False),
            ("10.89.0.0/16 via 192.0.2.1 table 254 metric 0", 3, True),
            ("2001:db8:87::/64 via fd86::1 table 254 metric 1024", 3, False),
        }
        assert CarriedConfig.decode(carried.encode()) == carried


def test_a_handle_without_a_record_and_a_link_with_too_much_are_refused() -> None:
    """``ip/carried-host-config/v1`` bound to a move that recorded nothing is E_NOT_CARRIED;
    a link with more addresses than a move carries is refused at the move's capture
    (E_CARRY_TOO_LARGE), before anything moved."""
    with world() as w:
        sb = w.sandbox()
        root, _ = carrying_host(w)
        host = w.ipr(w.host)
        env = w.env(sb)
        handle = host_handle(host, root, Access.EXCLUSIVE_CONFIGURE)
        move = drive(env, "linux/link-move/v1", {"interface": (handle,)}, {"ifName": "net1"})
        carry = EXECUTORS["ip/carried-host-config/v1"]
        ctx = EffectContext("op1", "carried", {"interface": (move.output(),)}, {}, env)
        with pytest.raises(ExecutorError) as refused:
            carry.capture(ctx)
        assert refused.value.code == "E_NOT_CARRIED"
        move.undo()

        for n in range(MAX_ADDRESSES):
            in_ns(w.host, "addr", "add", f"10.90.{n}.2/24", "dev", root)
        carrying = {"ifName": "net1", "carryHostConfig": True}
        ctx = EffectContext("op2", "move", {"interface": (handle,)}, carrying, env)
        with pytest.raises(ExecutorError) as refused:
            EXECUTORS["linux/link-move/v1"].capture(ctx)
        assert refused.value.code == "E_CARRY_TOO_LARGE"
        assert by_name(host, root) is not None
