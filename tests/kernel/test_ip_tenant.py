"""A hostile tenant against ``ip/addresses/v1`` and ``ip/routes/v1`` undo (issue 38).

The tenant has CAP_NET_ADMIN in its sandbox: between the attach and the removal it deletes,
re-adds and changes our addresses and routes, adds addresses of its own that depend on
ours, renames the link, and moves the link away to put another one at its ifindex. Undo must
delete only what it proves ours — the link by its recorded identity, an address by its
kernel creation stamp, a route by every recorded attribute — and quarantine the effect
(raise its reason code) for everything else, touching none of it.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dmn.engine.binder import bind_program
from dmn.engine.bound import BoundProgram
from dmn.engine.journal import EffectState
from dmn.host.rtnetlink.links import by_name
from dmn.interpreter.loader import load_plugin_dir
from dmn.opcodes.executor import ExecutorError
from dmn.vocabulary.terms import Access
from tests.kernel.node import Node, call
from tests.kernel.scratch import scratch_netns
from tests.kernel.test_ip_executors import ADDRESSES, ROUTES, ip_json
from tests.kernel.world import Done, World, drive, host_handle, world

pytestmark = [pytest.mark.netns, pytest.mark.adversarial]

PLUGIN_DIR = Path(__file__).parent / "plugins/macvlan-l3/v1"
STAMP_TICK = 0.05
"""Longer than the creation stamp's resolution (1/100 s), so a re-added address differs."""


def tenant(sb: str, *args: str) -> None:
    subprocess.run(["ip", "netns", "exec", sb, "ip", *args], check=True)


def addresses(sb: str, name: str = "net1") -> set[tuple[str, int]]:
    found = ip_json(sb, "addr", "show", name)
    return {(i["local"], i["prefixlen"]) for i in found[0]["addr_info"]} if found else set()


def routes(sb: str, *args: str) -> list[tuple[str, str]]:
    return [(r["dst"], r.get("gateway", "")) for r in ip_json(sb, *args, "route")]


def attached(w: World) -> tuple[str, Any, Done, Done, Done]:
    """A sandbox with a macvlan ``net1`` carrying 10.70.0.2/24 and fd70::2/64, and routes
    to 10.71.0.0/16 and 10.72.0.0/16 via 10.70.0.1 and fd71::/64 via fd70::1."""
    sb = w.sandbox()
    host = w.ipr(w.host)
    parent, _ = w.veth(w.host)
    handle = host_handle(host, parent, Access.CREATE_CHILD, hid="parent-1")
    env = w.env(sb)
    mk = drive(
        env,
        "linux/create-macvlan/v2",
        {"parent": (handle,)},
        {"ifName": "net1", "mode": "bridge", "mtu": 1500, "up": True},
        "op",
        "mk",
    )
    addrs = drive(
        env,
        ADDRESSES,
        {"interface": (mk.output(),)},
        {"addresses": ["10.70.0.2/24", "fd70::2/64"], "nodad": True},
        "op",
        "addr",
    )
    rts = drive(
        env,
        ROUTES,
        {"interface": (addrs.output(),)},
        {
            "routes": [
                {"destination": "10.71.0.0/16", "gateway": "10.70.0.1"},
                {"destination": "10.72.0.0/16", "gateway": "10.70.0.1"},
                {"destination": "fd71::/64", "gateway": "fd70::1"},
            ]
        },
        "op",
        "routes",
    )
    time.sleep(STAMP_TICK)
    return sb, env, mk, addrs, rts


def refused(done: Done) -> str:
    with pytest.raises(ExecutorError) as caught:
        done.undo()
    return caught.value.code


def test_an_address_deleted_and_added_again_is_left_and_quarantined() -> None:
    with world() as w:
        sb, _, _, addrs, _ = attached(w)
        tenant(sb, "addr", "del", "10.70.0.2/24", "dev", "net1")
        tenant(sb, "addr", "add", "10.70.0.2/24", "dev", "net1")
        assert refused(addrs) == "E_ADDRESS_NOT_OWNED"
        left = addresses(sb)
        assert ("10.70.0.2", 24) in left  # the tenant's copy
        assert ("fd70::2", 64) not in left  # ours, proven by its stamp


