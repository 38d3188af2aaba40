"""``linux/create-macvlan/v2``: a child of a held host parent created directly in the verified
sandbox (issue 15), against the real kernel in scratch namespaces.

Covers the forward path with traffic, in-place deletion, the crash window between the
kernel's create and the claim (found by the recorded identity in the pinned sandbox, under
the final name or an earlier version's nonce name), impostors under the final name that must
never be adopted, and the kernel's atomic refusals (taken name, a parent already serving
another family).
"""

from __future__ import annotations

import pytest

from dmn.host.rtnetlink.links import by_alias, by_name
from dmn.opcodes.executor import EffectContext, ExecutorError, RecoveryObservation
from dmn.vocabulary.terms import Access
from tests.kernel.scratch import scratch_netns
from tests.kernel.world import EXECUTORS, Done, add_address, drive, host_handle, link, ping, world

pytestmark = pytest.mark.netns

HOLD = "share/hold-parent/v1"
MACVLAN = "linux/create-macvlan/v2"
PARAMS = {"ifName": "net1", "mode": "bridge", "mtu": 1500, "up": True}


def _held(w, env, parent: str, op: str = "op1") -> Done:  # type: ignore[no-untyped-def]
    host = w.ipr(w.host)
    return drive(
        env,
        HOLD,
        {"parent": (host_handle(host, parent, Access.CREATE_CHILD),)},
        {"childKind": "macvlan", "mode": "bridge"},
        operation=op,
        effect="hold",
    )


def test_two_children_created_in_their_sandboxes_talk_and_are_deleted_in_place() -> None:
    with world() as w:
        sb1, sb2 = w.sandbox(), w.sandbox()
        host = w.ipr(w.host)
        parent, _ = w.veth(w.host)
        baseline = w.snapshot(w.host)
        done = []
        for i, (sb, addr) in enumerate(((sb1, "10.79.0.1/24"), (sb2, "10.79.0.2/24"))):
            env = w.env(sb)
            held = _held(w, env, parent, op=f"share{i}")
            child = drive(
                env,
                MACVLAN,
                {"parent": (held.output("parent"),)},
                PARAMS,
                operation=f"share{i}",
                effect="create",
            )
            out = child.output()
            assert out.scope.kind.value == "sandbox" and out.observations["ifName"] == "net1"
            got = link(w.ipr(sb), "net1")
            assert (got.kind, got.up, got.mtu, got.alias) == (
                "macvlan",
                True,
                1500,
                f"dmn:share{i}:create",
            )
            assert by_alias(host, f"dmn:share{i}:create") == []  # never on the host
            add_address(w.ipr(sb), "net1", addr)
            done.append((held, child))
        assert ping(sb1, "10.79.0.2") and ping(sb2, "10.79.0.1")
        held, child = done[0]
        child.undo()
        held.undo()
        assert by_name(w.ipr(sb1), "net1") is None
        assert by_name(w.ipr(sb2), "net1") is not None  # the other share's child is untouched
        held, child = done[1]
        child.undo()
        held.undo()
        assert w.snapshot(w.host) == baseline


def test_a_taken_name_in_the_sandbox_is_refused_before_anything_changes() -> None:
    with world() as w:
        sb = w.sandbox()
        parent, _ = w.veth(w.host)
        w.ipr(sb).link("add", ifname="net1", kind="veth", peer="net1p")
        env = w.env(sb)
        held = _held(w, env, parent)
        ctx = EffectContext("op1", "create", {"parent": (held.output("parent"),)}, PARAMS, env)
        with pytest.raises(ExecutorError) as err:
            EXECUTORS[MACVLAN].capture(ctx)
        assert err.value.code == "E_NAME_TAKEN"
        assert link(w.ipr(sb), "net1").kind == "veth"


def test_a_name_taken_after_capture_is_refused_atomically_by_the_kernel() -> None:
    """The child is created under its final name: a link that took the name between capture
    and apply makes the kernel refuse the create (EEXIST → E_NAME_TAKEN); nothing is created
    at the journaled ifindex and the other link is untouched."""
    with world() as w:
        sb = w.sandbox()
        parent, _ = w.veth(w.host)
        env = w.env(sb)
        held = _held(w, env, parent)
        ctx = EffectContext("op1", "create", {"parent": (held.output("parent"),)}, PARAMS, env)
        ex = EXECUTORS[MACVLAN]
        before = ex.capture(ctx)
        w.ipr(sb).link("add", ifname="net1", kind="veth", peer="net1p")
        with pytest.raises(ExecutorError) as err:
            ex.apply(ctx, before)
        assert err.value.code == "E_NAME_TAKEN"
        assert ex.recover(ctx, before) is RecoveryObservation.NOT_APPLIED
        assert link(w.ipr(sb), "net1").kind == "veth"


def test_a_parent_serving_a_bridge_is_refused_atomically_by_the_kernel() -> None:
    """No scan of every pin: the kernel refuses a second receive handler (EBUSY) atomically,
    reported as E_FAMILY_CONFLICT; nothing appears in the sandbox."""
    with world() as w:
        sb = w.sandbox()
        host = w.ipr(w.host)
        parent, _ = w.veth(w.host)
        host.link("add", ifname="dmbr0", kind="bridge")
        host.link(
            "set",
            index=host.link_lookup(ifname=parent)[0],
            master=host.link_lookup(ifname="dmbr0")[0],
        )
        env = w.env(sb)
        held = _held(w, env, parent)
        ctx = EffectContext("op1", "create", {"parent": (held.output("parent"),)}, PARAMS, env)
        ex = EXECUTORS[MACVLAN]
        before = ex.capture(ctx)
        with pytest.raises(ExecutorError) as err:
            ex.apply(ctx, before)
        assert err.value.code == "E_FAMILY_CONFLICT"
        assert ex.recover(ctx, before) is RecoveryObservation.NOT_APPLIED
        assert by_name(w.ipr(sb), before["final"]) is None


