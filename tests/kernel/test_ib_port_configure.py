"""``ib/port-configure/v1`` at the executor level, on recorded IPoIB sysfs trees.

The InfiniBand link layer has no substrate on this machine or in the kernel lab (soft-RoCE
is Ethernet link layer; ib_ipoib attaches only to IB ports), so the IPoIB netdev is a sysfs
tree built from the real layout (``tests/fixtures/sysfs_layouts.py``: ``add_connectx3_ipoib``,
``add_infiniband_hca``). The namespaces are real: each tree is the sysfs *view* of a real
scratch namespace, keyed by that namespace's (dev, inode), and the executor opens and proves
the namespace exactly as on a node before it reads the tree. What a tree cannot do is the
kernel's part of a write (a mode change moving the MTU, refusals); where that matters the
test performs the kernel's side effect itself and says so.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dmn.host.netns import NamespaceRef
from dmn.host.netns_sysfs import RecordedNetnsSysfs
from dmn.opcodes.device_environment import DeviceEnvironment
from dmn.opcodes.executor import EffectContext, ExecutorError, RecoveryObservation
from dmn.vocabulary.handles import Handle, Provenance, Scope
from dmn.vocabulary.terms import Access, HandleType, LinkType, ScopeKind
from tests.fixtures.sysfs_layouts import (
    CX3_HCA,
    IB_HCA,
    SysfsBuilder,
    add_connectx3_ipoib,
    add_infiniband_hca,
)
from tests.kernel.scratch import netns_path, scratch_netns
from tests.kernel.world import EXECUTORS

pytestmark = pytest.mark.netns

KIND = "ib/port-configure/v1"
INDEX = 7
CHILD_ADDRESS = "80:00:02:0a:fe:80:00:00:00:00:00:00:00:02:c9:03:00:0a:1b:2c"
"""A pkey child of the same port: same parent, port and GID, its own QP (0x00020a)."""


def attrs(root: Path, name: str) -> dict[str, str]:
    nd = root / "class" / "net" / name
    return {a: (nd / a).read_text().strip() for a in ("ifindex", "mode", "mtu", "address")}


def rename(root: Path, old: str, new: str) -> None:
    """What ``ip link set <old> name <new>`` does to sysfs: the directory and the class link."""
    link = root / "class" / "net" / old
    target = link.resolve()
    target.rename(target.with_name(new))
    link.unlink()
    (root / "class" / "net" / new).symlink_to(
        Path("../../devices") / target.with_name(new).relative_to(root / "devices")
    )


@dataclass
class Case:
    env: DeviceEnvironment
    sandbox_tree: Path
    host_tree: Path
    sandbox: NamespaceRef
    builder: SysfsBuilder

    def handle(self, index: int = INDEX, name: str = "ib0") -> Handle:
        return Handle(
            id="ib-1",
            type=HandleType.KERNEL_INTERFACE,
            inventory_id=f"pci:{CX3_HCA}",
            scope=Scope(ScopeKind.SANDBOX, self.sandbox.identity),
            accesses=frozenset({Access.READ, Access.EXCLUSIVE_CONFIGURE}),
            link_type=LinkType.INFINIBAND,
            provenance=Provenance(claim_uid="claim-1", request="ib", device="ib0"),
            observations={"ifName": name, "ifIndex": index, "alias": "dmn:op0:ib-move"},
        )

    def ctx(self, parameters: dict[str, Any], handle: Handle | None = None) -> EffectContext:
        inputs = {"interface": (handle or self.handle(),)}
        return EffectContext("op1", "ipoib", inputs, parameters, self.env)


@pytest.fixture
def case(tmp_path: Path) -> Iterator[Case]:
    with scratch_netns("dmho") as host, scratch_netns("dmsb") as sb:
        b = SysfsBuilder(tmp_path / "sandbox-sys")
        add_connectx3_ipoib(b, ifindex=INDEX)
        host_tree = tmp_path / "host-sys"
        (host_tree / "class" / "net").mkdir(parents=True)
        host_ref, sb_ref = NamespaceRef.at(netns_path(host)), NamespaceRef.at(netns_path(sb))
        views = RecordedNetnsSysfs.of({sb_ref.identity: b.root, host_ref.identity: host_tree})
        env = DeviceEnvironment(host=host_ref, sandbox=sb_ref, netns_sysfs=views)
        try:
            yield Case(env, b.root, host_tree, sb_ref, b)
        finally:
            env.close()


def test_connected_mode_and_mtu_applied_observed_and_restored_exactly(case: Case) -> None:
    ex = EXECUTORS[KIND]
    ctx = case.ctx({"mode": "connected", "mtu": 65520})
    before = ex.capture(ctx)
    assert before["port"]["mode"] == "datagram" and before["port"]["mtu"] == 2044
    assert before["identity"]["parent"] == CX3_HCA and before["identity"]["devPort"] == 0
    assert before["identity"]["fixedAddress"] == "80:00:02:08:fe:80:00:00:00:00:00:00"
    original = attrs(case.sandbox_tree, "ib0")
    assert ex.recover(ctx, before) is RecoveryObservation.NOT_APPLIED
    ex.apply(ctx, before)
    assert attrs(case.sandbox_tree, "ib0") | {} == {**original, "mode": "connected", "mtu": "65520"}
    observed = ex.observe(ctx, before)
    assert observed.postconditions_ok, observed.detail
    assert observed.outputs["interface"] == (case.handle(),)  # the alias hint ib-state needs
    assert ex.recover(ctx, before) is RecoveryObservation.APPLIED
    ex.undo(ctx, before, observed.outputs)
    assert attrs(case.sandbox_tree, "ib0") == original
    ex.undo(ctx, before, observed.outputs)  # idempotent
    assert attrs(case.sandbox_tree, "ib0") == original


def test_mode_only_undo_also_restores_the_mtu_the_kernel_moved(case: Case) -> None:
    """The builtin programs bind only ``mode``; the kernel's ``ipoib_set_mode`` sets the
    connected-mode maximum MTU on the switch (the tree cannot, so the test does it)."""
    ex = EXECUTORS[KIND]
    ctx = case.ctx({"mode": "connected"})
    before = ex.capture(ctx)
    ex.apply(ctx, before)
    (case.sandbox_tree / "class" / "net" / "ib0" / "mtu").write_text("65520\n")
    assert ex.observe(ctx, before).postconditions_ok
    assert ex.recover(ctx, before) is RecoveryObservation.APPLIED
    ex.undo(ctx, before, {})
    assert attrs(case.sandbox_tree, "ib0")["mode"] == "datagram"
    assert attrs(case.sandbox_tree, "ib0")["mtu"] == "2044"


def test_connected_mode_refused_without_the_rc_flag(tmp_path: Path, case: Case) -> None:
    """Enhanced IPoIB (mlx5) has no connected mode: its address has no RC flag."""
    b = SysfsBuilder(tmp_path / "mlx5-sys")
    add_infiniband_hca(b)
    index = int((b.root / "class" / "net" / "ibp134s0" / "ifindex").read_text())
    views = RecordedNetnsSysfs.of({case.sandbox.identity: b.root})
    env = DeviceEnvironment(host=case.env.host, sandbox=case.sandbox, netns_sysfs=views)
    try:
        handle = case.handle(index, "ibp134s0")
        ctx = EffectContext("op1", "ipoib", {"interface": (handle,)}, {"mode": "connected"}, env)
        with pytest.raises(ExecutorError) as err:
            EXECUTORS[KIND].capture(ctx)
        assert err.value.code == "E_IPOIB_MODE_UNSUPPORTED" and "parameters.mode" in str(err.value)
        assert attrs(b.root, "ibp134s0")["mode"] == "datagram"
        ok = EffectContext("op1", "ipoib", {"interface": (handle,)}, {"mtu": 2044}, env)
        assert EXECUTORS[KIND].capture(ok)["identity"]["parent"] == IB_HCA
    finally:
        env.close()


def test_an_ethernet_netdev_is_not_configured(case: Case) -> None:
    case.builder.function("0000:05:00.0", root_bus="pci0000:00", vendor="0x8086", device="0x10d3")
    case.builder.netdev("eth0", "0000:05:00.0", mac="52:54:00:00:00:01", ifindex=9)
    with pytest.raises(ExecutorError) as err:
        EXECUTORS[KIND].capture(case.ctx({"mode": "datagram"}, case.handle(9, "eth0")))
    assert err.value.code == "E_NOT_INFINIBAND"


def test_no_view_of_the_namespace_is_refused(case: Case) -> None:
    env = DeviceEnvironment(
        host=case.env.host, sandbox=case.sandbox, netns_sysfs=RecordedNetnsSysfs()
    )
    try:
        ctx = EffectContext("op1", "ipoib", {"interface": (case.handle(),)}, {"mtu": 2044}, env)
        with pytest.raises(ExecutorError) as err:
            EXECUTORS[KIND].capture(ctx)
        assert err.value.code == "E_SYSFS_VIEW"
    finally:
        env.close()


def test_a_record_without_ipoib_identity_is_not_guessed(case: Case) -> None:
    ex = EXECUTORS[KIND]
    ctx = case.ctx({"mode": "connected"})
    before = ex.capture(ctx)
    ex.apply(ctx, before)
    del before["identity"]
    with pytest.raises(ExecutorError) as err:
        ex.undo(ctx, before, {})
    assert err.value.code == "E_IDENTITY_UNRECORDED"
    assert ex.recover(ctx, before) is RecoveryObservation.UNCERTAIN
    assert attrs(case.sandbox_tree, "ib0")["mode"] == "connected"


@pytest.mark.adversarial
def test_tenant_renames_ours_and_names_a_child_like_it(case: Case) -> None:
    """The tenant renames our ib0 and gives its own pkey child the name ``ib0``: undo
    restores the netdev at the recorded ifindex under its new name; the child is untouched."""
    ex = EXECUTORS[KIND]
    ctx = case.ctx({"mode": "connected", "mtu": 65520})
    before = ex.capture(ctx)
    ex.apply(ctx, before)
    rename(case.sandbox_tree, "ib0", "tenant9")
    case.builder.ipoib("ib0", CX3_HCA, address=CHILD_ADDRESS, mode="connected", mtu=9000)
    child = attrs(case.sandbox_tree, "ib0")
    assert ex.recover(ctx, before) is RecoveryObservation.APPLIED
    ex.undo(ctx, before, {})
    assert attrs(case.sandbox_tree, "tenant9")["mode"] == "datagram"
    assert attrs(case.sandbox_tree, "tenant9")["mtu"] == "2044"
    assert attrs(case.sandbox_tree, "ib0") == child


@pytest.mark.adversarial
@pytest.mark.parametrize("impostor", ["child", "other-port", "ethernet"])
def test_tenant_swaps_another_device_in_at_the_recorded_ifindex(case: Case, impostor: str) -> None:
    """Ours is moved away; another netdev takes its ifindex and name: refused with
    E_IDENTITY_MISMATCH at undo, apply and recover, and nothing is written to it."""
    ex = EXECUTORS[KIND]
    ctx = case.ctx({"mode": "connected"})
    before = ex.capture(ctx)
    ex.apply(ctx, before)
    nd = (case.sandbox_tree / "class" / "net" / "ib0").resolve()
    (case.sandbox_tree / "class" / "net" / "ib0").unlink()
    nd.rename(case.sandbox_tree / "moved-away")
    if impostor == "child":
        case.builder.ipoib("ib0", CX3_HCA, address=CHILD_ADDRESS, mode="connected", ifindex=INDEX)
    elif impostor == "other-port":
        case.builder.ipoib(
            "ib0", CX3_HCA, address=CX3_ADDRESS_PORT2, mode="connected", port=2, ifindex=INDEX
        )
    else:
        case.builder.function("0000:05:00.0", root_bus="pci0000:00", vendor="0x8086", device="1")
        case.builder.netdev("ib0", "0000:05:00.0", mac="52:54:00:00:00:01", ifindex=INDEX)
    foreign = attrs(case.sandbox_tree, "ib0") if impostor != "ethernet" else {}
    for step in (lambda: ex.undo(ctx, before, {}), lambda: ex.apply(ctx, before)):
        with pytest.raises(ExecutorError) as err:
            step()
        assert err.value.code == "E_IDENTITY_MISMATCH"
        assert "not touched" in str(err.value)
    assert ex.recover(ctx, before) is RecoveryObservation.UNCERTAIN
    if foreign:
        assert attrs(case.sandbox_tree, "ib0") == foreign


CX3_ADDRESS_PORT2 = "80:00:02:48:fe:80:00:00:00:00:00:00:00:02:c9:03:00:0a:1b:2d"


def test_namespace_gone_restores_the_refunded_netdev_on_the_host(
    tmp_path: Path, case: Case
) -> None:
    """The Pod's namespace died before cleanup: the kernel returned the IPoIB netdev to the
    initial namespace (``netns_refund``) under a new ifindex; undo finds it there by parent,
    port and fixed address octets and restores it."""
    ex = EXECUTORS[KIND]
    ctx = case.ctx({"mode": "connected", "mtu": 65520})
    before = ex.capture(ctx)
    ex.apply(ctx, before)
    host = SysfsBuilder(case.host_tree.parent / "host-refund")
    add_connectx3_ipoib(host, ifindex=3, mode="connected", mtu=65520)
    views = RecordedNetnsSysfs.of({case.env.host.identity: host.root})
    with scratch_netns("dmsb") as doomed:
        ref = NamespaceRef.at(netns_path(doomed))
        before = {**before, "netns": ref.to_json()}
        before["identity"] = {**before["identity"], "netns": ref.identity.to_json()}
    env = DeviceEnvironment(host=case.env.host, netns_sysfs=views)
    try:
        EXECUTORS[KIND].undo(
            EffectContext("op1", "ipoib", ctx.inputs, ctx.parameters, env), before, {}
        )
    finally:
        env.close()
    assert (
        attrs(host.root, "ib0")["mode"] == "datagram" and attrs(host.root, "ib0")["mtu"] == "2044"
    )
