"""``ovs/port-attach/v1`` and the builtin ``ovs-cni`` plugin on a real Open vSwitch in the lab.

Why the lab: the executor proves its input is a switchdev representor (switch ID + port
name from the kernel), and only the lab kernel has netdevsim to make one; the lab kernel also
ships ``openvswitch.ko``, so the switch runs the kernel datapath (this machine's kernel has no
OVS module: the userspace datapath would be the host's only choice). Each test starts its own
``ovsdb-server`` and ``ovs-vswitchd`` (:mod:`tests.kernel_lab.ovs_switch`: own database file,
runtime directory and sockets; never the system service) with ``ovs-vswitchd`` in the
stand-in host namespace. ``ovs-vsctl``/``ovs-appctl`` are the independent readers.

Traffic: a netdevsim representor has no VF netdev behind it, so nothing ever arrives *from* it;
what the switch forwards *to* it is counted by the kernel (netdevsim's transmit counts and
drops). Broadcasts sent into an access port of VLAN 100 reach the representor's transmit
counter; broadcasts into VLAN 200 do not — forwarding through the kernel datapath, with the
tag the executor wrote, in one direction.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from dmn.host.netns import NamespaceRef
from dmn.host.rtnetlink.links import by_name
from dmn.opcodes.device_environment import DeviceEnvironment, OvsBridgeGrant
from dmn.opcodes.executor import EffectContext, ExecutorError, RecoveryObservation
from tests.crash_fork_server import crash_fork_server
from tests.crash_points import crash_points, effect_kinds
from tests.kernel.node import Node, bind, call, unprivileged_server
from tests.kernel.scratch import netns_path, scratch_netns
from tests.kernel.world import EXECUTORS, World, world
from tests.kernel_lab import netdevsim
from tests.kernel_lab.flood_probe import broadcasts, quiet, tx_packets
from tests.kernel_lab.ovs_switch import BRIDGE, OvsSwitch, ovs_switch
from tests.kernel_lab.test_lab_switchdev import rep_handle

pytestmark = pytest.mark.kernel_lab

ATTACH = "ovs/port-attach/v1"
GRANT = OvsBridgeGrant("tenant-ovs", BRIDGE, frozenset({100, 200, 300}))
CONFIG = {"bridge": "tenant-ovs", "vlan": 100, "mtu": 1450}


@dataclass
class Lab:
    w: World
    switch: OvsSwitch
    reps: dict[str, tuple[str, str]]

    def env(self, *grants: OvsBridgeGrant) -> DeviceEnvironment:
        env = DeviceEnvironment(
            host=NamespaceRef.at(netns_path(self.w.host)),
            ovs_bridge_grants={g.alias: g for g in (grants or (GRANT,))},
            ovsdb_remote=self.switch.remote,
        )
        self.w.stack.callback(env.close)
        return env

    def ctx(self, params: dict[str, Any], op: str = "op-ovs", port: str = "pf0vf1") -> Any:
        handle = rep_handle(self.w, self.reps, port)
        return EffectContext(op, "attach", {"representor": (handle,)}, params, self.env())

    def rep(self, port: str = "pf0vf1") -> tuple[int, bool, int]:
        link = by_name(self.w.ipr(self.w.host), self.reps[port][0])
        assert link is not None
        return link.mtu, link.up, link.master

    def world_state(self) -> dict[str, Any]:
        return {"ovs": self.switch.state(), "reps": {p: self.rep(p) for p in self.reps}}


@pytest.fixture(scope="module")
def module_lab() -> Iterator[Lab]:
    """One netdevsim device and one switch for the module (their setup dominates each test's
    time under TCG); every test leaves them as it found them, which :func:`lab` enforces."""
    with world() as w, netdevsim.netdevsim_pf(w.host, vfs=2) as dev:
        # no IPv6 chatter: the representor's transmit counter must count forwarded frames only
        quiet(w.host)
        netdevsim.switchdev(dev)
        reps = netdevsim.representors(dev)
        ipr = w.ipr(w.host)
        for ifname, _ in reps.values():
            ipr.link("set", index=ipr.link_lookup(ifname=ifname)[0], mtu=1400, state="down")
        with ovs_switch(w.host) as switch:
            yield Lab(w, switch, reps)


@pytest.fixture
def lab(module_lab: Lab) -> Iterator[Lab]:
    """The module's lab; afterwards the test's own leftovers (bridges and ports it made as
    the administrator) are removed and the switch must be back at its initial state."""
    initial = module_lab.world_state()
    yield module_lab
    sw = module_lab.switch
    for bridge in sw.vsctl("list-br").split():
        if bridge != BRIDGE:
            sw.vsctl("del-br", bridge)
    for port in sw.vsctl("list-ports", BRIDGE).split():
        sw.vsctl("del-port", BRIDGE, port)
    assert module_lab.world_state() == initial


def _drive(lab: Lab, params: dict[str, Any]) -> tuple[Any, Any, Any]:
    ex = EXECUTORS[ATTACH]
    ctx = lab.ctx(params)
    before = ex.capture(ctx)
    assert ex.recover(ctx, before) is RecoveryObservation.NOT_APPLIED
    ex.apply(ctx, before)
    observed = ex.observe(ctx, before)
    assert observed.postconditions_ok, observed.detail
    return ctx, before, observed


def _port_row(lab: Lab, name: str) -> dict[str, Any]:
    return next(r for r in lab.switch.rows("Port") if r["name"] == name)


def test_attach_records_rows_then_exact_undo(lab: Lab) -> None:
    baseline = lab.world_state()
    rep = lab.reps["pf0vf1"][0]
    ctx, before, observed = _drive(lab, {"bridge": "tenant-ovs", "tag": 100})
    # the journal's before-image named the rows; OVSDB holds exactly those
    row = _port_row(lab, rep)
    assert row["_uuid"] == before["port"]["uuid"] and row["tag"] == 100
    assert row["interfaces"] == before["interface"]["uuid"]
    assert row["external_ids"]["dmn-owner"] == "dmn:op-ovs:attach"
    assert rep in lab.switch.vsctl("list-ports", BRIDGE).split()
    assert rep in lab.switch.dp_ports()  # ovs-vswitchd put it in the kernel datapath
    assert lab.rep("pf0vf0") == baseline["reps"]["pf0vf0"]
    ex = EXECUTORS[ATTACH]
    assert ex.recover(ctx, before) is RecoveryObservation.APPLIED
    ex.undo(ctx, before, observed.outputs)
    assert lab.world_state() == baseline
    assert ex.recover(ctx, before) is RecoveryObservation.NOT_APPLIED
    ex.undo(ctx, before, observed.outputs)  # idempotent: nothing of ours is left
    assert lab.world_state() == baseline


def test_trunk_port(lab: Lab) -> None:
    baseline = lab.world_state()
    ctx, before, observed = _drive(lab, {"bridge": "tenant-ovs", "trunks": [200, 300]})
    row = _port_row(lab, lab.reps["pf0vf1"][0])
    assert row["trunks"] == [200, 300] and row["tag"] == []
    EXECUTORS[ATTACH].undo(ctx, before, observed.outputs)
    assert lab.world_state() == baseline


def _refused(lab: Lab, params: dict[str, Any], *grants: OvsBridgeGrant) -> str:
    handle = rep_handle(lab.w, lab.reps, "pf0vf1")
    ctx = EffectContext("op-bad", "attach", {"representor": (handle,)}, params, lab.env(*grants))
    with pytest.raises(ExecutorError) as err:
        EXECUTORS[ATTACH].capture(ctx)
    return err.value.code


@pytest.mark.adversarial
def test_refusals_bridge_vlan_and_foreign_rows_are_never_adopted(lab: Lab) -> None:
    rep = lab.reps["pf0vf1"][0]
    # not the approved bridge: an alias nobody granted, a grant whose bridge is not in OVSDB
    lab.switch.vsctl("add-br", "other0", "--", "set", "bridge", "other0", "datapath_type=system")
    assert _refused(lab, {"bridge": "other0"}) == "E_OVS_BRIDGE_GRANT"
    ghost = OvsBridgeGrant("tenant-ovs", "nosuchbr", frozenset({100}))
    assert _refused(lab, {"bridge": "tenant-ovs", "tag": 100}, ghost) == "E_OVS_BRIDGE_GRANT"
    # VLANs outside the grant
    assert _refused(lab, {"bridge": "tenant-ovs", "tag": 101}) == "E_VLAN_DENIED"
    assert _refused(lab, {"bridge": "tenant-ovs", "trunks": [200, 4000]}) == "E_VLAN_DENIED"
    # a port of the representor's name on another bridge, even one whose external_ids claim
    # to be this very effect's: the journal never recorded it, so it is not ours
    lab.switch.vsctl(
        "add-port", "other0", rep, "--", "set", "port", rep,
        "external_ids:dmn-owner=dmn:op-bad:attach",
    )  # fmt: skip
    foreign = lab.switch.state()
    assert _refused(lab, {"bridge": "tenant-ovs", "tag": 100}) == "E_OVS_PORT_EXISTS"
    lab.switch.vsctl("del-port", "other0", rep)
    # an Interface row of that name under a port of another name
    lab.switch.vsctl(
        "add-port", BRIDGE, "p-foreign", "--", "set", "port", "p-foreign", "interfaces=@i",
        "--", "--id=@i", "create", "interface", f"name={rep}",
    )  # fmt: skip
    assert _refused(lab, {"bridge": "tenant-ovs", "tag": 100}) == "E_OVS_PORT_EXISTS"
    assert any(r["name"] == "p-foreign" for r in lab.switch.rows("Port"))
    lab.switch.vsctl("del-port", BRIDGE, "p-foreign")
    assert foreign["ports"][rep][3]["dmn-owner"] == "dmn:op-bad:attach"


@pytest.mark.adversarial
def test_replaced_bridge_and_a_foreign_port_in_our_place_are_left_alone(lab: Lab) -> None:
    ex = EXECUTORS[ATTACH]
    rep = lab.reps["pf0vf1"][0]
    # an approved bridge is deleted and re-created between capture and apply: a new row
    replaced = OvsBridgeGrant("tenant-repl", "repl0", frozenset({100}))
    add = ("add-br", "repl0", "--", "set", "bridge", "repl0", "datapath_type=system")
    lab.switch.vsctl(*add)
    handle = rep_handle(lab.w, lab.reps, "pf0vf1")
    params = {"bridge": "tenant-repl", "tag": 100}
    ctx = EffectContext("op-repl", "attach", {"representor": (handle,)}, params, lab.env(replaced))
    before = ex.capture(ctx)
    lab.switch.vsctl("del-br", "repl0")
    lab.switch.vsctl(*add)
    with pytest.raises(ExecutorError) as err:
        ex.apply(ctx, before)
    assert err.value.code == "E_OVS_BRIDGE_GRANT"
    assert rep not in lab.switch.vsctl("list-ports", "repl0").split()
    # after our attach someone deletes our port and adds their own of the same name (with our
    # external_ids copied): undo and recovery go by the recorded row UUIDs, so it stays
    ctx, before, observed = _drive(lab, {"bridge": "tenant-ovs", "tag": 100})
    lab.switch.vsctl("del-port", BRIDGE, rep)
    lab.switch.vsctl(
        "add-port", BRIDGE, rep, "tag=100", "--", "set", "port", rep,
        "external_ids:dmn-owner=dmn:op-ovs:attach",
    )  # fmt: skip
    theirs = _port_row(lab, rep)["_uuid"]
    assert ex.recover(ctx, before) is RecoveryObservation.NOT_APPLIED
    ex.undo(ctx, before, observed.outputs)
    assert _port_row(lab, rep)["_uuid"] == theirs
    assert rep in lab.switch.vsctl("list-ports", BRIDGE).split()


def _access_port(lab: Lab, client: str, name: str, tag: int) -> None:
    """A veth into ``client`` whose host end is an administrator's access port of ``tag``."""
    ipr = lab.w.ipr(lab.w.host)
    ipr.link("add", ifname=f"{name}h", kind="veth", peer=f"{name}c")
    peer = ipr.link_lookup(ifname=f"{name}c")[0]
    ipr.link("set", index=peer, net_ns_fd=netns_path(client))
    ipr.link("set", index=ipr.link_lookup(ifname=f"{name}h")[0], state="up")
    lab.switch.vsctl("add-port", BRIDGE, f"{name}h", f"tag={tag}")