def test_an_address_the_tenant_removed_stays_removed_and_undo_succeeds() -> None:
    with world() as w:
        sb, _, _, addrs, rts = attached(w)
        tenant(sb, "addr", "del", "fd70::2/64", "dev", "net1")
        rts.undo()
        addrs.undo()
        assert {a for a in addresses(sb) if not a[0].startswith("fe80")} == set()


def test_an_address_changed_in_place_is_still_ours() -> None:
    with world() as w:
        sb, _, _, addrs, _ = attached(w)
        tenant(sb, "addr", "change", "10.70.0.2/24", "dev", "net1", "valid_lft", "3000",
               "preferred_lft", "2000")  # fmt: skip
        addrs.undo()
        assert ("10.70.0.2", 24) not in addresses(sb)


def test_a_primary_address_with_a_tenant_secondary_is_left_with_it() -> None:
    with world() as w:
        sb, _, _, addrs, rts = attached(w)
        tenant(sb, "addr", "add", "10.70.0.9/24", "dev", "net1")  # secondary of our primary
        rts.undo()
        assert refused(addrs) == "E_ADDRESS_NOT_OWNED"
        left = addresses(sb)
        assert {("10.70.0.2", 24), ("10.70.0.9", 24)} <= left
        assert ("fd70::2", 64) not in left


def test_a_renamed_link_keeps_its_addresses_and_routes_ours() -> None:
    with world() as w:
        sb, _, _, addrs, rts = attached(w)
        tenant(sb, "link", "set", "net1", "name", "eth7")
        rts.undo()
        addrs.undo()
        assert routes(sb) == [] or all(not d.startswith("10.7") for d, _ in routes(sb))
        assert {a for a in addresses(sb, "eth7") if not a[0].startswith("fe80")} == set()


def test_a_link_moved_away_and_an_impostor_at_its_ifindex_is_quarantined_untouched() -> None:
    with world() as w, scratch_netns("dmte") as away:
        sb, _, mk, addrs, rts = attached(w)
        index = mk.output().observations["ifIndex"]
        assert isinstance(index, int)
        tenant(sb, "link", "set", "net1", "netns", away)
        # the tenant's veth at our ifindex, under our name, with our address and route
        tenant(sb, "link", "add", "net1", "index", str(index), "type", "veth", "peer", "tp0")
        tenant(sb, "link", "set", "net1", "up")
        tenant(sb, "link", "set", "tp0", "up")
        tenant(sb, "addr", "add", "10.70.0.2/24", "dev", "net1")
        tenant(sb, "route", "add", "10.71.0.0/16", "via", "10.70.0.1", "dev", "net1",
               "proto", "static")  # fmt: skip
        assert refused(rts) == "E_IDENTITY_MISMATCH"
        assert refused(addrs) == "E_IDENTITY_MISMATCH"
        assert ("10.70.0.2", 24) in addresses(sb)
        assert ("10.71.0.0/16", "10.70.0.1") in routes(sb)
        # ours, moved away (the kernel flushed its addresses on the move): not chased
        assert ip_json(away, "link", "show", "net1")


def test_a_route_changed_or_re_added_by_the_tenant_is_left_and_quarantined() -> None:
    with world() as w:
        sb, _, _, _, rts = attached(w)
        tenant(sb, "route", "replace", "10.71.0.0/16", "via", "10.70.0.7", "dev", "net1",
               "proto", "static")  # fmt: skip
        tenant(sb, "route", "del", "10.72.0.0/16")
        tenant(sb, "route", "add", "10.72.0.0/16", "via", "10.70.0.1", "dev", "net1")
        assert refused(rts) == "E_ROUTE_NOT_OWNED"
        v4 = routes(sb)
        assert ("10.71.0.0/16", "10.70.0.7") in v4  # changed: the tenant's now
        assert ("10.72.0.0/16", "10.70.0.1") in v4  # re-added (proto boot): not ours
        assert ("fd71::/64", "fd70::1") not in routes(sb, "-6")  # ours: deleted


def test_a_route_the_tenant_deleted_stays_deleted_and_undo_succeeds() -> None:
    with world() as w:
        sb, _, _, _, rts = attached(w)
        tenant(sb, "-6", "route", "del", "fd71::/64")
        rts.undo()
        assert not [d for d, _ in routes(sb) if d in ("10.71.0.0/16", "10.72.0.0/16")]


def bound(result: Any) -> BoundProgram:
    assert isinstance(result, BoundProgram), [str(d) for d in result]
    return result


