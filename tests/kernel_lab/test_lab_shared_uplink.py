"""``bridge/shared-uplink-vlan/v1`` and the ``accelerated-bridge-cni-uplink`` profile on a
VLAN-filtering Linux bridge in the lab kernel.

The approved bridge is made by the test (VLAN filtering, a fixed MAC, up); its shared uplink is
the netdevsim PF netdev (its parent device, ``IFLA_PARENT_DEV_NAME``, is the netdevsim bus
device: this substrate has no PCI address), and the ports are the PF's switchdev
representors. The uplink's VLAN table is read back with iproute2's ``bridge -j vlan show``
(an independent reader). The reference count is the journal's: the executor-only tests give the
executor a small ledger of effect records in the states the runner would leave them in; the
program tests run the real binder, runner and RocksDB journal (whose records the executor reads
through :class:`~dmn.engine.effect_records.JournalEffectRecords`), and the crash matrix kills a
forked child at every journal boundary and recovers in a fresh process.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from dmn.host.netns import NamespaceRef
from dmn.opcodes.device_environment import BridgeGrant, DeviceEnvironment, UplinkGrant
from dmn.opcodes.effect_records import HOLDING_STATES, RecordedEffect
from dmn.opcodes.executor import EffectContext, ExecutorError, Observed
from tests.crash_fork_server import crash_fork_server
from tests.crash_points import crash_points, effect_kinds, rotated
from tests.kernel.node import Node, bind, call
from tests.kernel.scratch import netns_path
from tests.kernel.world import EXECUTORS, World, world
from tests.kernel_lab import netdevsim
from tests.kernel_lab.bridge_vlans import Table, bridge_vlan, vlan_tables, vlans
from tests.kernel_lab.test_lab_switchdev import rep_handle

pytestmark = pytest.mark.kernel_lab

KIND = "bridge/shared-uplink-vlan/v1"
BRIDGE_MAC = "02:00:00:00:be:11"
PLUGIN = "accelerated-bridge-cni-uplink"
CONFIG = {"bridge": "tenant-br", "uplink": "rack-uplink", "vlan": 100, "trunk": [200], "mtu": 1450}


@dataclass
class Ledger:
    """The journal's effect records as the runner would leave them, for executor-only tests."""

    records: dict[tuple[str, str], tuple[str, Any]] = field(default_factory=dict)

    def held(self, kind: str) -> Sequence[RecordedEffect]:
        return [
            RecordedEffect(op, eff, state, before)
            for (op, eff), (state, before) in self.records.items()
            if state in HOLDING_STATES
        ]

    def serialized(self, name: str) -> AbstractContextManager[None]:
        return nullcontext()  # these tests run one section at a time