def _connect(lab: Lab, op: str, ref: Any) -> Any:
    handle = rep_handle(lab.w, lab.reps, "pf0vf1")
    return bind(
        "ovs-cni", "connect", call(CONFIG, op, inputs={"representor": (handle,)}, sandbox=ref)
    )


def _node(lab: Lab, tmp_path: Path) -> Node:
    return Node(tmp_path / "state", lab.w.host, ovs_grants=(GRANT,), ovsdb_remote=lab.switch.remote)


def test_ovs_cni_program_forwards_its_vlan_then_removal_restores(lab: Lab, tmp_path: Path) -> None:
    """Run by the unprivileged agent: its OVSDB transactions and the representor's settings
    hold only the chart's capabilities."""
    node = replace(_node(lab, tmp_path), server=unprivileged_server())
    with scratch_netns("ovsc") as c100, scratch_netns("ovsd") as c200:
        for ns in (c100, c200):
            quiet(ns)
        _access_port(lab, c100, "va", 100)
        _access_port(lab, c200, "vb", 200)
        try:
            baseline = lab.world_state()
            ref = node.pin("ovs", lab.w.sandbox())
            node.run("ovs-conn", _connect(lab, "ovs-conn", ref), sandbox=ref)
            rep = lab.reps["pf0vf1"][0]
            # the kernel datapath makes its ports slaves of ovs-system
            system = by_name(lab.w.ipr(lab.w.host), "ovs-system")
            assert system is not None and lab.rep() == (1450, True, system.index)
            assert _port_row(lab, rep)["tag"] == 100 and rep in lab.switch.dp_ports()
            ipr = lab.w.ipr(lab.w.host)
            start = tx_packets(ipr, rep)
            broadcasts(c200, "vbc", "192.0.2.2/24", 5)  # VLAN 200: must not reach it
            assert tx_packets(ipr, rep) == start
            broadcasts(c100, "vac", "192.0.2.1/24", 5)  # VLAN 100: flooded to our port
            assert tx_packets(ipr, rep) - start >= 5
            node.cleanup("ovs-conn")
            assert lab.world_state() == baseline
        finally:
            node.release_pins()


