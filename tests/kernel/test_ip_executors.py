"""``ip/addresses/v1`` and ``ip/routes/v1`` on the host kernel: apply, observe, recover and
undo, IPv4 and IPv6, on macvlan children of a veth parent in scratch namespaces.

Traffic (ping) and the kernel's own route lookup (``ip route get``) inside the sandbox prove
what the effects configured; undo must leave the sandbox exactly as before, including the
addresses and routes someone else configured beside ours.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from typing import Any

import pytest

from dmn.host.netns import NamespaceRef
from dmn.host.rtnetlink.addresses import link_addresses
from dmn.opcodes.executor import EffectContext, ExecutorError, RecoveryObservation
from dmn.vocabulary.handles import Handle
from dmn.vocabulary.terms import Access
from tests.kernel.scratch import netns_path
from tests.kernel.world import EXECUTORS, Done, World, drive, host_handle, ping, world

pytestmark = pytest.mark.netns

ADDRESSES = "ip/addresses/v1"
ROUTES = "ip/routes/v1"
MACVLAN = {"ifName": "net1", "mode": "bridge", "mtu": 1500, "up": True}


def ip_json(ns: str, *args: str) -> Any:
    out = subprocess.run(
        ["ip", "netns", "exec", ns, "ip", "-j", *args], capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out) if out.strip() else []


def route_get(ns: str, destination: str) -> dict[str, Any]:
    found = ip_json(ns, "route", "get", destination)
    assert len(found) == 1, found
    return dict(found[0])


def l3_state(ns: str) -> tuple[Any, Any, Any, Any]:
    """Addresses (without lifetimes), routes of every family and configured neighbour
    entries, to compare namespaces; IPv6 link-local ones left out (the kernel adds them when
    a link comes up, whenever), as are the neighbours the kernel learns and the kernel's
    IPv6 local routes of the addresses (installed from a work queue after the address, for
    a nodad one too: under load a state read right after an address was added or restored
    lacked its route; the address itself is compared); and the policy routing rules."""
    addrs = sorted(
        (a["ifname"], i["local"], i["prefixlen"])
        for a in ip_json(ns, "addr")
        for i in a.get("addr_info", [])
        if not i["local"].startswith("fe80:")
    )
    v4 = ip_json(ns, "-4", "route", "show", "table", "all")
    v6 = [
        r
        for r in ip_json(ns, "-6", "route", "show", "table", "all")
        if not str(r.get("dst", "")).startswith("fe80:")
        and not (r.get("type") == "local" and r.get("protocol") == "kernel")
    ]
    neigh = sorted(
        (n["dev"], n["dst"], n.get("lladdr", ""), tuple(n.get("state", ())))
        for n in ip_json(ns, "neigh", "show", "nud", "permanent")
    )
    rules = [ip_json(ns, "-4", "rule"), ip_json(ns, "-6", "rule")]
    return addrs, v4, v6, (neigh, rules)


def child(w: World, sandbox: str, parent_handle: Handle, op: str) -> tuple[Any, Done]:
    env = w.env(sandbox)
    done = drive(env, "linux/create-macvlan/v2", {"parent": (parent_handle,)}, MACVLAN, op, "mk")
    return env, done


def _two_children(w: World) -> tuple[list[str], list[tuple[Any, Done]]]:
    """Two sandboxes, each with a macvlan child ``net1`` of one veth parent."""
    sandboxes = [w.sandbox(), w.sandbox()]
    host = w.ipr(w.host)
    parent, _ = w.veth(w.host)
    handle = host_handle(host, parent, Access.CREATE_CHILD, hid="parent-1")
    return sandboxes, [child(w, sb, handle, f"op{i}") for i, sb in enumerate(sandboxes)]


def test_addresses_and_routes_carry_traffic_and_undo_leaves_the_sandbox_as_before() -> None:
    with world() as w:
        sandboxes, children = _two_children(w)
        mk_state = l3_state(sandboxes[0])  # the child as created, before any ip/* effect
        done = []
        for i, ((env, mk), sb) in enumerate(zip(children, sandboxes, strict=True)):
            me, peer = i + 2, 3 - i
            addrs = drive(
                env,
                ADDRESSES,
                {"interface": (mk.output(),)},
                {"addresses": [f"10.86.0.{me}/24", f"fd86::{me}/64"], "nodad": True},
                f"op{i}",
                "addr",
            )
            stamps = addrs.output().observations["ipAddressStamps"]
            assert isinstance(stamps, str) and f"10.86.0.{me}/24@" in stamps
            routes = drive(
                env,
                ROUTES,
                {"interface": (addrs.output(),)},
                {
                    "routes": [
                        {"destination": "10.87.0.0/16", "gateway": f"10.86.0.{peer}"},
                        {"destination": "default", "gateway": f"fd86::{peer}", "metric": 7},
                        {
                            "destination": "10.88.0.0/16",
                            "gateway": f"10.86.0.{peer}",
                            "source": f"10.86.0.{me}",
                            "table": 100,
                            "metric": 5,
                        },
                    ]
                },
                f"op{i}",
                "routes",
            )
            assert routes.output().observations["ifName"] == "net1"
            done.append((addrs, routes))
            if i == 0:
                # a neighbour's own configuration beside ours on the same link
                subprocess.run(
                    ["ip", "netns", "exec", sb, "ip", "addr", "add", "10.89.0.9/24", "dev", "net1"],
                    check=True,
                )
        sb = sandboxes[0]
        assert ping(sb, "10.86.0.3") and ping(sb, "fd86::3")
        got = route_get(sb, "10.87.1.1")
        assert (got["gateway"], got["dev"], got["prefsrc"]) == ("10.86.0.3", "net1", "10.86.0.2")
        got6 = route_get(sb, "2001:db8::1")
        assert (got6["gateway"], got6["dev"]) == ("fd86::3", "net1")
        table = ip_json(sb, "route", "show", "table", "100")
        assert [(r["dst"], r["gateway"], r["prefsrc"], r["metric"]) for r in table] == [
            ("10.88.0.0/16", "10.86.0.3", "10.86.0.2", 5)
        ]

        addrs, routes = done[0]
        routes.undo()
        assert ip_json(sb, "route", "show", "table", "100") == []
        assert ip_json(sb, "route", "show", "10.87.0.0/16") == []
        addrs.undo()
        left = [
            (i["local"], i["prefixlen"])
            for i in ip_json(sb, "addr", "show", "net1")[0]["addr_info"]
        ]
        assert ("10.89.0.9", 24) in left
        assert not {("10.86.0.2", 24), ("fd86::2", 64)} & set(left)
        # the other sandbox's configuration is untouched
        assert ping(sandboxes[1], "10.86.0.3") is True  # its own address still answers
        assert route_get(sandboxes[1], "10.87.1.1")["gateway"] == "10.86.0.2"
        # undo twice is a no-op (the runner repeats an undo a crash interrupted)
        routes.undo()
        addrs.undo()
        subprocess.run(
            ["ip", "netns", "exec", sb, "ip", "addr", "del", "10.89.0.9/24", "dev", "net1"],
            check=True,
        )
        assert l3_state(sb) == mk_state


def test_ipv6_with_duplicate_address_detection_is_observed_while_tentative() -> None:
    with world() as w:
        sandboxes, children = _two_children(w)
        env, mk = children[0]
        addrs = drive(env, ADDRESSES, {"interface": (mk.output(),)}, {"addresses": ["fd87::2/64"]})
        info = ip_json(sandboxes[0], "addr", "show", "net1")[0]["addr_info"]
        mine = [i for i in info if i["local"] == "fd87::2"]
        assert len(mine) == 1 and mine[0].get("nodad") is not True
        addrs.undo()
        info = ip_json(sandboxes[0], "addr", "show", "net1")[0]["addr_info"]
        assert not [i for i in info if i["local"] == "fd87::2"]


def test_an_address_or_route_the_link_already_has_is_refused_never_adopted() -> None:
    with world() as w:
        sandboxes, children = _two_children(w)
        sb = sandboxes[0]
        env, mk = children[0]
        subprocess.run(
            ["ip", "netns", "exec", sb, "ip", "addr", "add", "10.90.0.2/16", "dev", "net1"],
            check=True,
        )
        ex = EXECUTORS[ADDRESSES]
        ctx = EffectContext(
            "op", "addr", {"interface": (mk.output(),)}, {"addresses": ["10.90.0.2/24"]}, env
        )
        with pytest.raises(ExecutorError) as refused:
            ex.capture(ctx)
        assert refused.value.code == "E_ADDRESS_EXISTS"
        # appeared between capture and apply: refused before anything is added
        ctx = EffectContext(
            "op",
            "addr",
            {"interface": (mk.output(),)},
            {"addresses": ["10.91.0.2/24", "10.92.0.2/24"]},
            env,
        )
        before = ex.capture(ctx)
        subprocess.run(
            ["ip", "netns", "exec", sb, "ip", "addr", "add", "10.92.0.2/24", "dev", "net1"],
            check=True,
        )
        with pytest.raises(ExecutorError) as refused:
            ex.apply(ctx, before)
        assert refused.value.code == "E_ADDRESS_EXISTS"
        assert "10.91.0.2" not in {a.address for a in _addresses(env, sb)}

        subprocess.run(
            ["ip", "netns", "exec", sb, "ip", "route", "add", "10.93.0.0/16", "dev", "net1"],
            check=True,
        )
        rex = EXECUTORS[ROUTES]
        rctx = EffectContext(
            "op",
            "routes",
            {"interface": (mk.output(),)},
            {"routes": [{"destination": "10.93.0.0/16"}]},
            env,
        )
        with pytest.raises(ExecutorError) as refused:
            rex.capture(rctx)
        assert refused.value.code == "E_ROUTE_EXISTS"


def test_a_second_interface_shares_an_identical_gateway_route_and_never_adopts_it() -> None:
    """Two interfaces of one template in one sandbox ask for the same routes; the kernel
    takes one route per key. The second effect records the first's identical gateway route
    as shared: its undo leaves it, the first's undo removes it. A route with the key and
    another attribute (here a source address), or an on-link route, still refuses."""
    with world() as w:
        sb = w.sandbox()
        before = l3_state(sb)
        parent, _ = w.veth(w.host)
        handle = host_handle(w.ipr(w.host), parent, Access.CREATE_CHILD, hid="parent-1")
        env = w.env(sb)
        made = [
            drive(env, "linux/create-macvlan/v2", {"parent": (handle,)},
                  {**MACVLAN, "ifName": name}, f"op{i}", "mk")
            for i, name in enumerate(("net1", "net2"))
        ]  # fmt: skip
        addrs = [
            drive(env, ADDRESSES, {"interface": (mk.output(),)},
                  {"addresses": [f"10.86.0.{i + 2}/24"]}, f"op{i}", "addr")
            for i, mk in enumerate(made)
        ]  # fmt: skip
        wanted = {"routes": [{"destination": "10.87.0.0/16", "gateway": "10.86.0.1"}]}
        first, second = (
            drive(env, ROUTES, {"interface": (a.output(),)}, wanted, f"op{i}", "routes")
            for i, a in enumerate(addrs)
        )
        assert second.before["entries"] == [] and len(second.before["shared"]) == 1
        shown = [(r["gateway"], r["dev"]) for r in ip_json(sb, "route", "show", "10.87.0.0/16")]
        assert shown == [("10.86.0.1", "net1")]
        second.undo()
        shown = [(r["gateway"], r["dev"]) for r in ip_json(sb, "route", "show", "10.87.0.0/16")]
        assert shown == [("10.86.0.1", "net1")]
        first.undo()
        assert ip_json(sb, "route", "show", "10.87.0.0/16") == []

        ex = EXECUTORS[ROUTES]
        for theirs, asked in (
            (["via", "10.86.0.1", "src", "10.86.0.2"], {"gateway": "10.86.0.1"}),
            (["dev", "net1"], {}),
        ):
            subprocess.run(
                ["ip", "netns", "exec", sb, "ip", "route", "add", "10.87.0.0/16", *theirs],
                check=True,
            )
            ctx = EffectContext(
                "op9", "routes", {"interface": (addrs[1].output(),)},
                {"routes": [{"destination": "10.87.0.0/16", **asked}]}, env,
            )  # fmt: skip
            with pytest.raises(ExecutorError) as refused:
                ex.capture(ctx)
            assert refused.value.code == "E_ROUTE_EXISTS", theirs
            subprocess.run(
                ["ip", "netns", "exec", sb, "ip", "route", "del", "10.87.0.0/16"], check=True
            )
        for done in reversed([*addrs, *made]):
            done.undo()
        assert l3_state(sb) == before


def _addresses(env: Any, sb: str) -> Any:
    ref = NamespaceRef.at(netns_path(sb))
    ipr = env.rtnl(ref)
    index = ipr.link_lookup(ifname="net1")[0]
    return link_addresses(ipr, index)


def test_a_failed_route_takes_back_the_routes_it_added() -> None:
    with world() as w:
        sandboxes, children = _two_children(w)
        env, mk = children[0]
        ex = EXECUTORS[ROUTES]
        ctx = EffectContext(
            "op",
            "routes",
            {"interface": (mk.output(),)},
            {
                "routes": [
                    {"destination": "10.94.0.0/16"},
                    {"destination": "10.95.0.0/16", "gateway": "192.0.2.1"},  # unreachable
                ]
            },
            env,
        )
        before = ex.capture(ctx)
        with pytest.raises(ExecutorError) as failed:
            ex.apply(ctx, before)
        assert failed.value.code.startswith("E_NETLINK_")
        assert ip_json(sandboxes[0], "route", "show", "10.94.0.0/16") == []
        assert ex.recover(ctx, before) is RecoveryObservation.NOT_APPLIED


@pytest.mark.parametrize("kind", [ADDRESSES, ROUTES])
def test_recovery_observes_each_side_of_the_mutation(kind: str) -> None:
    with world() as w:
        sandboxes, children = _two_children(w)
        env, mk = children[0]
        parameters: dict[str, Any] = (
            {"addresses": ["10.96.0.2/24", "fd96::2/64"], "nodad": True}
            if kind == ADDRESSES
            else {
                "routes": [
                    {"destination": "10.97.0.0/16"},
                    {"destination": "fd97::/64", "metric": 3},
                ]
            }
        )
        ex = EXECUTORS[kind]
        ctx = EffectContext("op", "e", {"interface": (mk.output(),)}, parameters, env)
        before = ex.capture(ctx)
        assert ex.recover(ctx, before) is RecoveryObservation.NOT_APPLIED
        ex.apply(ctx, before)
        assert ex.recover(ctx, before) is RecoveryObservation.APPLIED
        sb = sandboxes[0]
        if kind == ADDRESSES:
            cmd = ["ip", "addr", "del", "fd96::2/64", "dev", "net1"]
        else:
            cmd = ["ip", "-6", "route", "del", "fd97::/64", "dev", "net1", "metric", "3"]
        subprocess.run(["ip", "netns", "exec", sb, *cmd], check=True)
        assert ex.recover(ctx, before) is RecoveryObservation.UNCERTAIN
        assert not ex.observe(ctx, before).postconditions_ok
        # an effect whose outcome was never recorded: undo removes what is left of it
        ex.undo(ctx, before, {})
        assert ex.recover(ctx, before) is RecoveryObservation.NOT_APPLIED
        mk.undo()


def test_undo_after_the_sandbox_is_gone_is_a_no_op() -> None:
    with world() as w:
        sandboxes, children = _two_children(w)
        env, mk = children[0]
        addrs = drive(
            env, ADDRESSES, {"interface": (mk.output(),)}, {"addresses": ["10.98.0.2/24"]}
        )
        routes = drive(
            env,
            ROUTES,
            {"interface": (addrs.output(),)},
            {"routes": [{"destination": "10.99.0.0/16"}]},
        )
        subprocess.run(["ip", "netns", "del", sandboxes[0]], check=True)
        subprocess.run(["ip", "netns", "add", sandboxes[0]], check=True)  # the scratch removal
        fresh = w.env()  # as after a restart: nothing of the old namespace held open
        for done in (routes, addrs):
            EXECUTORS[done.kind].undo(
                dataclasses.replace(done.ctx, env=fresh), done.before, done.observed.outputs
            )


def neighbours(ns: str) -> dict[str, tuple[str, list[str]]]:
    return {
        n["dst"]: (n.get("lladdr", ""), n.get("state", []))
        for n in ip_json(ns, "neigh", "show", "dev", "net1")
    }


def test_permanent_neighbours_resolve_without_discovery_and_undo_removes_them() -> None:
    with world() as w:
        sandboxes, children = _two_children(w)
        (env, mk), (env2, mk2) = children
        sb = sandboxes[0]
        for e, m, me, op in ((env, mk, 2, "op0"), (env2, mk2, 3, "op1")):
            drive(
                e,
                ADDRESSES,
                {"interface": (m.output(),)},
                {"addresses": [f"10.60.0.{me}/24", f"fd60::{me}/64"], "nodad": True},
                op,
                "addr",
            )
        peer_mac = str(mk2.output().observations["mac"])
        done = drive(
            env,
            "ip/neighbours/v1",
            {"interface": (mk.output(),)},
            {
                "neighbours": [
                    {"address": "10.60.0.3", "lladdr": peer_mac},
                    {"address": "fd60::3", "lladdr": peer_mac},
                ]
            },
            "op0",
            "neigh",
        )
        entries = neighbours(sb)
        assert entries["10.60.0.3"] == (peer_mac, ["PERMANENT"])
        assert entries["fd60::3"] == (peer_mac, ["PERMANENT"])
        assert ping(sb, "10.60.0.3") and ping(sb, "fd60::3")  # no discovery needed: permanent
        assert neighbours(sb)["10.60.0.3"] == (peer_mac, ["PERMANENT"])
        done.undo()
        entries = neighbours(sb)
        assert "10.60.0.3" not in entries and "fd60::3" not in entries


def test_a_learned_neighbour_is_written_over_a_configured_one_refuses() -> None:
    with world() as w:
        sandboxes, children = _two_children(w)
        (env, mk), (env2, mk2) = children
        sb = sandboxes[0]
        for e, m, me, op in ((env, mk, 2, "op0"), (env2, mk2, 3, "op1")):
            drive(
                e,
                ADDRESSES,
                {"interface": (m.output(),)},
                {"addresses": [f"10.61.0.{me}/24"]},
                op,
                "a",
            )
        assert ping(sb, "10.61.0.3")  # the kernel learns the peer
        assert neighbours(sb)["10.61.0.3"][1] != ["PERMANENT"]
        parameters = {"neighbours": [{"address": "10.61.0.3", "lladdr": "02:00:00:00:61:03"}]}
        done = drive(env, "ip/neighbours/v1", {"interface": (mk.output(),)}, parameters)
        assert neighbours(sb)["10.61.0.3"] == ("02:00:00:00:61:03", ["PERMANENT"])
        done.undo()
        subprocess.run(
            ["ip", "netns", "exec", sb, "ip", "neigh", "add", "10.61.0.3", "lladdr",
             "02:00:00:00:61:09", "nud", "permanent", "dev", "net1"],
            check=True,
        )  # fmt: skip
        ex = EXECUTORS["ip/neighbours/v1"]
        ctx = EffectContext("op", "n", {"interface": (mk.output(),)}, parameters, env)
        with pytest.raises(ExecutorError) as refused:
            ex.capture(ctx)
        assert refused.value.code == "E_NEIGHBOUR_EXISTS"


def test_rules_steer_lookups_into_their_table_and_undo_removes_exactly_them() -> None:
    with world() as w:
        sandboxes, children = _two_children(w)
        env, mk = children[0]
        sb = sandboxes[0]
        baseline = l3_state(sb)
        addrs = drive(
            env,
            ADDRESSES,
            {"interface": (mk.output(),)},
            {"addresses": ["10.62.0.2/24", "fd62::2/64"], "nodad": True},
        )
        routes = drive(
            env,
            ROUTES,
            {"interface": (addrs.output(),)},
            {
                "routes": [
                    {"destination": "10.63.0.0/16", "gateway": "10.62.0.1", "table": 100},
                    {"destination": "fd63::/48", "gateway": "fd62::1", "table": 100},
                ]
            },
        )
        rules = drive(
            env,
            "ip/rules/v1",
            {"interface": (routes.output(),)},
            {
                "rules": [
                    {"priority": 1000, "to": "10.63.0.0/16", "table": 100, "oif": True},
                    {"priority": 1000, "from": "fd62::/64", "table": 100},
                ]
            },
        )
        mine = [r for r in ip_json(sb, "-4", "rule") if r["priority"] == 1000]
        assert [(r["dst"], r["table"], r.get("oif")) for r in mine] == [
            ("10.63.0.0", "100", "net1")
        ]
        got = ip_json(sb, "route", "get", "10.63.1.1", "oif", "net1")
        assert got[0]["gateway"] == "10.62.0.1"  # the route is only in table 100
        got6 = ip_json(sb, "-6", "route", "get", "fd63::1", "from", "fd62::2")
        assert got6[0]["gateway"] == "fd62::1"
        for done in (rules, routes, addrs):
            done.undo()
        assert l3_state(sb) == baseline
