"""Undo of effects recorded in an earlier boot, and of effects whose namespace was destroyed
under the agent (issue 13, deliverable 2), against the real kernel.

An earlier boot's records are the records an agent wrote then: every namespace identity in
them carries that boot's id. The test writes real effects, then rewrites the boot id in
their before-images and outputs (what the journal of the previous boot holds) and destroys
the sandbox namespace (what the reboot did). Undo must then touch nothing of this boot:
the sandbox's links died with it, and a recorded ifindex means nothing any more — before
this change link-configure's undo raised E_NETNS_STALE (quarantine) and link-move compared
the old ifindex against whatever holds it in this boot.
The hardware half (a device the kernel returns to the host, found by its parent device
after a reboot) runs on netdevsim in the kernel lab: tests/kernel_lab/test_lab_earlier_boot.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from dmn.host.rtnetlink.links import by_name
from dmn.opcodes.executor import EffectContext, RecoveryObservation
from dmn.vocabulary.handles import Handle
from dmn.vocabulary.terms import Access
from tests.kernel.scratch import scratch_netns
from tests.kernel.world import EXECUTORS, drive, host_handle, world
from tests.waiting import wait_for

pytestmark = [pytest.mark.netns, pytest.mark.adversarial]

EARLIER = "00000000-0000-4000-8000-0000000e0b07"


def of_earlier_boot(value: Any) -> Any:
    """``value`` (a before-image, JSON) as the journal of an earlier boot holds it."""
    if isinstance(value, dict):
        return {k: EARLIER if k == "bootID" else of_earlier_boot(v) for k, v in value.items()}
    if isinstance(value, list):
        return [of_earlier_boot(v) for v in value]
    return value


def _earlier_handle(handle: Handle) -> Handle:
    scope = handle.scope
    if scope.netns is None:
        return handle
    netns = type(scope.netns)(scope.netns.dev, scope.netns.inode, EARLIER)
    return Handle(
        id=handle.id,
        type=handle.type,
        inventory_id=handle.inventory_id,
        scope=type(scope)(scope.kind, netns),
        accesses=handle.accesses,
        link_type=handle.link_type,
        provenance=handle.provenance,
        observations=handle.observations,
    )


def _wait_gone(ipr: Any, name: str) -> None:
    """Until the veth peer of a root that died with its sandbox is gone too."""
    wait_for(lambda: by_name(ipr, name) is None, timeout=10.0, what=f"{name} gone")


def test_effects_of_an_earlier_boot_undo_without_touching_this_boot() -> None:
    with world() as w:
        host = w.ipr(w.host)
        parent, _ = w.veth(w.host)
        root, peer = w.veth(w.host)
        with scratch_netns("dmeb") as sandbox:
            env = w.env(sandbox)
            moved = drive(
                env,
                "linux/link-move/v1",
                {"interface": (host_handle(host, root, Access.EXCLUSIVE_CONFIGURE),)},
                {"ifName": "net2"},
                effect="move",
            )
            configured = drive(
                env,
                "linux/link-configure/v1",
                {"interface": (moved.output(),)},
                {"mtu": 1400, "up": True},
                effect="conf",
            )
            tuned = drive(
                env,
                "sysctl/interface/v1",
                {"interface": (configured.output(),)},
                {"ipv4RpFilter": 2, "ipv6AcceptRa": 0},
                effect="sysctl",
            )
            offloaded = drive(
                env,
                "ethtool/features/v1",
                {"interface": (tuned.output(),)},
                {"features": {"rx-gro": True}},
                effect="offloads",
            )
            held = drive(
                env,
                "share/hold-parent/v1",
                {"parent": (host_handle(host, parent, Access.CREATE_CHILD),)},
                {"childKind": "macvlan", "mode": "bridge"},
                effect="hold",
            )
            child = drive(
                env,
                "linux/create-macvlan/v2",
                {"parent": (held.output("parent"),)},
                {"ifName": "net1", "mode": "bridge", "mtu": 1500, "up": True},
                effect="create",
            )
            env.close()
        _wait_gone(host, peer)  # the kernel tears a dead namespace down asynchronously
        # the reboot: the sandbox is gone; this boot's host has its own links and ifindexes
        baseline = w.snapshot(w.host)
        later = w.env()
        for done in (child, offloaded, tuned, configured, moved):
            ctx = EffectContext(
                "op1",
                done.ctx.effect_id,
                {p: tuple(_earlier_handle(h) for h in hs) for p, hs in done.ctx.inputs.items()},
                done.ctx.parameters,
                later,
            )
            before = of_earlier_boot(done.before)
            outputs = {
                p: tuple(_earlier_handle(h) for h in hs) for p, hs in done.observed.outputs.items()
            }
            assert EXECUTORS[done.kind].recover(ctx, before) in (
                RecoveryObservation.NOT_APPLIED,
                RecoveryObservation.UNCERTAIN,
            )
            EXECUTORS[done.kind].undo(ctx, before, outputs)  # no error: nothing of ours left
        assert w.snapshot(w.host) == baseline


def test_link_move_of_a_destroyed_sandbox_this_boot_is_a_noop_for_a_virtual_root() -> None:
    """Same boot, the sandbox namespace destroyed under the agent: the veth root died with
    it; undo and recovery report it gone and touch nothing else."""
    with world() as w:
        host = w.ipr(w.host)
        root, peer = w.veth(w.host)
        with scratch_netns("dmeb") as sandbox:
            env = w.env(sandbox)
            moved = drive(
                env,
                "linux/link-move/v1",
                {"interface": (host_handle(host, root, Access.EXCLUSIVE_CONFIGURE),)},
                {"ifName": "net2"},
            )
            env.close()
        _wait_gone(host, peer)
        baseline = w.snapshot(w.host)
        later = w.env()
        ctx = EffectContext("op1", "e1", moved.ctx.inputs, moved.ctx.parameters, later)
        EXECUTORS[moved.kind].undo(ctx, moved.before, moved.observed.outputs)
        assert w.snapshot(w.host) == baseline