@pytest.fixture
def node_world(tmp_path: Path) -> Iterator[tuple[Node, World]]:
    with world() as w:
        node = Node(tmp_path / "state", w.host)
        try:
            yield node, w
        finally:
            node.release_pins()


def test_through_the_runner_an_unprovable_address_quarantines_only_its_effect(
    node_world: tuple[Node, World],
) -> None:
    node, w = node_world
    plugin, diagnostics = load_plugin_dir(PLUGIN_DIR)
    assert plugin is not None, diagnostics
    sb = w.sandbox()
    host = w.ipr(w.host)
    parent, _ = w.veth(w.host)
    handle = host_handle(host, parent, Access.CREATE_CHILD, hid="parent-1")
    config = {"ifName": "net1", "mtu": 1500, "up": True, "addresses": ["10.84.0.2/24"]}
    prepared = node.run(
        "t-prep",
        bound(
            bind_program(
                plugin, "prepare", call(config, "t-prep", allocation={"parent": (handle,)})
            )
        ),
    )
    ref = node.pin("t", sb)
    program = bound(
        bind_program(
            plugin, "connect", call(config, "t-conn", prepared=dict(prepared.exports), sandbox=ref)
        )
    )
    node.run("t-conn", program, sandbox=ref)
    time.sleep(STAMP_TICK)
    tenant(sb, "addr", "del", "10.84.0.2/24", "dev", "net1")
    tenant(sb, "addr", "add", "10.84.0.2/24", "dev", "net1")
    with node.runner() as r:
        result = r.cleanup("t-conn")
        op = r.journal.load_operation("t-conn")
    assert result.state.value == "Quarantined", result
    assert op is not None
    states = {e.id: (e.state, e.failure.code if e.failure else None) for e in op.effects}
    assert states["addr4"] == (EffectState.QUARANTINED, "E_ADDRESS_NOT_OWNED")
    assert states["addr6"][0] is EffectState.UNDONE
    assert states["routes"][0] is EffectState.UNDONE
    # the link itself is ours (proven by its identity) and is deleted with whatever is on it
    assert states["create"][0] is EffectState.UNDONE
    assert by_name(w.ipr(sb), "net1") is None
    node.cleanup("t-prep")


def test_a_neighbour_entry_changed_by_the_tenant_is_left_and_quarantined() -> None:
    with world() as w:
        sb, env, _, _, rts = attached(w)
        done = drive(
            env,
            "ip/neighbours/v1",
            {"interface": (rts.output(),)},
            {
                "neighbours": [
                    {"address": "10.70.0.1", "lladdr": "02:00:00:00:70:01"},
                    {"address": "fd70::1", "lladdr": "02:00:00:00:70:01"},
                ]
            },
            "op",
            "neigh",
        )
        tenant(sb, "neigh", "replace", "10.70.0.1", "lladdr", "02:00:00:00:70:99", "nud",
               "permanent", "dev", "net1")  # fmt: skip
        assert refused(done) == "E_NEIGHBOUR_NOT_OWNED"
        left = {n["dst"]: n.get("lladdr") for n in ip_json(sb, "neigh", "show", "dev", "net1")}
        assert left.get("10.70.0.1") == "02:00:00:00:70:99"  # the tenant's
        assert "fd70::1" not in left  # ours: deleted


def test_a_rule_changed_by_the_tenant_is_left_and_quarantined() -> None:
    with world() as w:
        sb, env, _, _, rts = attached(w)
        done = drive(
            env,
            "ip/rules/v1",
            {"interface": (rts.output(),)},
            {
                "rules": [
                    {"priority": 900, "from": "10.70.0.0/24", "table": 100},
                    {"priority": 901, "from": "fd70::/64", "table": 100, "iif": True},
                ]
            },
            "op",
            "rules",
        )
        tenant(sb, "rule", "del", "priority", "900")
        tenant(sb, "rule", "add", "priority", "900", "from", "10.70.0.0/24", "table", "101",
               "protocol", "static")  # fmt: skip
        assert refused(done) == "E_RULE_NOT_OWNED"
        assert [r["table"] for r in ip_json(sb, "-4", "rule") if r["priority"] == 900] == ["101"]
        assert not [r for r in ip_json(sb, "-6", "rule") if r["priority"] == 901]