@dataclass
class Lab:
    w: World
    dev: netdevsim.NetdevsimPf
    reps: dict[str, tuple[str, str]]
    bridge: str
    grant: BridgeGrant
    ledger: Ledger = field(default_factory=Ledger)

    @property
    def uplink(self) -> str:
        return self.dev.pf

    def env(self, grant: BridgeGrant | None = None, records: Any = True) -> DeviceEnvironment:
        g = grant or self.grant
        env = DeviceEnvironment(
            host=NamespaceRef.at(netns_path(self.w.host)),
            bridge_grants={g.alias: g},
            effect_records=self.ledger if records is True else records,
        )
        self.w.stack.callback(env.close)
        return env

    def table(self) -> Table:
        return vlans(self.w.host, self.uplink)

    def bridge_state(self) -> dict[str, Any]:
        """Everything removal must leave as it was: every link's master, MTU, state and MAC,
        the bridge's own attributes and every bridge port's (and the bridge's) VLAN table."""
        out = subprocess.run(
            ["ip", "-n", self.w.host, "-j", "-d", "link", "show"],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
        links: dict[str, Any] = {}
        for row in json.loads(out):
            keep = {k: row.get(k) for k in ("master", "mtu", "operstate", "address", "flags")}
            if row["ifname"] == self.bridge:
                info = row.get("linkinfo", {}).get("info_data", {})
                keep["bridge"] = {k: info.get(k) for k in ("vlan_filtering", "vlan_protocol")}
            links[row["ifname"]] = keep
        return {"links": links, "vlans": vlan_tables(self.w.host)}


@pytest.fixture
def lab() -> Iterator[Lab]:
    with world() as w, netdevsim.netdevsim_pf(w.host, vfs=2) as dev:
        netdevsim.switchdev(dev)
        reps = netdevsim.representors(dev)
        ipr = w.ipr(w.host)
        bridge = "uplinkbr0"
        subprocess.run(
            ["ip", "-n", w.host, "link", "add", bridge, "type", "bridge", "vlan_filtering", "1"],
            check=True,
        )
        br = ipr.link_lookup(ifname=bridge)[0]
        ipr.link("set", index=br, address=BRIDGE_MAC, mtu=1450, state="up")
        pf = ipr.link_lookup(ifname=dev.pf)[0]
        ipr.link("set", index=pf, master=br, state="up")
        for ifname, _ in reps.values():
            ipr.link("set", index=ipr.link_lookup(ifname=ifname)[0], mtu=1400, state="up")
        uplink = UplinkGrant("rack-uplink", dev.pf, f"netdevsim{dev.dev_id}", frozenset({100, 200}))
        grant = BridgeGrant("tenant-br", bridge, frozenset({100, 200, 300}), BRIDGE_MAC, (uplink,))
        yield Lab(w, dev, reps, bridge, grant)


@dataclass
class Held:
    ctx: EffectContext
    before: Any
    observed: Observed


def hold(lab: Lab, op: str, vid: int, port: str = "pf0vf1", env: Any = None) -> Held:
    """capture → apply → observe one reference, recorded in the ledger as the runner would."""
    ex = EXECUTORS[KIND]
    handle = rep_handle(lab.w, lab.reps, port)
    params = {"bridge": "tenant-br", "uplink": "rack-uplink", "vlanId": vid}
    ctx = EffectContext(op, "uplink-vlan", {"representor": (handle,)}, params, env or lab.env())
    before = ex.capture(ctx)
    lab.ledger.records[(op, "uplink-vlan")] = ("Applying", before)
    ex.apply(ctx, before)
    observed = ex.observe(ctx, before)
    assert observed.postconditions_ok, observed.detail
    lab.ledger.records[(op, "uplink-vlan")] = ("Applied", before)
    return Held(ctx, before, observed)


def release(lab: Lab, held: Held) -> None:
    """undo one reference: Undoing while it runs, Undone after (Quarantined if it refuses)."""
    key = (held.ctx.operation_id, held.ctx.effect_id)
    lab.ledger.records[key] = ("Undoing", held.before)
    try:
        EXECUTORS[KIND].undo(held.ctx, held.before, held.observed.outputs)
    except ExecutorError:
        lab.ledger.records[key] = ("Quarantined", held.before)
        raise
    lab.ledger.records[key] = ("Undone", held.before)


def test_two_attachments_share_a_vid_until_the_last_undo(lab: Lab) -> None:
    baseline = lab.table()
    assert baseline == [(1, True, True)]  # the bridge's default PVID on its new port
    a = hold(lab, "op-a", 100, "pf0vf0")
    assert a.before["created"] is True and lab.table() == [(1, True, True), (100, False, False)]
    b = hold(lab, "op-b", 100, "pf0vf1")
    assert b.before["created"] is True  # joined a reference that created it
    release(lab, a)
    assert lab.table() == [(1, True, True), (100, False, False)]  # b still holds it
    release(lab, b)
    assert lab.table() == baseline
    # undone in the other order: the first to go never removes what the other holds
    a, b = hold(lab, "op-a2", 100, "pf0vf0"), hold(lab, "op-b2", 100, "pf0vf1")
    release(lab, b)
    assert (100, False, False) in lab.table()
    release(lab, a)
    assert lab.table() == baseline
    # two releases at once (concurrent operations, both Undoing): neither needs the VID any
    # more, so it goes; the second finds it gone
    a, b = hold(lab, "op-a3", 100, "pf0vf0"), hold(lab, "op-b3", 100, "pf0vf1")
    lab.ledger.records[("op-a3", "uplink-vlan")] = ("Undoing", a.before)
    release(lab, b)
    assert lab.table() == baseline
    release(lab, a)
    assert lab.table() == baseline
    # a reference taken while its creator is being released is the creator's heir
    c = hold(lab, "op-c3", 100, "pf0vf0")
    lab.ledger.records[("op-c3", "uplink-vlan")] = ("Undoing", c.before)
    d = hold(lab, "op-d3", 100, "pf0vf1")
    assert d.before["created"] is True
    release(lab, c)
    assert (100, False, False) in lab.table()  # d needs it
    release(lab, d)
    assert lab.table() == baseline


def test_a_vid_the_administrator_configured_first_survives_every_undo(lab: Lab) -> None:
    bridge_vlan(lab.w.host, "add", "dev", lab.uplink, "vid", "200")
    baseline = lab.table()
    assert (200, False, False) in baseline
    a = hold(lab, "op-a", 200, "pf0vf0")
    b = hold(lab, "op-b", 200, "pf0vf1")
    assert a.before["created"] is False and b.before["created"] is False
    release(lab, a)
    release(lab, b)
    assert lab.table() == baseline


def test_refusals_are_reason_coded(lab: Lab) -> None:
    ipr = lab.w.ipr(lab.w.host)

    def refused(params: dict[str, Any], env: Any = None) -> str:
        handle = rep_handle(lab.w, lab.reps, "pf0vf1")
        full = {"bridge": "tenant-br", "uplink": "rack-uplink", "vlanId": 100, **params}
        ctx = EffectContext("op-bad", "e", {"representor": (handle,)}, full, env or lab.env())
        with pytest.raises(ExecutorError) as err:
            EXECUTORS[KIND].capture(ctx)
        return err.value.code

    assert refused({"uplink": "other-uplink"}) == "E_UPLINK_GRANT"
    assert refused({"vlanId": 300}) == "E_VLAN_DENIED"  # granted on the bridge, not the uplink
    assert refused({"bridge": "other-br"}) == "E_BRIDGE_GRANT"
    wrong_device = UplinkGrant("rack-uplink", lab.uplink, "0000:3b:00.0", frozenset({100}))
    moved = BridgeGrant("tenant-br", lab.bridge, frozenset({100}), BRIDGE_MAC, (wrong_device,))
    assert refused({}, lab.env(moved)) == "E_UPLINK_GRANT"
    # a representor's name is not an uplink: same netdevsim device, but not the granted name
    rep_name = lab.reps["pf0vf0"][0]
    device = f"netdevsim{lab.dev.dev_id}"
    rep_as_uplink = UplinkGrant("rack-uplink", rep_name, device, frozenset({100}))
    as_rep = BridgeGrant("tenant-br", lab.bridge, frozenset({100}), BRIDGE_MAC, (rep_as_uplink,))
    assert refused({}, lab.env(as_rep)) == "E_UPLINK_NOT_PORT"  # not on the bridge
    assert refused({}, lab.env(records=None)) == "E_REFERENCES_UNAVAILABLE"
    pf = ipr.link_lookup(ifname=lab.uplink)[0]
    ipr.link("set", index=pf, master=0)
    assert refused({}) == "E_UPLINK_NOT_PORT"
    assert lab.ledger.records == {}  # nothing was referenced, nothing changed


@pytest.mark.adversarial
def test_foreign_changes_between_attach_and_undo(lab: Lab) -> None:
    ipr = lab.w.ipr(lab.w.host)
    baseline = lab.table()
    # 1. the administrator makes our VID the uplink's PVID: foreign flags stay, reserved
    a = hold(lab, "op-a", 100)
    bridge_vlan(lab.w.host, "add", "dev", lab.uplink, "vid", "100", "pvid", "untagged")
    with pytest.raises(ExecutorError) as err:
        release(lab, a)
    assert err.value.code == "E_UPLINK_VLAN_CHANGED"
    assert (100, True, True) in lab.table()
    # the quarantined record still holds VID 100: a new reference joins it as ours, and its
    # undo never removes what the reserved record holds
    b = hold(lab, "op-b", 100, "pf0vf0")
    assert b.before["created"] is True
    release(lab, b)
    assert (100, True, True) in lab.table()
    bridge_vlan(lab.w.host, "del", "dev", lab.uplink, "vid", "100")
    bridge_vlan(lab.w.host, "add", "dev", lab.uplink, "vid", "1", "pvid", "untagged")
    lab.ledger.records.clear()  # the operator resolved the quarantined effect
    assert lab.table() == baseline
    # 2. a port nobody recorded (an administrator's) uses our VID: it stays, reserved
    c = hold(lab, "op-c", 200)
    rep = ipr.link_lookup(ifname=lab.reps["pf0vf0"][0])[0]
    br = ipr.link_lookup(ifname=lab.bridge)[0]
    ipr.link("set", index=rep, master=br)
    bridge_vlan(lab.w.host, "add", "dev", lab.reps["pf0vf0"][0], "vid", "200")
    with pytest.raises(ExecutorError) as err:
        release(lab, c)
    assert err.value.code == "E_UPLINK_VLAN_IN_USE"
    assert (200, False, False) in lab.table()
    ipr.link("set", index=rep, master=0)
    release(lab, c)  # the retried undo, once the dependency is gone
    assert lab.table() == baseline
    # 3. the administrator removed our VID already: undo has nothing left to remove
    d = hold(lab, "op-d", 100)
    bridge_vlan(lab.w.host, "del", "dev", lab.uplink, "vid", "100")
    release(lab, d)
    assert lab.table() == baseline
    # 4. the bridge's MAC changes (a new incarnation?): our VID stays, reserved
    e = hold(lab, "op-e", 100)
    ipr.link("set", index=br, address="02:00:00:00:be:12")
    with pytest.raises(ExecutorError) as err:
        release(lab, e)
    assert err.value.code == "E_LINK_CHANGED"
    assert (100, False, False) in lab.table()
    ipr.link("set", index=br, address=BRIDGE_MAC)
    release(lab, e)
    assert lab.table() == baseline
    # 5. the uplink left the bridge: the kernel dropped its VLANs with it; undo skips
    f = hold(lab, "op-f", 100)
    pf = ipr.link_lookup(ifname=lab.uplink)[0]
    ipr.link("set", index=pf, master=0)
    release(lab, f)
    ipr.link("set", index=pf, master=br)
    assert lab.table() == baseline


# ---------------------------------------------------------------- the program, real journal


def _connect(lab: Lab, op: str, ref: NamespaceRef, port: str = "pf0vf1") -> Any:
    handle = rep_handle(lab.w, lab.reps, port)
    c = call(CONFIG, op, inputs={"representor": (handle,)}, sandbox=ref)
    return bind(PLUGIN, "connect", c)


def test_uplink_profile_program_two_attachments_and_removal(lab: Lab, tmp_path: Path) -> None:
    node = Node(tmp_path / "state", lab.w.host, bridge_grants=(lab.grant,))
    try:
        baseline = lab.bridge_state()
        sandbox = lab.w.sandbox()
        ref_a, ref_b = node.pin("upa", sandbox), node.pin("upb", lab.w.sandbox())
        node.run("upa-conn", _connect(lab, "upa-conn", ref_a, "pf0vf0"), sandbox=ref_a)
        assert lab.table() == [(1, True, True), (100, False, False)]
        node.run("upb-conn", _connect(lab, "upb-conn", ref_b, "pf0vf1"), sandbox=ref_b)
        assert lab.table() == [(1, True, True), (100, False, False)]
        for port in ("pf0vf0", "pf0vf1"):
            assert vlans(lab.w.host, lab.reps[port][0]) == [(100, True, True), (200, False, False)]
        node.cleanup("upa-conn")
        assert lab.table() == [(1, True, True), (100, False, False)]  # upb holds VID 100
        node.cleanup("upb-conn")
        assert lab.bridge_state() == baseline
    finally:
        node.release_pins()


def _boundaries(node: Node, lab: Lab, phase: str) -> tuple[list[str], dict[str, str]]:
    """The journal boundary names of one uninterrupted run (or cleanup) of the program, and
    its effects' opcodes by id."""
    op = f"ref-{phase}"
    ref = node.pin(op, lab.w.sandbox())
    program = _connect(lab, op, ref)
    names = node.survey(op, program, ref)[phase]
    node.pins.release(op, cleanup_verified=True)
    return names, effect_kinds(program)


@pytest.mark.crash
@pytest.mark.parametrize("shared", [False, True], ids=["alone", "shared"])
def test_uplink_profile_crash_at_every_boundary(lab: Lab, tmp_path: Path, shared: bool) -> None:
    """SIGKILL at every journal boundary of connect and of its removal, recovery and cleanup
    in a fresh process: the bridge is exactly as before each time.

    ``shared``: another attachment holds VID 100 throughout, so no crash or recovery may ever
    remove it. There the kill points are only the boundaries of the uplink-vlan effect (where
    the reference is taken and released; the other effects' boundaries are the ``alone``
    matrix's, and each kill point costs seconds under TCG)."""
    node = Node(tmp_path / "state", lab.w.host, bridge_grants=(lab.grant,))
    server = crash_fork_server()
    try:
        if shared:
            holder = node.pin("holder", lab.w.sandbox())
            node.run("holder", _connect(lab, "holder", holder, "pf0vf0"), sandbox=holder)
        baseline = lab.bridge_state()
        sandbox = lab.w.sandbox()
        points: dict[str, list[str]] = {"run": [], "cleanup": []}
        surveyed = {"run": 0, "cleanup": 0}
        for phase in ("run", "cleanup"):
            names, kinds = _boundaries(node, lab, phase)
            assert lab.bridge_state() == baseline
            if shared:
                uplink = [i for i, name in enumerate(names) if name.endswith(":uplink-vlan")]
                wanted = rotated(uplink, __name__)
            else:
                wanted = crash_points(names, kinds, __name__)
                surveyed[phase] = len(names)
            for index in wanted:
                op = f"up-{phase}{index}"
                ref = node.pin(op, sandbox)
                program = _connect(lab, op, ref)
                if phase == "cleanup":
                    node.run(op, program, sandbox=ref)
                passed = node.killed_at(server, index, phase, op, program, ref)
                assert passed and passed[-1] == names[index], (phase, index, passed)
                with node.runner() as r:
                    for result in r.recover():
                        assert result.state.value in ("Undone", "Completed"), result
                    assert r.cleanup(op).state.value == "Undone"
                assert lab.bridge_state() == baseline, (phase, index, passed)
                node.pins.release(op, cleanup_verified=True)
                points[phase].append(names[index])
        if shared:
            assert points == {
                "run": rotated(
                    [
                        "after-before-image:uplink-vlan",
                        "after-apply:uplink-vlan",
                        "after-outcome:uplink-vlan",
                    ],
                    __name__,
                ),
                "cleanup": rotated(
                    ["after-undoing:uplink-vlan", "after-undo:uplink-vlan"], __name__
                ),
            }, points
            assert (100, False, False) in lab.table()
            node.cleanup("holder")
            assert lab.table() == [(1, True, True)]
        else:
            # intent + 4 effects x (before-image, apply, outcome) + completion; undo 4 x 2
            assert surveyed["run"] >= 14 and surveyed["cleanup"] >= 8, (surveyed, points)
    finally:
        server.close()
        node.release_pins()
