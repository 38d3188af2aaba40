"""linux/* and share/* executors against the host kernel (veth, macvlan), in scratch namespaces.

Each test builds a stand-in host namespace and sandboxes, drives effects the way the runner
does, proves the result with traffic, undoes, and proves the host is exactly as before.
"""

from __future__ import annotations

import pytest

from dmn.host.rtnetlink.links import by_alias, by_name
from dmn.opcodes.executor import EffectContext, ExecutorError, RecoveryObservation
from dmn.vocabulary.terms import Access
from tests.kernel.scratch import netns_path
from tests.kernel.world import (
    EXECUTORS,
    add_address,
    drive,
    host_handle,
    link,
    ping,
    world,
)

pytestmark = pytest.mark.netns

MOVE = "linux/link-move/v1"
CONFIGURE = "linux/link-configure/v1"
HOLD = "share/hold-parent/v1"
MACVLAN = "linux/create-macvlan/v1"


def test_move_configure_and_return_restores_the_root_exactly() -> None:
    with world() as w:
        sandbox, peer_ns = w.sandbox(), w.sandbox()
        host = w.ipr(w.host)
        root, peer = w.veth(w.host, mtu=1400)
        host.link("set", index=host.link_lookup(ifname=root)[0], ifalias="site-uplink-7")
        host.addr("add", index=host.link_lookup(ifname=root)[0], address="192.0.2.9", prefixlen=28)
        host.link("set", index=host.link_lookup(ifname=peer)[0], net_ns_fd=peer_ns)
        add_address(w.ipr(peer_ns), peer, "10.77.0.1/24")
        baseline = w.snapshot(w.host)
        original = link(host, root)

        env = w.env(sandbox)
        moved = drive(
            env,
            MOVE,
            {"interface": (host_handle(host, root, Access.EXCLUSIVE_CONFIGURE),)},
            {"ifName": "net1"},
        )
        out = moved.output()
        assert out.scope.kind.value == "sandbox" and out.observations["ifName"] == "net1"
        assert by_name(host, root) is None
        configured = drive(
            env, CONFIGURE, {"interface": (out,)}, {"mtu": 1300, "up": True}, effect="e2"
        )
        sb = w.ipr(sandbox)
        in_sb = link(sb, "net1")
        assert (in_sb.mtu, in_sb.up, in_sb.mac, in_sb.alias) == (
            1300,
            True,
            original.mac,
            "dmn:op1:e1",
        )
        add_address(sb, "net1", "10.77.0.2/24")
        assert ping(sandbox, "10.77.0.1")

        configured.undo()
        moved.undo()
        assert by_name(sb, "net1") is None
        assert w.snapshot(w.host) == baseline
        back = link(host, root)
        assert (back.alias, back.mtu, back.mac, back.up) == (
            "site-uplink-7",
            1400,
            original.mac,
            True,
        )
        assert back.addresses == original.addresses


def test_two_macvlan_shares_of_one_parent_talk_and_leave_the_parent_untouched() -> None:
    with world() as w:
        sb1, sb2 = w.sandbox(), w.sandbox()
        host = w.ipr(w.host)
        parent, _ = w.veth(w.host)
        baseline = w.snapshot(w.host)
        env1, env2 = w.env(sb1), w.env(sb2)
        done = []
        for i, (env, sb, addr) in enumerate(
            ((env1, sb1, "10.78.0.1/24"), (env2, sb2, "10.78.0.2/24"))
        ):
            op = f"share{i}"
            held = drive(
                env,
                HOLD,
                {"parent": (host_handle(host, parent, Access.CREATE_CHILD),)},
                {"childKind": "macvlan", "mode": "bridge"},
                operation=op,
                effect="hold",
            )
            child = drive(
                env,
                MACVLAN,
                {"parent": (held.output("parent"),)},
                {"mode": "bridge", "mtu": 1500},
                operation=op,
                effect="child",
            )
            assert child.output().scope.kind.value == "host"
            assert by_alias(host, f"dmn:{op}:child")[0].kind == "macvlan"
            moved = drive(
                env,
                MOVE,
                {"interface": (child.output(),)},
                {"ifName": "net1"},
                operation=op,
                effect="move",
            )
            add_address(w.ipr(sb), "net1", addr)
            done.append((held, child, moved))
        assert ping(sb1, "10.78.0.2") and ping(sb2, "10.78.0.1")
        assert link(host, parent).mtu == 1500

        # cleanup of share 0 removes only share 0's child
        held, child, moved = done[0]
        moved.undo()
        child.undo()
        held.undo()
        assert by_name(w.ipr(sb1), "net1") is None
        assert by_name(w.ipr(sb2), "net1") is not None
        for held, child, moved in done[1:]:
            moved.undo()
            child.undo()
            held.undo()
        assert w.snapshot(w.host) == baseline