@pytest.mark.crash
def test_ovs_cni_crash_at_every_boundary(lab: Lab, tmp_path: Path) -> None:
    node = _node(lab, tmp_path)
    server = crash_fork_server()
    try:
        baseline = lab.world_state()
        sandbox = lab.w.sandbox()
        ref = node.pin("ovs-survey", sandbox)
        program = _connect(lab, "ovs-survey", ref)
        names = node.survey("ovs-survey", program, ref)
        node.pins.release("ovs-survey", cleanup_verified=True)
        assert lab.world_state() == baseline
        # run: intent and completion (before, after) + 2 effects x (before-image, apply,
        # outcome); cleanup: 2 effects x (undoing, undone) + the operation's record
        assert [len(names["run"]), len(names["cleanup"])] == [10, 5], names
        for phase in ("run", "cleanup"):
            for index in crash_points(names[phase], effect_kinds(program), __name__):
                op = f"ovs-{phase}{index}"
                ref = node.pin(op, sandbox)
                program = _connect(lab, op, ref)
                if phase == "cleanup":
                    node.run(op, program, sandbox=ref)
                passed = node.killed_at(server, index, phase, op, program, ref)
                assert passed and passed[-1] == names[phase][index], (phase, index, passed)
                with node.runner() as r:
                    for result in r.recover():
                        assert result.state.value in ("Undone", "Completed"), result
                    assert r.cleanup(op).state.value == "Undone"
                assert lab.world_state() == baseline, (phase, index, passed)
                node.pins.release(op, cleanup_verified=True)
    finally:
        server.close()
        node.release_pins()
