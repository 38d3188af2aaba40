"""A hostile tenant inside its own sandbox, against the real kernel (issue 13, deliverable 1).

The tenant has CAP_NET_ADMIN in its sandbox: it renames links, sets aliases and MACs,
creates links (at any free ifindex), and moves links into namespaces of its own. Each test
stages one attack that worked while ownership was read from names, aliases and MACs —
undo then moved or deleted the tenant's (or the runtime's) links — and shows that undo now
acts on the recorded identity only (namespace + ifindex + kind + lower/hardware facts), or
quarantines the effect with a reason code and touches nothing. The bond cases
(attach-master) need the bonding module and run in the kernel lab
(``tests/kernel_lab/test_lab_tenant_identity.py``).

Every namespace is a scratch namespace of the test (removed on exit, even on failure).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dmn.engine.journal import EffectState
from dmn.host.rtnetlink.links import by_index, by_name
from dmn.opcodes.executor import ExecutorError
from dmn.vocabulary.terms import Access
from tests.kernel.node import Node, bind, call
from tests.kernel.scratch import netns_path, scratch_netns
from tests.kernel.world import EXECUTORS, World, drive, host_handle, link, world

pytestmark = [pytest.mark.netns, pytest.mark.adversarial]

MOVE = "linux/link-move/v1"
HOLD = "share/hold-parent/v1"
MACVLAN_V2 = "linux/create-macvlan/v2"
HOST_CONFIG = {"mode": "kernel", "ifName": "net2", "mtu": 1500, "up": True}


@pytest.fixture
def node_world(tmp_path: Path) -> Iterator[tuple[Node, World]]:
    with world() as w:
        node = Node(tmp_path / "state", w.host)
        try:
            yield node, w
        finally:
            node.release_pins()


def _host_cni(node: Node, w: World, root: str, sandbox: str) -> str:
    """Prepare and connect host-cni for ``root`` into ``sandbox`` (as ``net2``); the
    connect operation id."""
    host = w.ipr(w.host)
    handle = host_handle(host, root, Access.EXCLUSIVE_CONFIGURE)
    prepared = node.run(
        "op-prep",
        bind(
            "host-cni", "prepare", call(HOST_CONFIG, "op-prep", allocation={"interface": (handle,)})
        ),
    )
    ref = node.pin("att", sandbox)
    program = bind(
        "host-cni",
        "connect",
        call(HOST_CONFIG, "op-conn", prepared=dict(prepared.exports), sandbox=ref),
    )
    node.run("op-conn", program, sandbox=ref)
    return "op-conn"


def _impostor(sb: Any, name: str, alias: str, mac: str, index: int = 0) -> int:
    """The tenant's veth named ``name`` carrying our alias and the NIC's MAC."""
    extra = {"index": index} if index else {}
    sb.link("add", ifname=name, kind="veth", peer="tpeer0", **extra)
    idx = sb.link_lookup(ifname=name)[0]
    sb.link("set", index=idx, ifalias=alias, address=mac)
    return int(idx)


def test_renamed_root_and_a_veth_carrying_our_alias_the_real_root_comes_home(
    node_world: tuple[Node, World],
) -> None:
    """The reported attack: inside the sandbox the tenant renames the real ``net2`` and
    creates a veth named ``net2`` with our alias and the NIC's MAC. Removal used to move
    the tenant's veth into the host under the root's name and leave the real root in the
    sandbox, recording the attachment removed. Now the root is found at its recorded
    ifindex and returned; the tenant's veth stays in the tenant's sandbox."""
    node, w = node_world
    sandbox = w.sandbox()
    host = w.ipr(w.host)
    root, _ = w.veth(w.host)
    original = link(host, root)
    op = _host_cni(node, w, root, sandbox)
    sb = w.ipr(sandbox)
    real = link(sb, "net2")
    sb.link("set", index=real.index, state="down")
    sb.link("set", index=real.index, ifname="real0")
    _impostor(sb, "net2", real.alias, real.mac)

    node.cleanup(op)

    back = link(host, root)
    assert (back.index, back.kind, back.mac, back.alias) == (
        original.index,
        original.kind,
        original.mac,
        original.alias,
    )
    assert by_name(sb, "real0") is None  # the real root left the sandbox
    tenant = link(sb, "net2")  # the tenant's veth was not touched
    assert tenant.kind == "veth" and tenant.index != real.index
    assert by_name(host, "tpeer0") is None


def test_root_swapped_for_an_impostor_at_its_ifindex_is_quarantined_untouched(
    node_world: tuple[Node, World],
) -> None:
    """The tenant moves the real root into a namespace of its own and creates, at the very
    ifindex, a veth with our alias, name and MAC but another lower device. Nothing proves
    it is ours: the move's undo is quarantined with E_IDENTITY_MISMATCH, nothing is moved
    into the host, and the effect keeps the operation Quarantined."""
    node, w = node_world
    sandbox = w.sandbox()
    root, _ = w.veth(w.host)
    op = _host_cni(node, w, root, sandbox)
    sb = w.ipr(sandbox)
    real = link(sb, "net2")
    with scratch_netns("dmtn") as tenant_ns:
        sb.link("set", index=real.index, net_ns_fd=netns_path(tenant_ns))
        _impostor(sb, "net2", real.alias, real.mac, index=real.index)
        before = w.snapshot(w.host)

        with node.runner() as r:
            result = r.cleanup(op)
            record = r.journal.load_operation(op)
        assert result.state.value == "Quarantined" and "move" in result.quarantined
        assert record is not None
        move = next(e for e in record.effects if e.id == "move")
        assert move.state is EffectState.QUARANTINED
        assert move.failure is not None and move.failure.code == "E_IDENTITY_MISMATCH"
        assert w.snapshot(w.host) == before  # nothing arrived in or left the host
        assert link(sb, "net2").index == real.index  # the impostor stays where it was
        # the kernel returns the real root to the host only when the tenant's namespace dies


def test_created_child_undo_deletes_only_its_own_link_never_the_runtime_eth0() -> None:
    """Created-link undo used to delete by name and alias: the tenant renames our macvlan
    and gives the runtime's ``eth0`` (a veth whose peer is in the host) our alias and our
    child's name; undo deleted ``eth0`` — and with it its host peer. Now undo deletes the
    link at the recorded ifindex with the recorded kind and lower, i.e. our child only."""
    with world() as w:
        sandbox = w.sandbox()
        host, sb = w.ipr(w.host), w.ipr(sandbox)
        parent, _ = w.veth(w.host)
        host.link("add", ifname="cnihost0", kind="veth", peer="eth0")
        host.link("set", index=host.link_lookup(ifname="eth0")[0], net_ns_fd=netns_path(sandbox))
        env = w.env(sandbox)
        held = drive(
            env,
            HOLD,
            {"parent": (host_handle(host, parent, Access.CREATE_CHILD),)},
            {"childKind": "macvlan", "mode": "bridge"},
            effect="hold",
        )
        child = drive(
            env,
            MACVLAN_V2,
            {"parent": (held.output("parent"),)},
            {"ifName": "net1", "mode": "bridge", "mtu": 1500, "up": True},
            effect="create",
        )
        ours = link(sb, "net1")
        # the tenant: our child becomes "mine" without alias; eth0 becomes "net1" with it
        sb.link("set", index=ours.index, state="down")
        sb.link("set", index=ours.index, ifname="mine", ifalias="")
        eth0 = link(sb, "eth0")
        sb.link("set", index=eth0.index, state="down")
        sb.link("set", index=eth0.index, ifname="net1", ifalias=ours.alias)

        child.undo()

        assert by_index(sb, ours.index) is None  # our child is gone
        assert link(sb, "net1").index == eth0.index  # the runtime's link survives
        assert by_name(host, "cnihost0") is not None  # and so does its host peer


def test_a_record_without_identity_is_quarantined_not_guessed() -> None:
    """A before-image written before identities were journaled (an older agent) proves
    nothing about the link in the sandbox: undo refuses with E_IDENTITY_UNRECORDED (the
    runner quarantines the effect) and the link stays where it is."""
    with world() as w:
        sandbox = w.sandbox()
        host = w.ipr(w.host)
        root, _ = w.veth(w.host)
        env = w.env(sandbox)
        moved = drive(
            env,
            "linux/link-move/v1",
            {"interface": (host_handle(host, root, Access.EXCLUSIVE_CONFIGURE),)},
            {"ifName": "net2"},
        )
        old = {k: v for k, v in moved.before.items() if k != "identity"}
        with pytest.raises(ExecutorError) as err:
            EXECUTORS["linux/link-move/v1"].undo(moved.ctx, old, moved.observed.outputs)
        assert err.value.code == "E_IDENTITY_UNRECORDED"
        assert link(w.ipr(sandbox), "net2").mac == moved.before["original"]["mac"]
        assert by_name(host, root) is None
