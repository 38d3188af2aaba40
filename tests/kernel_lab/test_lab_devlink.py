"""``devlink/eswitch-configure/v1`` on a real devlink eswitch: netdevsim built for the lab kernel.

netdevsim's devlink instance lives in the test's stand-in host namespace; the executor speaks
devlink generic netlink there. iproute2's ``devlink -j dev eswitch show`` is the independent
reader. No builtin plugin emits this opcode (the agent's eswitch manager is not built), so the
journal-level test runs a one-effect program through the real runner and RocksDB journal and
SIGKILLs it at every boundary.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dmn.engine.bound import BoundEffect, BoundProgram
from dmn.opcodes.executor import EffectContext, ExecutorError, RecoveryObservation
from dmn.opcodes.linux.netns import LinkEnvironment, NamespaceRef
from dmn.vocabulary.handles import Handle, Provenance, Scope
from dmn.vocabulary.terms import Access, HandleType, ScopeKind
from tests.crash_fork_server import CrashForkServer
from tests.kernel.node import Node
from tests.kernel.scratch import netns_path
from tests.kernel.world import EXECUTORS, World, world
from tests.kernel_lab import netdevsim

pytestmark = pytest.mark.kernel_lab

ESWITCH = "devlink/eswitch-configure/v1"
MAX_BOUNDARIES = 30


def mode(dev: netdevsim.NetdevsimPf) -> str:
    out = subprocess.run(
        ["ip", "netns", "exec", dev.netns, "devlink", "-j", "dev", "eswitch", "show", dev.devlink],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    return str(json.loads(out)["dev"][dev.devlink]["mode"])


def pf_handle(dev: netdevsim.NetdevsimPf, **override: Any) -> Handle:
    observations: dict[str, Any] = {"devlinkHandle": dev.devlink}
    observations.update(override)
    return Handle(
        id=f"pf-{dev.dev_id}",
        type=HandleType.PCI_FUNCTION,
        inventory_id=dev.devlink,
        scope=Scope(ScopeKind.HOST),
        accesses=frozenset({Access.READ, Access.EXCLUSIVE_CONFIGURE}),
        provenance=Provenance(claim_uid="eswitch-manager", request="pf", device=dev.devlink),
        observations=observations,
    )


def _env(w: World) -> LinkEnvironment:
    env = LinkEnvironment(host=NamespaceRef.at(netns_path(w.host)))
    w.stack.callback(env.close)
    return env


@pytest.fixture
def pf() -> Iterator[tuple[World, netdevsim.NetdevsimPf]]:
    with world() as w, netdevsim.netdevsim_pf(w.host, vfs=2) as dev:
        yield w, dev


def test_switchdev_and_back_exactly(pf: tuple[World, netdevsim.NetdevsimPf]) -> None:
    w, dev = pf
    assert mode(dev) == "legacy" and netdevsim.representors(dev, timeout=1) == {}
    ex = EXECUTORS[ESWITCH]
    ctx = EffectContext(
        "op-es", "eswitch", {"function": (pf_handle(dev),)}, {"mode": "switchdev"}, _env(w)
    )
    before = ex.capture(ctx)
    assert before["mode"] == "legacy"
    assert ex.recover(ctx, before) is RecoveryObservation.NOT_APPLIED
    ex.apply(ctx, before)
    observed = ex.observe(ctx, before)
    assert observed.postconditions_ok, observed.detail
    assert mode(dev) == "switchdev"
    assert set(netdevsim.representors(dev)) == {"pf0vf0", "pf0vf1"}
    assert ex.recover(ctx, before) is RecoveryObservation.APPLIED
    ex.undo(ctx, before, observed.outputs)
    assert mode(dev) == "legacy" and netdevsim.representors(dev, timeout=1) == {}
    ex.undo(ctx, before, observed.outputs)  # idempotent
    assert mode(dev) == "legacy"


@pytest.mark.adversarial
def test_an_undrained_eswitch_and_unknown_instances_are_refused(
    pf: tuple[World, netdevsim.NetdevsimPf],
) -> None:
    w, dev = pf
    ex = EXECUTORS[ESWITCH]
    env = _env(w)
    netdevsim.switchdev(dev)
    reps = netdevsim.representors(dev)
    ifname = reps["pf0vf1"][0]
    subprocess.run(["ip", "-n", w.host, "link", "set", ifname, "up"], check=True)
    ctx = EffectContext("o", "e", {"function": (pf_handle(dev),)}, {"mode": "legacy"}, env)
    with pytest.raises(ExecutorError) as err:
        ex.capture(ctx)
    assert err.value.code == "E_RESET_DOMAIN_BUSY"
    assert mode(dev) == "switchdev"
    # a tenant's port comes up between capture and undo: undo refuses, nothing is written
    subprocess.run(["ip", "-n", w.host, "link", "set", ifname, "down"], check=True)
    before = ex.capture(ctx)
    ex.apply(ctx, before)
    assert mode(dev) == "legacy"
    back = EffectContext("o", "e2", {"function": (pf_handle(dev),)}, {"mode": "switchdev"}, env)
    before2 = ex.capture(back)
    ex.apply(back, before2)
    subprocess.run(
        ["ip", "-n", w.host, "link", "set", netdevsim.representors(dev)["pf0vf0"][0], "up"],
        check=True,
    )
    with pytest.raises(ExecutorError) as err:
        ex.undo(back, before2, {})
    assert err.value.code == "E_RESET_DOMAIN_BUSY" and mode(dev) == "switchdev"
    for handle, code in (
        (pf_handle(dev, devlinkHandle="netdevsim/netdevsim99999"), "E_DEVICE_GONE"),
        (pf_handle(dev, devlinkHandle="../../etc/passwd"), "E_DEVICE_IDENTITY"),
    ):
        c = EffectContext("o", "e", {"function": (handle,)}, {"mode": "legacy"}, env)
        with pytest.raises(ExecutorError) as err:
            ex.capture(c)
        assert err.value.code == code


def _program(dev: netdevsim.NetdevsimPf) -> BoundProgram:
    effect = BoundEffect(
        id="eswitch",
        source_id="eswitch",
        kind=ESWITCH,
        inputs={"function": (pf_handle(dev),)},
        parameters={"mode": "switchdev"},
        requires=("drained-scope", "exclusive-grant", "protected-scope-clear"),
        postconditions=("eswitch-mode-match", "function-rediscovered"),
        recovery="RestoreBeforeImage",
    )
    return BoundProgram("eswitch-manager", "v1", "prepare", "sha256:lab", (effect,))


@pytest.mark.crash
def test_eswitch_change_crash_at_every_boundary(
    pf: tuple[World, netdevsim.NetdevsimPf], tmp_path: Path
) -> None:
    """SIGKILL the run (and its cleanup) at every journal boundary; recovery and cleanup from
    the journal alone leave the eswitch in legacy mode without representors."""
    w, dev = pf
    node = Node(tmp_path / "state", w.host)
    server = CrashForkServer()
    try:
        points = {"run": 0, "cleanup": 0}
        for phase in ("run", "cleanup"):
            for index in range(MAX_BOUNDARIES):
                op = f"es-{phase}{index}"
                program = _program(dev)
                if phase == "cleanup":
                    node.run(op, program)
                    assert mode(dev) == "switchdev"
                passed = node.killed_at(server, index, phase, op, program)
                with node.runner() as r:
                    for result in r.recover():
                        assert result.state.value in ("Undone", "Completed"), result
                    assert r.cleanup(op).state.value == "Undone"
                assert mode(dev) == "legacy", (phase, index, passed)
                if not passed:
                    break
                points[phase] += 1
        assert points["run"] >= 4 and points["cleanup"] >= 2, points
        assert netdevsim.representors(dev, timeout=1) == {}
    finally:
        server.close()
        node.release_pins()
