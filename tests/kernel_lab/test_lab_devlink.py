"""``devlink/eswitch-configure/v1`` on a real devlink eswitch: netdevsim built for the lab kernel.

netdevsim's devlink instance lives in the test's stand-in host namespace; the executor speaks
devlink generic netlink there. iproute2's ``devlink -j dev eswitch show`` is the independent
reader. No builtin plugin emits this opcode: the node agent runs it for DeviceExposurePolicy
``action: ManageEswitch`` (:mod:`dmn.agent.coordinator.eswitch_modes`) as a one-effect program
through the real runner and RocksDB journal. The agent's service is driven on a netdevsim PF
(drained family from the journal and the API's allocations, the kernel's busy ports, restore
when no policy asks) and SIGKILLed at every journal boundary of its transition and its restore
(this replaced the executor-only crash test of the same program: same boundaries, plus the
restarted service's next passes). netdevsim is not a PCI device, so
the service's targets are built here from its devlink instance; ``eswitch_targets`` (PCI PFs
from the inventory) is tested on recorded inventories.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dmn.agent.coordinator.eswitch_modes import EswitchModes, EswitchTarget, eswitch_program
from dmn.agent.coordinator.node_lock import NodeLock
from dmn.agent.coordinator.operations import NodeOperations, device_environment
from dmn.agent.journal.records import Reservation
from dmn.agent.journal.store import JournalStore
from dmn.engine.runner import Runner
from dmn.host.netns import LinkEnvironment, NamespaceRef
from dmn.host.pins import NamespacePins
from dmn.opcodes.executor import EffectContext, ExecutorError, RecoveryObservation
from dmn.vocabulary.handles import Handle, Provenance, Scope
from dmn.vocabulary.terms import Access, HandleType, ScopeKind
from tests.crash_fork_server import crash_fork_server
from tests.crash_points import crash_points, effect_kinds
from tests.kernel.node import Node
from tests.kernel.scratch import netns_path
from tests.kernel.world import EXECUTORS, World, world
from tests.kernel_lab import netdevsim

pytestmark = pytest.mark.kernel_lab

ESWITCH = "devlink/eswitch-configure/v1"


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


# ------------------------------------------------------------------ the agent's eswitch service


def _target(dev: netdevsim.NetdevsimPf) -> EswitchTarget:
    pf = f"pf-{dev.dev_id}"
    return EswitchTarget(
        policy="lab-eswitch",
        inventory_id=pf,
        devlink=dev.devlink,
        mode="switchdev",
        allowed_modes=frozenset({"legacy", "switchdev"}),
        family=frozenset({pf, f"{pf}-vf0", f"{pf}-vf1"}),
    )


class _Agent:
    """The agent's eswitch service over a state dir, as ``NodeServices`` wires it; a new
    instance over the same dir is a restarted agent (it recovers first, as ``start`` does)."""

    def __init__(self, tmp: Path, host: str) -> None:
        state_dir = tmp / "agent"
        self.pins = NamespacePins(state_dir, host_netns=netns_path(host))
        self.journal = JournalStore.open(state_dir)
        runner = Runner(
            self.journal, EXECUTORS, env_factory=lambda op: device_environment(self.pins, tmp)
        )
        self.ops = NodeOperations(runner, self.pins, tmp)
        for result in self.ops.recover():
            assert result.state.value in ("Undone", "Completed"), result
        self.modes = EswitchModes(self.journal, self.ops, NodeLock(runner.lock, self.journal))

    def close(self) -> None:
        self.journal.close()
        self.pins.close()


def test_agent_places_a_drained_pf_in_switchdev_and_restores_it(
    pf: tuple[World, netdevsim.NetdevsimPf], tmp_path: Path
) -> None:
    """The ManageEswitch service on netdevsim: a VF of the family reserved by a preparation,
    or allocated by the API but not yet prepared, keeps the PF in legacy (E_RESET_DOMAIN_BUSY,
    nothing written); drained, it is switched and its representors appear; a second pass
    replays; with the policy gone, a representor a tenant set up blocks the restore before
    anything is written (not quarantined), and once down the recorded legacy mode is back."""
    w, dev = pf
    target = _target(dev)
    agent = _Agent(tmp_path, w.host)
    try:
        agent.journal.reserve([Reservation(f"pf-{dev.dev_id}-vf1", "prep/claim/fp")])
        (out,) = agent.modes.reconcile([target])
        assert (out.state, out.code) == ("Busy", "E_RESET_DOMAIN_BUSY"), out
        assert mode(dev) == "legacy"
        with agent.journal.batch() as b:
            b.delete_reservation(f"pf-{dev.dev_id}-vf1")
        (out,) = agent.modes.reconcile([target], allocated={f"pf-{dev.dev_id}-vf0"})
        assert (out.state, out.code) == ("Busy", "E_RESET_DOMAIN_BUSY"), out
        (out,) = agent.modes.reconcile([target])
        assert out.state == "Completed", out
        assert mode(dev) == "switchdev"
        reps = netdevsim.representors(dev)
        assert set(reps) == {"pf0vf0", "pf0vf1"}
        (out,) = agent.modes.reconcile([target])
        assert out.state == "Completed" and mode(dev) == "switchdev"
        subprocess.run(["ip", "-n", w.host, "link", "set", reps["pf0vf0"][0], "up"], check=True)
        (out,) = agent.modes.reconcile([])
        assert (out.state, out.code) == ("Busy", "E_RESET_DOMAIN_BUSY"), out
        assert mode(dev) == "switchdev"
        subprocess.run(["ip", "-n", w.host, "link", "set", reps["pf0vf0"][0], "down"], check=True)
        (out,) = agent.modes.reconcile([])
        assert out.state == "Restored", out
        assert mode(dev) == "legacy" and netdevsim.representors(dev, timeout=1) == {}
        assert agent.modes.reconcile([]) == []
        record = agent.journal.load_operation(target.operation_id)
        assert record is not None and record.state.value == "Undone"
    finally:
        agent.close()


@pytest.mark.crash
def test_agent_eswitch_service_crash_at_every_boundary(
    pf: tuple[World, netdevsim.NetdevsimPf], tmp_path: Path
) -> None:
    """SIGKILL the service's transition (and its restore) at every journal boundary of its
    operation; a restarted agent recovers, its next pass leaves the PF in switchdev while
    the policy asks, and the pass after the policy is gone leaves it in legacy."""
    w, dev = pf
    target = _target(dev)
    node = Node(tmp_path / "agent", w.host)
    server = crash_fork_server()
    try:
        program = eswitch_program(target)
        names = node.survey(target.operation_id, program, scope=target.scope)
        assert mode(dev) == "legacy"
        # intent, before-image, apply, outcome, completion; undo: undoing, undone
        assert len(names["run"]) >= 4 and len(names["cleanup"]) >= 2, names
        for phase in ("run", "cleanup"):
            for index in crash_points(names[phase], effect_kinds(program), __name__):
                if phase == "cleanup":
                    agent = _Agent(tmp_path, w.host)
                    try:
                        assert [o.state for o in agent.modes.reconcile([target])] == ["Completed"]
                    finally:
                        agent.close()
                passed = node.killed_at(
                    server, index, phase, target.operation_id, eswitch_program(target),
                    scope=target.scope,
                )  # fmt: skip
                assert passed and passed[-1] == names[phase][index], (phase, index, passed)
                agent = _Agent(tmp_path, w.host)
                try:
                    if phase == "run":
                        outcomes = agent.modes.reconcile([target])
                        assert [o.state for o in outcomes] == ["Completed"], (index, outcomes)
                        assert mode(dev) == "switchdev", (phase, index, passed)
                    outcomes = agent.modes.reconcile([])
                    assert {o.state for o in outcomes} <= {"Restored"}, (index, outcomes)
                    assert mode(dev) == "legacy", (phase, index, passed)
                finally:
                    agent.close()
        assert netdevsim.representors(dev, timeout=1) == {}
    finally:
        server.close()
