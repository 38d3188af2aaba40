"""``bridge/port-attach/v1`` and ``bridge/port-vlan/v1`` on a VLAN-filtering Linux bridge in
the lab kernel, with netdevsim switchdev representors as the ports.

The approved bridge is made by the test (VLAN filtering, a fixed MAC, up) and granted by alias
through a :class:`DeviceEnvironment`, as the agent does from ``allowedHostBridges``. The
port's VLAN table is checked with iproute2's ``bridge -j vlan show`` (an independent reader).
netdevsim representors carry no traffic to a VF netdev (netdevsim makes none), so the tests
prove membership, VLAN tables, states and exact restoration, and forwarding only as far as the
representor: what the bridge floods to it by VLAN shows in its transmit counter.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dmn.host.netns import NamespaceRef
from dmn.host.rtnetlink.links import by_name
from dmn.opcodes.device_environment import BridgeGrant, DeviceEnvironment
from dmn.opcodes.executor import EffectContext, ExecutorError
from tests.crash_fork_server import crash_fork_server
from tests.crash_points import crash_points, effect_kinds
from tests.kernel.node import Node, bind, call, unprivileged_server
from tests.kernel.scratch import netns_path, scratch_netns
from tests.kernel.world import EXECUTORS, World, world
from tests.kernel_lab import netdevsim
from tests.kernel_lab.bridge_vlans import bridge_vlan, vlans
from tests.kernel_lab.flood_probe import broadcasts, quiet, tx_packets
from tests.kernel_lab.test_lab_switchdev import rep_handle

pytestmark = pytest.mark.kernel_lab

ATTACH, VLAN = "bridge/port-attach/v1", "bridge/port-vlan/v1"
BRIDGE_MAC = "02:00:00:00:be:01"
CONFIG = {"bridge": "tenant-br", "vlan": 100, "trunk": [200, 300], "mtu": 1450}


@dataclass
class Lab:
    w: World
    dev: netdevsim.NetdevsimPf
    reps: dict[str, tuple[str, str]]
    bridge: str
    grant: BridgeGrant

    def env(self) -> DeviceEnvironment:
        env = DeviceEnvironment(
            host=NamespaceRef.at(netns_path(self.w.host)),
            bridge_grants={self.grant.alias: self.grant},
        )
        self.w.stack.callback(env.close)
        return env

    def port(self, port: str = "pf0vf1") -> dict[str, Any]:
        """Everything undo must restore about a representor: master, MTU, state, VLANs."""
        ifname = self.reps[port][0]
        link = by_name(self.w.ipr(self.w.host), ifname)
        assert link is not None
        tables = vlans(self.w.host, ifname)
        return {"master": link.master, "mtu": link.mtu, "up": link.up, "vlans": tables}


@pytest.fixture
def lab() -> Iterator[Lab]:
    with world() as w, netdevsim.netdevsim_pf(w.host, vfs=2) as dev:
        # no IPv6 on the representors: their own router solicitations (repeated for seconds
        # after they come up) would move the transmit counters the flood checks read
        quiet(w.host)
        netdevsim.switchdev(dev)
        reps = netdevsim.representors(dev)
        ipr = w.ipr(w.host)
        bridge = "tenantbr0"
        subprocess.run(
            ["ip", "-n", w.host, "link", "add", bridge, "type", "bridge", "vlan_filtering", "1"],
            check=True,
        )
        br = ipr.link_lookup(ifname=bridge)[0]
        ipr.link("set", index=br, address=BRIDGE_MAC, mtu=1450, state="up")
        for ifname, _ in reps.values():
            ipr.link("set", index=ipr.link_lookup(ifname=ifname)[0], mtu=1400, state="up")
        grant = BridgeGrant("tenant-br", bridge, frozenset({100, 200, 300}), BRIDGE_MAC)
        yield Lab(w, dev, reps, bridge, grant)


def _drive(lab: Lab, kind: str, params: dict[str, Any], effect: str) -> tuple[Any, Any, Any]:
    ex = EXECUTORS[kind]
    handle = rep_handle(lab.w, lab.reps, "pf0vf1")
    ctx = EffectContext("op-br", effect, {"representor": (handle,)}, params, lab.env())
    before = ex.capture(ctx)
    ex.apply(ctx, before)
    observed = ex.observe(ctx, before)
    assert observed.postconditions_ok, observed.detail
    return ctx, before, observed


def test_attach_and_vlans_then_exact_undo(lab: Lab) -> None:
    baseline, neighbour = lab.port(), lab.port("pf0vf0")
    br_index = lab.w.ipr(lab.w.host).link_lookup(ifname=lab.bridge)[0]
    attach = _drive(lab, ATTACH, {"bridge": "tenant-br"}, "attach")
    attached = lab.port()
    assert attached["master"] == br_index and attached["up"] is False
    assert attached["vlans"] == [(1, True, True)]  # the bridge's default PVID
    vlan = _drive(lab, VLAN, {"pvid": 100, "tagged": [200, 300]}, "vlans")
    assert lab.port()["vlans"] == [(100, True, True), (200, False, False), (300, False, False)]
    assert lab.port("pf0vf0") == neighbour
    for kind, (ctx, before, observed) in ((VLAN, vlan), (ATTACH, attach)):
        EXECUTORS[kind].undo(ctx, before, observed.outputs)
        if kind == VLAN:
            assert lab.port() == attached
    assert lab.port() == baseline


@pytest.mark.adversarial
def test_refusals_foreign_master_ungranted_vlan_unknown_alias_replaced_bridge(lab: Lab) -> None:
    ipr = lab.w.ipr(lab.w.host)
    handle = rep_handle(lab.w, lab.reps, "pf0vf1")

    def capture(kind: str, params: dict[str, Any]) -> str:
        ctx = EffectContext("op-bad", "e", {"representor": (handle,)}, params, lab.env())
        with pytest.raises(ExecutorError) as err:
            EXECUTORS[kind].capture(ctx)
        return err.value.code

    assert capture(ATTACH, {"bridge": "other-br"}) == "E_BRIDGE_GRANT"
    # the port is on a bridge nobody approved: not ours to move
    ipr.link("add", ifname="foreignbr0", kind="bridge")
    foreign = ipr.link_lookup(ifname="foreignbr0")[0]
    rep = ipr.link_lookup(ifname=lab.reps["pf0vf1"][0])[0]
    ipr.link("set", index=rep, master=foreign)
    assert capture(ATTACH, {"bridge": "tenant-br"}) == "E_FOREIGN_MASTER"
    assert capture(VLAN, {"pvid": 100}) == "E_BRIDGE_GRANT"
    ipr.link("set", index=rep, master=0)
    ctx, before, observed = _drive(lab, ATTACH, {"bridge": "tenant-br"}, "attach")
    assert capture(VLAN, {"pvid": 101}) == "E_VLAN_DENIED"
    # the approved bridge's MAC changes (a new incarnation): the grant no longer holds
    br = ipr.link_lookup(ifname=lab.bridge)[0]
    ipr.link("set", index=br, address="02:00:00:00:be:02")
    assert capture(VLAN, {"pvid": 100}) == "E_BRIDGE_GRANT"
    EXECUTORS[ATTACH].undo(ctx, before, observed.outputs)
    assert by_name(ipr, lab.reps["pf0vf1"][0]).master == 0  # type: ignore[union-attr]


def _connect(node: Node, lab: Lab, op: str, ref: Any) -> Any:
    handle = rep_handle(lab.w, lab.reps, "pf0vf1")
    c = call(CONFIG, op, inputs={"representor": (handle,)}, sandbox=ref)
    return bind("accelerated-bridge-cni", "connect", c)


def _access_port(lab: Lab, client: str, name: str, vid: int) -> None:
    """A veth into ``client`` whose host end is an administrator's access port of ``vid`` on
    the bridge (PVID, egress untagged; the default VLAN 1 removed)."""
    ipr = lab.w.ipr(lab.w.host)
    ipr.link("add", ifname=f"{name}h", kind="veth", peer=f"{name}c")
    peer = ipr.link_lookup(ifname=f"{name}c")[0]
    ipr.link("set", index=peer, net_ns_fd=netns_path(client))
    host = ipr.link_lookup(ifname=f"{name}h")[0]
    ipr.link("set", index=host, master=ipr.link_lookup(ifname=lab.bridge)[0], state="up")
    bridge_vlan(lab.w.host, "add", "dev", f"{name}h", "vid", str(vid), "pvid", "untagged")
    bridge_vlan(lab.w.host, "del", "dev", f"{name}h", "vid", "1")


def test_accelerated_bridge_cni_program_forwards_its_vlans_and_removal(
    lab: Lab, tmp_path: Path
) -> None:
    """The bridge forwards to the attached representor exactly its VLANs: broadcasts from an
    access port of VLAN 100 (its PVID) and of VLAN 200 (a trunk VLAN) reach its transmit
    counter, those of VLAN 400 (not its) do not. netdevsim makes no VF netdev, so nothing
    flows from the representor's far side; this is the bridge's half of the path. Run by
    the unprivileged agent (only the chart's capabilities)."""
    node = Node(
        tmp_path / "state", lab.w.host, bridge_grants=(lab.grant,), server=unprivileged_server()
    )
    with (
        scratch_netns("abra") as c100,
        scratch_netns("abrb") as c200,
        scratch_netns("abrc") as c400,
    ):
        for ns in (c100, c200, c400):
            quiet(ns)
        for client, name, vid in ((c100, "xa", 100), (c200, "xb", 200), (c400, "xc", 400)):
            _access_port(lab, client, name, vid)
        try:
            baseline = lab.port()
            ref = node.pin("abr", lab.w.sandbox())
            node.run("abr-conn", _connect(node, lab, "abr-conn", ref), sandbox=ref)
            port = lab.port()
            assert port["vlans"] == [(100, True, True), (200, False, False), (300, False, False)]
            assert port["up"] is True and port["mtu"] == 1450
            ipr, port = lab.w.ipr(lab.w.host), lab.reps["pf0vf1"][0]
            start = tx_packets(ipr, port)
            broadcasts(c400, "xcc", "192.0.2.3/24", 5)  # VLAN 400: not the port's
            assert tx_packets(ipr, port) == start
            broadcasts(c100, "xac", "192.0.2.1/24", 5)  # VLAN 100: the port's PVID
            after_pvid = tx_packets(ipr, port)
            assert after_pvid - start >= 5
            broadcasts(c200, "xbc", "192.0.2.2/24", 5)  # VLAN 200: tagged on the port
            assert tx_packets(ipr, port) - after_pvid >= 5
            node.cleanup("abr-conn")
            assert lab.port() == baseline
        finally:
            node.release_pins()
            ipr = lab.w.ipr(lab.w.host)
            for name in ("xah", "xbh", "xch"):
                for index in ipr.link_lookup(ifname=name):
                    ipr.link("del", index=index)


@pytest.mark.crash
def test_accelerated_bridge_cni_crash_at_every_boundary(lab: Lab, tmp_path: Path) -> None:
    node = Node(tmp_path / "state", lab.w.host, bridge_grants=(lab.grant,))
    server = crash_fork_server()
    try:
        baseline = lab.port()
        sandbox = lab.w.sandbox()
        ref = node.pin("abr-survey", sandbox)
        program = _connect(node, lab, "abr-survey", ref)
        names = node.survey("abr-survey", program, ref)
        node.pins.release("abr-survey", cleanup_verified=True)
        assert lab.port() == baseline
        # intent + 3 effects x (before-image, apply, outcome) + completion; undo 3 x 2
        assert len(names["run"]) >= 11 and len(names["cleanup"]) >= 6, names
        for phase in ("run", "cleanup"):
            for index in crash_points(names[phase], effect_kinds(program), __name__):
                op = f"abr-{phase}{index}"
                ref = node.pin(op, sandbox)
                program = _connect(node, lab, op, ref)
                if phase == "cleanup":
                    node.run(op, program, sandbox=ref)
                passed = node.killed_at(server, index, phase, op, program, ref)
                assert passed and passed[-1] == names[phase][index], (phase, index, passed)
                with node.runner() as r:
                    for result in r.recover():
                        assert result.state.value in ("Undone", "Completed"), result
                    assert r.cleanup(op).state.value == "Undone"
                assert lab.port() == baseline, (phase, index, passed)
                node.pins.release(op, cleanup_verified=True)
    finally:
        server.close()
        node.release_pins()