@pytest.mark.parametrize("moved", [False, True], ids=["child-in-host", "child-in-sandbox"])
def test_ipvlan_share_on_a_macvlan_parent_is_refused_before_mutation(moved: bool) -> None:
    with world() as w:
        sandbox = w.sandbox()
        host = w.ipr(w.host)
        parent, _ = w.veth(w.host)
        env = w.env(sandbox, pins=(sandbox,))
        held = drive(
            env,
            HOLD,
            {"parent": (host_handle(host, parent, Access.CREATE_CHILD),)},
            {"childKind": "macvlan", "mode": "bridge"},
            effect="hold",
        )
        child = drive(
            env,
            MACVLAN,
            {"parent": (held.output("parent"),)},
            {"mode": "bridge", "mtu": 1500},
            effect="child",
        )
        move = None
        if moved:
            move = drive(
                env, MOVE, {"interface": (child.output(),)}, {"ifName": "net1"}, effect="mv"
            )
        before = w.snapshot(w.host)
        ctx = EffectContext(
            "op2",
            "hold",
            {"parent": (host_handle(host, parent, Access.CREATE_CHILD),)},
            {"childKind": "ipvlan", "mode": "l2"},
            env,
        )
        with pytest.raises(ExecutorError) as err:
            EXECUTORS[HOLD].capture(ctx)
        assert err.value.code == "E_FAMILY_CONFLICT"
        assert w.snapshot(w.host) == before
        if move is not None:
            move.undo()
        child.undo()


def test_macvlan_mtu_above_parent_is_refused() -> None:
    with world() as w:
        host = w.ipr(w.host)
        parent, _ = w.veth(w.host, mtu=1400)
        env = w.env()
        held = drive(
            env,
            HOLD,
            {"parent": (host_handle(host, parent, Access.CREATE_CHILD),)},
            {"childKind": "macvlan", "mode": "bridge"},
            effect="hold",
        )
        ctx = EffectContext(
            "op1",
            "child",
            {"parent": (held.output("parent"),)},
            {"mode": "bridge", "mtu": 1500},
            env,
        )
        with pytest.raises(ExecutorError) as err:
            EXECUTORS[MACVLAN].capture(ctx)
        assert err.value.code == "E_MTU_EXCEEDS_PARENT"


def test_a_foreign_link_with_the_expected_name_is_never_adopted_or_deleted() -> None:
    with world() as w:
        sandbox = w.sandbox()
        host, sb = w.ipr(w.host), w.ipr(sandbox)
        root, _ = w.veth(w.host)
        foreign, _ = w.veth(sandbox)
        sb.link("set", index=sb.link_lookup(ifname=foreign)[0], ifname="net1")
        env = w.env(sandbox)
        ctx = EffectContext(
            "op1",
            "move",
            {"interface": (host_handle(host, root, Access.EXCLUSIVE_CONFIGURE),)},
            {"ifName": "net1"},
            env,
        )
        with pytest.raises(ExecutorError) as err:
            EXECUTORS[MOVE].capture(ctx)
        assert err.value.code == "E_NAME_TAKEN"
        # a macvlan effect that never ran: undo and recovery find nothing of ours and touch nothing
        held = drive(
            env,
            HOLD,
            {"parent": (host_handle(host, root, Access.CREATE_CHILD),)},
            {"childKind": "macvlan", "mode": "bridge"},
            effect="hold",
        )
        mctx = EffectContext(
            "op1",
            "child",
            {"parent": (held.output("parent"),)},
            {"mode": "bridge", "mtu": 1500},
            env,
        )
        before = EXECUTORS[MACVLAN].capture(mctx)
        host.link(
            "add",
            ifname="net1",
            kind="macvlan",
            link=host.link_lookup(ifname=root)[0],
            macvlan_mode="bridge",
        )
        assert EXECUTORS[MACVLAN].recover(mctx, before) is RecoveryObservation.NOT_APPLIED
        EXECUTORS[MACVLAN].undo(mctx, before, {})
        assert by_name(host, "net1") is not None and by_name(sb, "net1") is not None


