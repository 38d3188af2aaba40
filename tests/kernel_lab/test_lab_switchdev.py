"""``representor/configure/v1`` on real switchdev representors: netdevsim in switchdev mode.

netdevsim (built for the lab kernel) makes one representor netdev per VF once its devlink
eswitch is in switchdev mode; the kernel reports each one's switch ID and port name
(``pf0vfN``), which is the identity the executor proves and records. Checked through the
executor, through sriov-cni's prepare program (``representor: true`` keeps it down) with the
real runner and journal, and with SIGKILL at every journal boundary of that program.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dmn.host.netns import LinkEnvironment, NamespaceRef
from dmn.host.rtnetlink.links import by_name
from dmn.opcodes.executor import EffectContext, ExecutorError, RecoveryObservation
from dmn.vocabulary.handles import Handle, Provenance, Scope
from dmn.vocabulary.terms import Access, HandleType, ScopeKind
from tests.crash_fork_server import crash_fork_server
from tests.crash_points import crash_points, effect_kinds
from tests.kernel.node import Node, bind, call, unprivileged_server
from tests.kernel.scratch import netns_path
from tests.kernel.world import EXECUTORS, World, host_handle, world
from tests.kernel_lab import netdevsim

pytestmark = pytest.mark.kernel_lab

CONFIGURE = "representor/configure/v1"


@pytest.fixture
def switch() -> Iterator[tuple[World, netdevsim.NetdevsimPf, dict[str, tuple[str, str]]]]:
    with world() as w, netdevsim.netdevsim_pf(w.host, vfs=2) as dev:
        netdevsim.switchdev(dev)
        reps = netdevsim.representors(dev)
        assert set(reps) == {"pf0vf0", "pf0vf1"}, reps
        ipr = w.ipr(w.host)
        for ifname, _ in reps.values():  # a known, non-default baseline: up, MTU 1400
            ipr.link("set", index=ipr.link_lookup(ifname=ifname)[0], mtu=1400, state="up")
        yield w, dev, reps


def rep_handle(w: World, reps: dict[str, tuple[str, str]], port: str, **override: Any) -> Handle:
    ifname, switch_id = reps[port]
    link = by_name(w.ipr(w.host), ifname)
    assert link is not None
    observations: dict[str, str | int | bool] = {
        "ifName": ifname,
        "ifIndex": link.index,
        "physSwitchID": switch_id,
        "physPortName": port,
    }
    observations.update(override)
    return Handle(
        id=f"rep-{port}",
        type=HandleType.HOST_REPRESENTOR,
        inventory_id=f"representor:{switch_id}/{port}",
        scope=Scope(ScopeKind.HOST),
        accesses=frozenset({Access.READ, Access.EXCLUSIVE_CONFIGURE}),
        provenance=Provenance(claim_uid="claim-rep", request="vf", device=port),
        observations=observations,
    )


def _env(w: World) -> LinkEnvironment:
    env = LinkEnvironment(host=NamespaceRef.at(netns_path(w.host)))
    w.stack.callback(env.close)
    return env


def rep_state(w: World, ifname: str) -> tuple[int, bool]:
    link = by_name(w.ipr(w.host), ifname)
    assert link is not None
    return link.mtu, link.up


def test_representor_configure_and_exact_undo(switch: Any) -> None:
    w, _, reps = switch
    ex = EXECUTORS[CONFIGURE]
    ifname = reps["pf0vf1"][0]
    ctx = EffectContext(
        "op-rep", "rep", {"representor": (rep_handle(w, reps, "pf0vf1"),)},
        {"mtu": 9000, "up": False}, _env(w),
    )  # fmt: skip
    before = ex.capture(ctx)
    assert ex.recover(ctx, before) is RecoveryObservation.NOT_APPLIED
    ex.apply(ctx, before)
    observed = ex.observe(ctx, before)
    assert observed.postconditions_ok, observed.detail
    assert rep_state(w, ifname) == (9000, False)
    assert rep_state(w, reps["pf0vf0"][0]) == (1400, True)  # the neighbour is untouched
    assert ex.recover(ctx, before) is RecoveryObservation.APPLIED
    ex.undo(ctx, before, observed.outputs)
    assert rep_state(w, ifname) == (1400, True)


@pytest.mark.adversarial
def test_unproven_representor_mappings_are_refused(switch: Any) -> None:
    w, dev, reps = switch
    ex = EXECUTORS[CONFIGURE]
    cases = (
        # the hint names vf0's representor but the handle claims port pf0vf1
        (
            rep_handle(w, reps, "pf0vf1", ifName=reps["pf0vf0"][0], ifIndex=0),
            "E_REPRESENTOR_MAPPING",
        ),
        # the PF itself is on the switch but is not that VF's representor
        (rep_handle(w, reps, "pf0vf0", ifName=dev.pf, ifIndex=0), "E_REPRESENTOR_MAPPING"),
        # no devlink identity observed: nothing to verify against
        (rep_handle(w, reps, "pf0vf0", physPortName=""), "E_REPRESENTOR_MAPPING"),
    )
    for handle, code in cases:
        ctx = EffectContext("op-bad", "rep", {"representor": (handle,)}, {"up": False}, _env(w))
        with pytest.raises(ExecutorError) as err:
            ex.capture(ctx)
        assert err.value.code == code, handle.observations


@pytest.mark.adversarial
def test_a_renamed_representor_is_restored_by_its_identity(switch: Any) -> None:
    """After apply the representor is renamed (udev or an operator; the name is a label).
    The relocation used to require the recorded name, so undo skipped it and the effect
    ended Undone with MTU 1300 still set; now it is followed by ifindex, switch ID and port
    name and restored exactly."""
    w, _, reps = switch
    ex = EXECUTORS[CONFIGURE]
    ifname = reps["pf0vf0"][0]
    ctx = EffectContext(
        "op-ren", "rep", {"representor": (rep_handle(w, reps, "pf0vf0"),)}, {"mtu": 1300}, _env(w)
    )
    before = ex.capture(ctx)
    ex.apply(ctx, before)
    ipr = w.ipr(w.host)
    index = ipr.link_lookup(ifname=ifname)[0]
    ipr.link("set", index=index, state="down")
    ipr.link("set", index=index, ifname="renamedrep0")
    assert ex.recover(ctx, before) is RecoveryObservation.APPLIED
    ex.undo(ctx, before, {})
    assert rep_state(w, "renamedrep0") == (1400, True)


@pytest.mark.adversarial
def test_another_link_at_the_representors_ifindex_is_never_written(switch: Any) -> None:
    """The representors go away (the eswitch leaves switchdev mode) and another link is made
    at the recorded ifindex: recovery is Uncertain, undo refuses with E_IDENTITY_MISMATCH
    (the runner quarantines it) and the stranger keeps its MTU and admin state."""
    w, dev, reps = switch
    ex = EXECUTORS[CONFIGURE]
    ctx = EffectContext(
        "op-imp", "rep", {"representor": (rep_handle(w, reps, "pf0vf0"),)}, {"mtu": 1300}, _env(w)
    )
    before = ex.capture(ctx)
    ex.apply(ctx, before)
    index = int(before["representor"]["index"])
    subprocess.run(
        ["ip", "netns", "exec", dev.netns, "devlink", "dev", "eswitch", "set", dev.devlink,
         "mode", "legacy"],
        check=True, capture_output=True,
    )  # fmt: skip
    ipr = w.ipr(w.host)
    ipr.link("add", ifname="stranger0", index=index, kind="veth", peer="stranger1", mtu=1500)
    assert ex.recover(ctx, before) is RecoveryObservation.UNCERTAIN
    with pytest.raises(ExecutorError) as err:
        ex.undo(ctx, before, {})
    assert err.value.code == "E_IDENTITY_MISMATCH"
    assert rep_state(w, "stranger0") == (1500, False)


def _prepare(op: str, w: World, reps: dict[str, tuple[str, str]], stand_in: str) -> Any:
    config = {"mode": "kernel", "ifName": "net1", "mtu": 1500, "up": True, "representor": True}
    allocation = {
        "interface": (host_handle(w.ipr(w.host), stand_in, Access.EXCLUSIVE_CONFIGURE),),
        "representor": (rep_handle(w, reps, "pf0vf1"),),
    }
    return bind("sriov-cni", "prepare", call(config, op, allocation=allocation))


_PORTS = (
    "import dataclasses, json; from dmn.agent.inventory import Pyroute2Devlink; "
    "print(json.dumps([dataclasses.asdict(p) for p in Pyroute2Devlink().ports()]))"
)


def test_inventory_devlink_source_reads_the_vm_kernels_ports(switch: Any) -> None:
    """The inventory's devlink source (``Pyroute2Devlink``, what the agent's scan takes
    representor facts from) on the VM kernel, in the namespace the netdevsim devlink
    instance lives in: the physical port carries the PF netdev, and each VF representor is
    a ``pcivf`` port of PF 0 with its VF number and netdev name."""
    w, dev, reps = switch
    proc = subprocess.run(
        ["ip", "netns", "exec", w.host, sys.executable, "-c", _PORTS],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    ports = [p for p in json.loads(proc.stdout) if p["device"] == dev.devlink]
    physical = [p for p in ports if p["flavour"] == "physical"]
    assert [p["netdev_name"] for p in physical] == [dev.pf], ports
    vfs = {(p["controller"], p["pfnum"], p["vfnum"], p["netdev_name"]) for p in ports
           if p["flavour"] == "pcivf"}  # fmt: skip
    assert vfs == {(0, 0, i, reps[f"pf0vf{i}"][0]) for i in (0, 1)}, ports
    assert not any(p["external"] for p in ports)


def test_sriov_cni_keeps_the_representor_down_and_unprepare_restores_it(
    switch: Any, tmp_path: Path
) -> None:
    """Run by the unprivileged agent (only the chart's capabilities)."""
    w, _, reps = switch
    node = Node(tmp_path / "state", w.host, server=unprivileged_server())
    try:
        stand_in, _ = w.veth(w.host)
        ifname = reps["pf0vf1"][0]
        prepared = node.run("rep-prep", _prepare("rep-prep", w, reps, stand_in))
        assert rep_state(w, ifname) == (1400, False)
        exported = prepared.exports["representor"][0]
        assert exported.observations["physPortName"] == "pf0vf1"
        node.cleanup("rep-prep")
        assert rep_state(w, ifname) == (1400, True)
    finally:
        node.release_pins()


@pytest.mark.crash
def test_sriov_cni_representor_crash_at_every_boundary(switch: Any, tmp_path: Path) -> None:
    w, _, reps = switch
    node = Node(tmp_path / "state", w.host)
    server = crash_fork_server()
    try:
        stand_in, _ = w.veth(w.host)
        ifname = reps["pf0vf1"][0]
        program = _prepare("rep-survey", w, reps, stand_in)
        names = node.survey("rep-survey", program)
        assert len(names["run"]) >= 4 and len(names["cleanup"]) >= 2, names
        for phase in ("run", "cleanup"):
            for index in crash_points(names[phase], effect_kinds(program), __name__):
                op = f"rep-{phase}{index}"
                program = _prepare(op, w, reps, stand_in)
                if phase == "cleanup":
                    node.run(op, program)
                passed = node.killed_at(server, index, phase, op, program)
                assert passed and passed[-1] == names[phase][index], (phase, index, passed)
                with node.runner() as r:
                    for result in r.recover():
                        assert result.state.value in ("Undone", "Completed"), result
                    assert r.cleanup(op).state.value == "Undone"
                assert rep_state(w, ifname) == (1400, True), (phase, index, passed)
                assert rep_state(w, reps["pf0vf0"][0]) == (1400, True)
    finally:
        server.close()
        node.release_pins()


def test_switchdev_fixture_cleanup_removes_representors() -> None:
    with world() as w:
        with netdevsim.netdevsim_pf(w.host, vfs=1) as dev:
            netdevsim.switchdev(dev)
            assert netdevsim.representors(dev)
        names = subprocess.run(
            ["ip", "-n", w.host, "-o", "link", "show"], check=True, capture_output=True, text=True
        ).stdout
        assert dev.pf not in names
