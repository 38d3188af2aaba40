"""``sriov/vf-configure/v1`` on a real SR-IOV PF: netdevsim built for the lab kernel.

The PF's VF table is the kernel's own (``ndo_set_vf_*`` of netdevsim, read back through
``IFLA_VFINFO_LIST``); every expectation is checked with iproute2's ``ip -j link show`` as an
independent reader. netdevsim makes no VF netdevs, so the program-level test hands the kernel
root a veth end as the VF's netdevice stand-in while the VF settings go to the real PF.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dmn.host.netns import LinkEnvironment, NamespaceRef
from dmn.opcodes.executor import EffectContext, ExecutorError, RecoveryObservation
from dmn.vocabulary.handles import Handle, Provenance, Scope
from dmn.vocabulary.terms import Access, HandleType, ScopeKind
from tests.crash_fork_server import crash_fork_server
from tests.crash_points import crash_points, effect_kinds
from tests.kernel.node import Node, bind, call, unprivileged_server
from tests.kernel.scratch import netns_path
from tests.kernel.world import EXECUTORS, World, add_address, host_handle, link, ping, world
from tests.kernel_lab import netdevsim

pytestmark = pytest.mark.kernel_lab

VF_CONFIGURE = "sriov/vf-configure/v1"
SETTINGS = {
    "mac": "02:11:22:33:44:55",
    "vlan": 100,
    "qos": 3,
    "spoofCheck": True,
    "trust": True,
    "minTxRate": 10,
    "maxTxRate": 100,
    "linkState": "disable",
}


def vf_table(dev: netdevsim.NetdevsimPf) -> list[dict[str, Any]]:
    """The PF's VF table as iproute2 prints it (the independent reader)."""
    out = subprocess.run(
        ["ip", "-n", dev.netns, "-d", "-j", "link", "show", "dev", dev.pf],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    table: list[dict[str, Any]] = json.loads(out)[0].get("vfinfo_list", [])
    return table


def set_vf(dev: netdevsim.NetdevsimPf, vf: int, *args: str) -> None:
    subprocess.run(
        ["ip", "-n", dev.netns, "link", "set", "dev", dev.pf, "vf", str(vf), *args],
        check=True,
        capture_output=True,
    )


def vf_handle(dev: netdevsim.NetdevsimPf, vf: int, pf_name: str | None = None) -> Handle:
    return Handle(
        id=f"vf-{dev.dev_id}-{vf}",
        type=HandleType.PCI_FUNCTION,
        inventory_id=f"netdevsim{dev.dev_id}/vf{vf}",
        scope=Scope(ScopeKind.HOST),
        accesses=frozenset({Access.READ, Access.EXCLUSIVE_CONFIGURE}),
        provenance=Provenance(claim_uid="claim-vf", request="vf", device=f"vf{vf}"),
        observations={"pfIfName": pf_name or dev.pf, "vfIndex": vf},
    )


def _env(w: World) -> LinkEnvironment:
    env = LinkEnvironment(host=NamespaceRef.at(netns_path(w.host)))
    w.stack.callback(env.close)
    return env


@pytest.fixture
def pf() -> Iterator[tuple[World, netdevsim.NetdevsimPf]]:
    with world() as w, netdevsim.netdevsim_pf(w.host, vfs=4) as dev:
        # a non-default baseline on every VF, so restoration is visibly exact
        for vf in range(4):
            set_vf(dev, vf, "mac", f"02:00:00:00:0{vf}:01", "vlan", "7", "qos", "1")
            set_vf(dev, vf, "spoofchk", "off", "trust", "off", "state", "auto")
            set_vf(dev, vf, "min_tx_rate", "0", "max_tx_rate", "0")
        yield w, dev


def test_vf_settings_applied_read_back_and_restored_exactly(
    pf: tuple[World, netdevsim.NetdevsimPf],
) -> None:
    w, dev = pf
    baseline = vf_table(dev)
    ex = EXECUTORS[VF_CONFIGURE]
    ctx = EffectContext("op-vf", "vf", {"function": (vf_handle(dev, 2),)}, SETTINGS, _env(w))
    before = ex.capture(ctx)
    assert ex.recover(ctx, before) is RecoveryObservation.NOT_APPLIED
    ex.apply(ctx, before)
    observed = ex.observe(ctx, before)
    assert observed.postconditions_ok, observed.detail
    assert ex.recover(ctx, before) is RecoveryObservation.APPLIED
    now = vf_table(dev)
    vf2 = now[2]
    assert vf2["address"] == "02:11:22:33:44:55"
    assert vf2["vlan_list"][0]["vlan"] == 100 and vf2["vlan_list"][0]["qos"] == 3
    assert vf2["spoofchk"] is True and vf2["trust"] is True
    assert (vf2["rate"]["min_tx"], vf2["rate"]["max_tx"]) == (10, 100)
    assert vf2["link_state"] == "disable"
    assert [now[i] for i in (0, 1, 3)] == [baseline[i] for i in (0, 1, 3)]  # neighbours alone
    # a trusted tenant changes its VF's MAC meanwhile: undo still restores the recorded one
    set_vf(dev, 2, "mac", "02:de:ad:be:ef:01")
    ex.undo(ctx, before, observed.outputs)
    assert vf_table(dev) == baseline


def test_unset_settings_are_left_alone(pf: tuple[World, netdevsim.NetdevsimPf]) -> None:
    w, dev = pf
    ex = EXECUTORS[VF_CONFIGURE]
    ctx = EffectContext(
        "op-vf", "vlan-only", {"function": (vf_handle(dev, 1),)}, {"vlan": 0}, _env(w)
    )
    before = ex.capture(ctx)
    ex.apply(ctx, before)
    assert ex.observe(ctx, before).postconditions_ok
    set_vf(dev, 1, "trust", "on")  # not ours: undo must not touch it
    expected = vf_table(dev)
    ex.undo(ctx, before, {})
    after = vf_table(dev)
    assert after[1]["vlan_list"][0]["vlan"] == 7 and after[1]["vlan_list"][0]["qos"] == 1
    assert after[1]["trust"] is True
    assert {k: v for k, v in after[1].items() if k != "vlan_list"} == {
        k: v for k, v in expected[1].items() if k != "vlan_list"
    }


@pytest.mark.adversarial
def test_vf_outside_the_pf_and_unmapped_handles_are_refused(
    pf: tuple[World, netdevsim.NetdevsimPf],
) -> None:
    w, dev = pf
    ex = EXECUTORS[VF_CONFIGURE]
    for handle, code in (
        (vf_handle(dev, 4), "E_VF_MAPPING"),  # the PF has VFs 0..3
        (vf_handle(dev, 0, pf_name="nosuchpf0"), "E_PF_NOT_FOUND"),
    ):
        ctx = EffectContext("op-bad", "vf", {"function": (handle,)}, SETTINGS, _env(w))
        with pytest.raises(ExecutorError) as err:
            ex.capture(ctx)
        assert err.value.code == code


@pytest.mark.adversarial
def test_a_look_alike_pf_is_never_written() -> None:
    """The recorded PF goes away; another PF takes its name. Undo and recovery leave it."""
    with world() as w:
        ex = EXECUTORS[VF_CONFIGURE]
        first = netdevsim.create(w.host, vfs=2)
        try:
            ctx = EffectContext(
                "op-ll", "vf", {"function": (vf_handle(first, 0),)}, SETTINGS, _env(w)
            )
            before = ex.capture(ctx)
            ex.apply(ctx, before)
        finally:
            netdevsim.destroy(first)
        with netdevsim.netdevsim_pf(w.host, vfs=2) as second:
            subprocess.run(
                ["ip", "-n", w.host, "link", "set", "dev", second.pf, "name", first.pf],
                check=True,
            )
            look_alike = netdevsim.NetdevsimPf(second.dev_id, first.pf, w.host)
            table = vf_table(look_alike)
            assert ex.recover(ctx, before) is RecoveryObservation.UNCERTAIN
            assert not ex.observe(ctx, before).postconditions_ok
            ex.undo(ctx, before, {})
            assert vf_table(look_alike) == table


@pytest.mark.adversarial
def test_a_renamed_pf_is_still_restored(pf: tuple[World, netdevsim.NetdevsimPf]) -> None:
    """The PF is renamed after apply (udev or an operator). The PF's identity used to include
    its name, so undo skipped it and the VF went back to the pool with the tenant's MAC,
    VLAN and trust; now it is followed by ifindex and bus device and restored exactly."""
    w, dev = pf
    baseline = vf_table(dev)
    ex = EXECUTORS[VF_CONFIGURE]
    ctx = EffectContext("op-rn", "vf", {"function": (vf_handle(dev, 2),)}, SETTINGS, _env(w))
    before = ex.capture(ctx)
    ex.apply(ctx, before)
    ipr = w.ipr(w.host)
    index = ipr.link_lookup(ifname=dev.pf)[0]
    ipr.link("set", index=index, state="down")
    ipr.link("set", index=index, ifname="renamedpf0")
    renamed = netdevsim.NetdevsimPf(dev.dev_id, "renamedpf0", dev.netns)
    assert ex.recover(ctx, before) is RecoveryObservation.APPLIED
    ex.undo(ctx, before, {})
    assert vf_table(renamed) == baseline


@pytest.mark.adversarial
def test_another_link_at_the_pfs_ifindex_is_never_written() -> None:
    """The recorded PF goes away and another link is made at its ifindex: recovery is
    Uncertain and undo refuses with E_IDENTITY_MISMATCH (quarantined) without writing."""
    with world() as w:
        ex = EXECUTORS[VF_CONFIGURE]
        first = netdevsim.create(w.host, vfs=2)
        try:
            ctx = EffectContext(
                "op-imp", "vf", {"function": (vf_handle(first, 0),)}, SETTINGS, _env(w)
            )
            before = ex.capture(ctx)
            ex.apply(ctx, before)
        finally:
            netdevsim.destroy(first)
        ipr = w.ipr(w.host)
        index = int(before["pf"]["index"])
        ipr.link("add", ifname="stranger0", index=index, kind="veth", peer="stranger1")
        assert ex.recover(ctx, before) is RecoveryObservation.UNCERTAIN
        with pytest.raises(ExecutorError) as err:
            ex.undo(ctx, before, {})
        assert err.value.code == "E_IDENTITY_MISMATCH"
        assert link(ipr, "stranger0").index == index


def _prepare_call(op: str, dev: netdevsim.NetdevsimPf, host: Any, stand_in: str) -> Any:
    config = {
        "mode": "kernel",
        "ifName": "net1",
        "mtu": 1500,
        "up": True,
        "vfSettings": True,
        "vfMac": "02:11:22:33:44:55",
        "vfVlan": 100,
        "vfQos": 3,
        "vfSpoofCheck": True,
        "vfTrust": True,
        "vfMaxTxRate": 100,
        "vfMinTxRate": 10,
        "vfLinkState": "enable",
    }
    allocation = {
        "interface": (host_handle(host, stand_in, Access.EXCLUSIVE_CONFIGURE),),
        "function": (vf_handle(dev, 3),),
    }
    return config, call(config, op, allocation=allocation)


def test_sriov_cni_with_vf_settings_runs_and_unprepares_exactly(
    pf: tuple[World, netdevsim.NetdevsimPf], tmp_path: Path
) -> None:
    """Run by the unprivileged agent: the VF settings' netlink writes to the PF, the VF
    stand-in's move and its undo hold only the chart's capabilities."""
    w, dev = pf
    node = Node(tmp_path / "state", w.host, server=unprivileged_server())
    try:
        sandbox, peer_ns = w.sandbox(), w.sandbox()
        host = w.ipr(w.host)
        stand_in, peer = w.veth(w.host)
        host.link("set", index=host.link_lookup(ifname=peer)[0], net_ns_fd=peer_ns)
        add_address(w.ipr(peer_ns), peer, "10.86.0.1/24")
        baseline, host_before = vf_table(dev), w.snapshot(w.host)
        config, prep = _prepare_call("vf-prep", dev, host, stand_in)
        prepared = node.run("vf-prep", bind("sriov-cni", "prepare", prep))
        vf3 = vf_table(dev)[3]
        assert vf3["address"] == "02:11:22:33:44:55" and vf3["link_state"] == "enable"
        assert vf3["vlan_list"][0]["vlan"] == 100 and vf3["vlan_list"][0]["qos"] == 3
        ref = node.pin("vf", sandbox)
        conn = call(config, "vf-conn", prepared=dict(prepared.exports), sandbox=ref)
        node.run("vf-conn", bind("sriov-cni", "connect", conn), sandbox=ref)
        add_address(w.ipr(sandbox), "net1", "10.86.0.2/24")
        assert link(w.ipr(sandbox), "net1").up
        assert ping(sandbox, "10.86.0.1")
        node.cleanup("vf-conn")
        node.cleanup("vf-prep")
        assert vf_table(dev) == baseline
        assert w.snapshot(w.host) == host_before
    finally:
        node.release_pins()


@pytest.mark.crash
def test_sriov_cni_vf_settings_crash_at_every_boundary(
    pf: tuple[World, netdevsim.NetdevsimPf], tmp_path: Path
) -> None:
    """SIGKILL the prepare run (and its cleanup) at every journal boundary; after recovery
    and cleanup from the journal alone the PF's VF table is exactly as before."""
    w, dev = pf
    node = Node(tmp_path / "state", w.host)
    server = crash_fork_server()
    try:
        host = w.ipr(w.host)
        stand_in, _ = w.veth(w.host)
        baseline = vf_table(dev)
        _, prep = _prepare_call("vf-survey", dev, host, stand_in)
        program = bind("sriov-cni", "prepare", prep)
        names = node.survey("vf-survey", program)
        assert vf_table(dev) == baseline
        # intent, 1 effect x (before-image, apply, outcome), completion; undo 1 x 2
        assert len(names["run"]) >= 4 and len(names["cleanup"]) >= 2, names
        for phase in ("run", "cleanup"):
            for index in crash_points(names[phase], effect_kinds(program), __name__):
                op = f"vf-{phase}{index}"
                _, prep = _prepare_call(op, dev, host, stand_in)
                program = bind("sriov-cni", "prepare", prep)
                if phase == "cleanup":
                    node.run(op, program)
                passed = node.killed_at(server, index, phase, op, program)
                assert passed and passed[-1] == names[phase][index], (phase, index, passed)
                with node.runner() as r:
                    for result in r.recover():
                        assert result.state.value in ("Undone", "Completed"), result
                    assert r.cleanup(op).state.value == "Undone"
                assert vf_table(dev) == baseline, (phase, index, passed)
    finally:
        server.close()
        node.release_pins()