def test_recovery_observes_each_side_of_the_mutation() -> None:
    with world() as w:
        sandbox = w.sandbox()
        host = w.ipr(w.host)
        root, _ = w.veth(w.host)
        env = w.env(sandbox)
        ex = EXECUTORS[MOVE]
        ctx = EffectContext(
            "op1",
            "move",
            {"interface": (host_handle(host, root, Access.EXCLUSIVE_CONFIGURE),)},
            {"ifName": "net1"},
            env,
        )
        before = ex.capture(ctx)
        assert ex.recover(ctx, before) is RecoveryObservation.NOT_APPLIED
        ex.apply(ctx, before)
        assert ex.recover(ctx, before) is RecoveryObservation.APPLIED
        ex.undo(ctx, before, {})
        assert ex.recover(ctx, before) is RecoveryObservation.NOT_APPLIED
        ex.undo(ctx, before, {})  # idempotent
        assert by_name(host, root) is not None


def test_a_root_absent_from_the_host_is_found_in_a_pinned_namespace() -> None:
    with world() as w:
        sandbox, elsewhere = w.sandbox(), w.sandbox()
        host = w.ipr(w.host)
        root, _ = w.veth(w.host)
        original = link(host, root)
        moved = drive(
            w.env(sandbox),
            MOVE,
            {"interface": (host_handle(host, root, Access.EXCLUSIVE_CONFIGURE),)},
            {"ifName": "net1"},
        )
        # someone moved it on to another namespace the journal has pinned
        sb = w.ipr(sandbox)
        sb.link("set", index=sb.link_lookup(ifname="net1")[0], net_ns_fd=elsewhere)
        # a later agent (no sandbox in this call) cleans up from the before-image and the pins
        later = w.env(None, pins=(sandbox, elsewhere))
        EXECUTORS[MOVE].undo(
            EffectContext("op1", "e1", moved.ctx.inputs, moved.ctx.parameters, later),
            moved.before,
            {},
        )
        back = link(host, root)
        assert (back.mac, back.alias, back.up) == (original.mac, original.alias, original.up)
        assert by_name(w.ipr(elsewhere), "net1") is None


def test_a_root_back_in_the_host_under_its_sandbox_name_is_restored() -> None:
    with world() as w:
        sandbox = w.sandbox()
        host = w.ipr(w.host)
        root, _ = w.veth(w.host)
        host.link("set", index=host.link_lookup(ifname=root)[0], ifalias="orig")
        original = link(host, root)
        moved = drive(
            w.env(sandbox),
            MOVE,
            {"interface": (host_handle(host, root, Access.EXCLUSIVE_CONFIGURE),)},
            {"ifName": "net1"},
        )
        # as when a sandbox dies and a physical device falls back to the host namespace
        sb = w.ipr(sandbox)
        sb.link("set", index=sb.link_lookup(ifname="net1")[0], net_ns_fd=netns_path(w.host))
        assert link(host, "net1").alias == "dmn:op1:e1"
        moved.undo()
        back = link(host, root)
        assert (back.mac, back.alias, back.up, back.mtu) == (
            original.mac,
            "orig",
            original.up,
            original.mtu,
        )
        assert by_name(host, "net1") is None


def test_a_foreign_link_under_the_journaled_nonce_name_is_refused_and_kept() -> None:
    """apply does not pre-check the nonce name with a read: the kernel's exclusive create
    refuses it atomically, reported as E_NAME_TAKEN; the squatter is neither adopted nor
    deleted by recovery or undo (its kind is not the recorded one)."""
    with world() as w:
        host = w.ipr(w.host)
        root, _ = w.veth(w.host)
        env = w.env()
        held = drive(
            env,
            HOLD,
            {"parent": (host_handle(host, root, Access.CREATE_CHILD),)},
            {"childKind": "macvlan", "mode": "bridge"},
            effect="hold",
        )
        mctx = EffectContext(
            "op1",
            "child",
            {"parent": (held.output("parent"),)},
            {"mode": "bridge", "mtu": 1500},
            env,
        )
        before = EXECUTORS[MACVLAN].capture(mctx)
        host.link("add", ifname=before["nonce"], kind="veth", peer=before["nonce"][:-1] + "p")
        with pytest.raises(ExecutorError) as err:
            EXECUTORS[MACVLAN].apply(mctx, before)
        assert err.value.code == "E_NAME_TAKEN"
        assert EXECUTORS[MACVLAN].recover(mctx, before) is RecoveryObservation.NOT_APPLIED
        EXECUTORS[MACVLAN].undo(mctx, before, {})
        squatter = by_name(host, before["nonce"])
        assert squatter is not None and squatter.kind == "veth" and not squatter.alias