def test_a_child_left_unclaimed_in_the_sandbox_is_found_by_its_recorded_identity() -> None:
    """The window inside apply no journal boundary covers: the kernel created the child in
    the pinned sandbox at the journaled ifindex, the claim never ran. Recovery finds it there
    (recorded ifindex, kind, lower on the host), claims it and reports Applied; undo deletes
    it in place — under the final name (this version creates it so) and under a nonce name
    (an earlier version's record). Impostors — another kind under the final name, a macvlan
    at our ifindex whose lower is in the sandbox itself — are never adopted or deleted."""
    with world() as w:
        sb = w.sandbox()
        host, sbr = w.ipr(w.host), w.ipr(sb)
        parent, _ = w.veth(w.host)
        env = w.env(sb)
        held = _held(w, env, parent)
        ctx = EffectContext("op1", "create", {"parent": (held.output("parent"),)}, PARAMS, env)
        ex = EXECUTORS[MACVLAN]
        before = ex.capture(ctx)
        final = before["final"]
        assert before["netns"]["path"].endswith(sb) and final == "net1"
        assert "nonce" not in before  # no name is the proof of a v2 child

        # impostor 1: a tenant's macvlan in the sandbox on a sandbox link with our parent's
        # ifindex would need that index; a veth under the final name stands for "wrong kind"
        sbr.link("add", ifname=final, kind="veth", peer="imp0")
        assert ex.recover(ctx, before) is RecoveryObservation.NOT_APPLIED
        ex.undo(ctx, before, {})
        assert link(sbr, final).kind == "veth"
        sbr.link("del", index=sbr.link_lookup(ifname=final)[0])
        # impostor 2: same kind, at our recorded ifindex, lower inside the sandbox (not on
        # the host): refused as a mismatch (the runner quarantines it), never deleted
        sbr.link("add", ifname="tenant0", kind="veth", peer="tenant1")
        sbr.link(
            "add",
            ifname=final,
            index=before["identity"]["index"],
            kind="macvlan",
            link=sbr.link_lookup(ifname="tenant0")[0],
            macvlan_mode="bridge",
        )
        for step in (ex.recover, lambda c, b: ex.undo(c, b, {})):
            with pytest.raises(ExecutorError) as err:
                step(ctx, before)
            assert err.value.code == "E_IDENTITY_MISMATCH"
        assert link(sbr, final).kind == "macvlan"
        sbr.link("del", index=sbr.link_lookup(ifname=final)[0])

        # the real crash window: created in the sandbox on our host parent, under the final
        # name and up (as apply creates it) or, from an earlier version's record, under a
        # nonce name and down; never claimed
        for name, up in ((final, True), ("dmn0123456789ab", False)):
            host.link(
                "add",
                ifname=name,
                index=before["identity"]["index"],
                kind="macvlan",
                link=int(before["lower"]),
                macvlan_mode="bridge",
                mtu=1500,
                net_ns_fd=sb,
                **({"state": "up"} if up else {}),
            )
            assert ex.recover(ctx, before) is RecoveryObservation.APPLIED
            claimed = link(sbr, "net1")
            assert (claimed.alias, claimed.up) == (ctx.alias, True)
            assert ex.observe(ctx, before).postconditions_ok
            ex.undo(ctx, before, {})
            assert by_name(sbr, "net1") is None and by_name(sbr, name) is None
            assert link(sbr, "tenant0").kind == "veth"  # foreign links survive
            assert ex.recover(ctx, before) is RecoveryObservation.NOT_APPLIED


def test_undo_after_the_sandbox_is_gone_is_a_noop() -> None:
    """The child dies with its sandbox; undo and recovery find nothing and touch nothing."""
    with world() as w:
        parent, _ = w.veth(w.host)
        baseline = w.snapshot(w.host)
        with scratch_netns("dmgone") as sb:
            env = w.env(sb)
            held = _held(w, env, parent)
            child = drive(
                env, MACVLAN, {"parent": (held.output("parent"),)}, PARAMS, effect="create"
            )
            env.close()
        fresh = w.env()
        ctx = EffectContext("op1", "create", child.ctx.inputs, PARAMS, fresh)
        EXECUTORS[MACVLAN].undo(ctx, child.before, child.observed.outputs)
        assert EXECUTORS[MACVLAN].recover(ctx, child.before) is RecoveryObservation.NOT_APPLIED
        assert w.snapshot(w.host) == baseline


def test_the_attach_and_removal_need_no_pyroute2_socket_in_the_sandbox() -> None:
    """The sandbox's handle opens pyroute2 only on demand (``netns.LazyRtnl``): capture,
    apply, observe and undo of a child all go out on the lean reader and writer."""
    with world() as w:
        sb = w.sandbox()
        parent, _ = w.veth(w.host)
        env = w.env(sb)
        held = _held(w, env, parent)
        child = drive(env, MACVLAN, {"parent": (held.output("parent"),)}, PARAMS, effect="create")
        assert link(w.ipr(sb), "net1").alias == "dmn:op1:create"
        child.undo()
        held.undo()
        assert by_name(w.ipr(sb), "net1") is None
        assert env.rtnl(env.sandbox).opened is False
