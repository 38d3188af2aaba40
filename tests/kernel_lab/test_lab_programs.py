"""Builtin programs needing bond, 802.1Q and ipvlan, run inside the kernel lab VM.

Through the real binder, runner, RocksDB journal and executors: ipvlan-cni shares of one
parent, and design §4.3's dual-vf-bond-vlan (two sriov-cni kernel roots — veth ends as VF
stand-ins — bonded by bond-cni with vlan-cni on top), verified with traffic, cleaned up from
the journal, and crashed (SIGKILL) at every journal boundary of the bond and VLAN steps.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dmn.host.rtnetlink.links import all_links, by_name
from dmn.vocabulary.terms import Access
from tests.crash_fork_server import CrashForkServer, crash_fork_server
from tests.crash_points import crash_points, effect_kinds
from tests.kernel.node import Node, bind, call
from tests.kernel.world import World, add_address, host_handle, link, ping, world

pytestmark = pytest.mark.kernel_lab

IPVLAN_CONFIG = {"mode": "l2", "ifName": "net1", "mtu": 1500, "up": True}
BOND_CONFIG = {
    "ifName": "bond0",
    "mtu": 1500,
    "up": True,
    "mode": "active-backup",
    "monitorIntervalMs": 100,
    "failOverMac": "active",
}
VLAN_CONFIG = {"ifName": "tenant100", "mtu": 1500, "up": True, "vlanId": 100}


@pytest.fixture
def node_world(tmp_path: Path) -> Iterator[tuple[Node, World]]:
    with world() as w:
        node = Node(tmp_path / "state", w.host)
        try:
            yield node, w
        finally:
            node.release_pins()


def test_ipvlan_cni_two_shares(node_world: tuple[Node, World]) -> None:
    node, w = node_world
    sb1, sb2 = w.sandbox(), w.sandbox()
    host = w.ipr(w.host)
    parent, _ = w.veth(w.host)
    baseline = w.snapshot(w.host)
    for i, (sb, addr) in enumerate(((sb1, "10.83.0.1/24"), (sb2, "10.83.0.2/24"))):
        op = f"ipv{i}"
        handle = host_handle(host, parent, Access.CREATE_CHILD, hid="parent-1")
        prep = call(IPVLAN_CONFIG, f"{op}-prep", allocation={"parent": (handle,)})
        prepared = node.run(f"{op}-prep", bind("ipvlan-cni", "prepare", prep))
        ref = node.pin(op, sb)
        conn = call(IPVLAN_CONFIG, f"{op}-conn", prepared=dict(prepared.exports), sandbox=ref)
        node.run(f"{op}-conn", bind("ipvlan-cni", "connect", conn), sandbox=ref)
        assert link(w.ipr(sb), "net1").kind == "ipvlan"
        add_address(w.ipr(sb), "net1", addr)
    assert ping(sb1, "10.83.0.2")
    for op in ("ipv0-conn", "ipv0-prep", "ipv1-conn", "ipv1-prep"):
        node.cleanup(op)
    assert w.snapshot(w.host) == baseline


class DualVfBondVlan:
    """design §4.3 on veth stand-ins: roots left/right → bond uplink → VLAN tenant."""

    def __init__(self, node: Node, w: World, tag: str) -> None:
        self.node, self.w, self.tag = node, w, tag
        self.sandbox, self.peer_ns = w.sandbox(), w.sandbox()
        host, peer = w.ipr(w.host), w.ipr(self.peer_ns)
        self.roots = []
        peer.link("add", ifname="br0", kind="bridge")
        br = peer.link_lookup(ifname="br0")[0]
        for _ in range(2):
            a, b = w.veth(w.host)
            host.link("set", index=host.link_lookup(ifname=b)[0], net_ns_fd=self.peer_ns)
            peer.link("set", index=peer.link_lookup(ifname=b)[0], master=br, state="up")
            self.roots.append(a)
        peer.link("set", index=br, state="up")
        peer.link("add", ifname="br0.100", kind="vlan", link=br, vlan_id=100)
        add_address(peer, "br0.100", "10.84.0.1/24")
        self.ref = node.pin(tag, self.sandbox)
        self.exports: dict[str, Any] = {}

    def op(self, step: str) -> str:
        return f"{self.tag}-{step}"

    def roots_up(self) -> None:
        host = self.w.ipr(self.w.host)
        for step, root in zip(("left", "right"), self.roots, strict=True):
            name = "vfleft" if step == "left" else "vfright"
            config = {"mode": "kernel", "ifName": name, "mtu": 1500, "up": True}
            handle = host_handle(host, root, Access.EXCLUSIVE_CONFIGURE, hid=f"vf-{step}")
            handle = replace(handle, accesses=handle.accesses | {Access.ATTACH_MEMBER})
            prep = call(config, self.op(f"{step}-prep"), allocation={"interface": (handle,)})
            prepared = self.node.run(self.op(f"{step}-prep"), bind("sriov-cni", "prepare", prep))
            conn = call(
                config,
                self.op(f"{step}-conn"),
                prepared=dict(prepared.exports),
                sandbox=self.ref,
            )
            result = self.node.run(
                self.op(f"{step}-conn"), bind("sriov-cni", "connect", conn), sandbox=self.ref
            )
            self.exports[step] = result.exports["interface"][0]

    def bond_program(self) -> Any:
        members = (self.exports["left"], self.exports["right"])
        c = call(BOND_CONFIG, self.op("uplink"), inputs={"members": members}, sandbox=self.ref)
        return bind("bond-cni", "connect", c)

    def vlan_program(self) -> Any:
        parent = (self.exports["uplink"],)
        c = call(VLAN_CONFIG, self.op("tenant"), inputs={"parent": parent}, sandbox=self.ref)
        return bind("vlan-cni", "connect", c)

    def bond(self) -> None:
        result = self.node.run(self.op("uplink"), self.bond_program(), sandbox=self.ref)
        self.exports["uplink"] = result.exports["interface"][0]

    def vlan(self) -> None:
        self.node.run(self.op("tenant"), self.vlan_program(), sandbox=self.ref)

    def teardown(self, steps: tuple[str, ...]) -> None:
        for step in steps:
            self.node.cleanup(self.op(step))


def test_dual_vf_bond_vlan_topology(node_world: tuple[Node, World]) -> None:
    node, w = node_world
    topo = DualVfBondVlan(node, w, "topo")
    baseline = w.snapshot(w.host)
    topo.roots_up()
    topo.bond()
    topo.vlan()
    sb = w.ipr(topo.sandbox)
    bond0 = link(sb, "bond0")
    assert bond0.info["IFLA_BOND_MODE"] == 1 and bond0.info["IFLA_BOND_MIIMON"] == 100
    assert link(sb, "vfleft").master == bond0.index == link(sb, "vfright").master
    assert link(sb, "tenant100").info["IFLA_VLAN_ID"] == 100
    add_address(sb, "tenant100", "10.84.0.2/24")
    assert ping(topo.sandbox, "10.84.0.1")
    # removal order: VLAN -> bond membership -> bond -> roots
    topo.teardown(("tenant", "uplink", "right-conn", "left-conn", "right-prep", "left-prep"))
    assert {x.name for x in all_links(sb)} == {"lo"}
    assert w.snapshot(w.host) == baseline


@pytest.mark.crash
def test_bond_and_vlan_crash_at_every_boundary(tmp_path: Path) -> None:
    server = crash_fork_server()
    try:
        with world() as w:
            node = Node(tmp_path / "state", w.host)
            try:
                _bond_vlan_crashes(server, node, w)
            finally:
                node.release_pins()
    finally:
        server.close()


def _sandbox_state(w: World, ns: str) -> dict[str, Any]:
    ipr = w.ipr(ns)
    return {x.name: (x.kind, x.mtu, x.up, x.mac, x.alias, x.master > 0) for x in all_links(ipr)}


def _bond_vlan_crashes(server: CrashForkServer, node: Node, w: World) -> None:
    topo = DualVfBondVlan(node, w, "crash")
    host_baseline = w.snapshot(w.host)
    topo.roots_up()
    # foreign neighbours in the sandbox: another bond and a dummy that must survive everything
    sb = w.ipr(topo.sandbox)
    sb.link("add", ifname="bondx", kind="bond", bond_mode=1, bond_miimon=50)
    sb.link("add", ifname="keep0", kind="dummy")
    points = {"uplink": 0, "tenant": 0}
    for step in ("uplink", "tenant"):
        if step == "tenant":
            topo.bond()
        before = _sandbox_state(w, topo.sandbox)
        program = topo.bond_program() if step == "uplink" else topo.vlan_program()
        op = topo.op(step)
        names = node.survey(op, program, topo.ref)
        assert _sandbox_state(w, topo.sandbox) == before
        points[step] = len(names["run"]) + len(names["cleanup"])
        for phase in ("run", "cleanup"):
            if phase == "cleanup":
                node.run(op, program, sandbox=topo.ref)
            for index in crash_points(names[phase], effect_kinds(program), __name__):
                action = "run" if phase == "run" else "cleanup"
                passed = node.killed_at(server, index, action, op, program, topo.ref)
                assert passed and passed[-1] == names[phase][index], (step, phase, index)
                # one journal open per crash point: recover, clean up, check, re-arm
                with node.runner() as r:
                    for result in r.recover():
                        assert result.state.value in ("Undone", "Completed"), result
                    assert r.cleanup(op).state.value == "Undone"
                    state = _sandbox_state(w, topo.sandbox)
                    assert state == before, (step, phase, index, passed)
                    if phase == "cleanup":
                        env = node.env(topo.ref)
                        try:
                            assert r.run(op, f"scope/{op}", program, env=env).ok
                        finally:
                            env.close()
            if phase == "cleanup":
                node.cleanup(op)
        if step == "tenant":
            node.cleanup(topo.op("uplink"))
    topo.teardown(("right-conn", "left-conn", "right-prep", "left-prep"))
    assert by_name(sb, "bond0") is None
    assert by_name(sb, "bondx") is not None and by_name(sb, "keep0") is not None
    assert w.snapshot(w.host) == host_baseline
    # bond: intent + 4 effects x 3 + completion; VLAN: intent + 2 x 3 + completion; + undo
    assert points["uplink"] >= 14 + 8 and points["tenant"] >= 8 + 4