def test_a_child_left_unclaimed_by_a_crash_is_adopted_only_by_its_recorded_identity() -> None:
    """The one window no journal boundary covers: the kernel created the child at the
    journaled ifindex under the journaled nonce name, the claim (alias) never ran. Recovery
    adopts it only when the recorded ifindex holds a link of the recorded kind and lower; a
    re-run apply claims it, never makes a second child; undo deletes it. A child under our
    nonce name elsewhere is not ours (ignored); a child of another parent at our ifindex is
    not ours either and is refused (E_IDENTITY_MISMATCH: quarantined, never deleted)."""
    with world() as w:
        host = w.ipr(w.host)
        root, other = w.veth(w.host)
        env = w.env()
        held = drive(
            env,
            HOLD,
            {"parent": (host_handle(host, root, Access.CREATE_CHILD),)},
            {"childKind": "macvlan", "mode": "bridge"},
            effect="hold",
        )
        ctx = EffectContext(
            "op1",
            "child",
            {"parent": (held.output("parent"),)},
            {"mode": "bridge", "mtu": 1500},
            env,
        )
        ex = EXECUTORS[MACVLAN]
        before = ex.capture(ctx)
        nonce, index = before["nonce"], before["identity"]["index"]
        # our nonce name at another ifindex: a label, not a proof
        host.link("add", ifname=nonce, kind="macvlan", link=host.link_lookup(ifname=root)[0])
        assert ex.recover(ctx, before) is RecoveryObservation.NOT_APPLIED
        ex.undo(ctx, before, {})
        assert by_name(host, nonce) is not None  # kept
        host.link("del", index=host.link_lookup(ifname=nonce)[0])
        # our ifindex, our nonce name, but a child of the *other* veth end: not ours
        host.link(
            "add",
            ifname=nonce,
            index=index,
            kind="macvlan",
            link=host.link_lookup(ifname=other)[0],
            macvlan_mode="bridge",
        )
        for step in (ex.recover, lambda c, b: ex.undo(c, b, {})):
            with pytest.raises(ExecutorError) as err:
                step(ctx, before)
            assert err.value.code == "E_IDENTITY_MISMATCH"
        assert by_name(host, nonce) is not None  # kept
        host.link("del", index=index)
        # the real crash window: created at our ifindex on our parent, never claimed
        host.link(
            "add",
            ifname=nonce,
            index=index,
            kind="macvlan",
            link=host.link_lookup(ifname=root)[0],
            macvlan_mode="bridge",
            mtu=1500,
        )
        ex.apply(ctx, before)  # a re-run claims it
        children = [x for x in by_alias(host, ctx.alias)]
        assert len(children) == 1 and children[0].name == nonce
        assert ex.observe(ctx, before).postconditions_ok
        assert ex.recover(ctx, before) is RecoveryObservation.APPLIED
        ex.undo(ctx, before, {})
        assert by_name(host, nonce) is None
        assert ex.recover(ctx, before) is RecoveryObservation.NOT_APPLIED


def test_link_configure_recovery_and_undo_on_each_side() -> None:
    with world() as w:
        sandbox = w.sandbox()
        host = w.ipr(w.host)
        root, _ = w.veth(w.host, mtu=1400)
        env = w.env(sandbox)
        moved = drive(
            env,
            MOVE,
            {"interface": (host_handle(host, root, Access.EXCLUSIVE_CONFIGURE),)},
            {"ifName": "net1"},
        )
        ex = EXECUTORS[CONFIGURE]
        ctx = EffectContext(
            "op1", "e2", {"interface": (moved.output(),)}, {"mtu": 1300, "up": True}, env
        )
        before = ex.capture(ctx)
        assert ex.recover(ctx, before) is RecoveryObservation.NOT_APPLIED
        sb = w.ipr(sandbox)
        idx = sb.link_lookup(ifname="net1")[0]
        sb.link("set", index=idx, mtu=1350)  # half-way / someone else: not ours to judge
        assert ex.recover(ctx, before) is RecoveryObservation.UNCERTAIN
        ex.apply(ctx, before)
        assert ex.observe(ctx, before).postconditions_ok
        assert ex.recover(ctx, before) is RecoveryObservation.APPLIED
        ex.undo(ctx, before, {})
        back = link(sb, "net1")
        assert (back.mtu, back.up) == (1400, False)
        assert ex.recover(ctx, before) is RecoveryObservation.NOT_APPLIED
        moved.undo()
        assert link(host, root).mtu == 1400
