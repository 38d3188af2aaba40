"""sysctl/interface/v1 and ethtool/features/v1 against the host kernel, in scratch namespaces.

A veth stand-in for an allocated device is moved into a sandbox as ``net1`` (linux/link-move),
then each opcode is driven the way the runner does it. Every value is read back from inside
the namespace by another path than the executor's: sysctls with ``cat`` under
``ip netns exec``, features with the legacy ethtool ioctl (pyroute2's ``Ethtool``) in a
process started in the namespace. The adversarial tests play the tenant, who holds
CAP_NET_ADMIN in its sandbox: it renames our link, gives a link of its own our link's old name,
changes the settings itself, or puts another link at our link's ifindex.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import socket
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from dmn.engine.binder import bind_program
from dmn.engine.bound import BoundProgram
from dmn.host import ethtool as host_ethtool
from dmn.host import sysctl as kernel_sysctl
from dmn.host.errors import HostError
from dmn.host.netlink_wire import NETLINK_GENERIC, NetlinkFailure, genl_family
from dmn.host.netns import NamespaceRef
from dmn.host.sysctl import InterfaceSysctl
from dmn.interpreter.loader import load_plugin_dir
from dmn.opcodes.executor import EffectContext, ExecutorError, RecoveryObservation
from dmn.vocabulary.terms import Access
from tests.kernel.interface_readback import HOST_TUNED, features_in, sysctl_in
from tests.kernel.node import Node, call, unprivileged_server
from tests.kernel.scratch import netns_path
from tests.kernel.world import EXECUTORS, Done, World, drive, host_handle, link, world

pytestmark = pytest.mark.netns

MOVE = "linux/link-move/v1"
SYSCTL = "sysctl/interface/v1"
FEATURES = "ethtool/features/v1"

SETTINGS = {
    "ipv4RpFilter": 2,
    "ipv4ArpIgnore": 8,
    "ipv4ArpAnnounce": 2,
    "ipv4AcceptLocal": True,
    "ipv6AcceptRa": 0,
    "ipv6Autoconf": False,
    "ipv6AddrGenMode": 1,
}
KEYS = {
    "ipv4RpFilter": ("ipv4", "rp_filter"),
    "ipv4ArpIgnore": ("ipv4", "arp_ignore"),
    "ipv4ArpAnnounce": ("ipv4", "arp_announce"),
    "ipv4AcceptLocal": ("ipv4", "accept_local"),
    "ipv6AcceptRa": ("ipv6", "accept_ra"),
    "ipv6Autoconf": ("ipv6", "autoconf"),
    "ipv6AddrGenMode": ("ipv6", "addr_gen_mode"),
}


def _bind(plugin: Any, hook: str, c: Any) -> BoundProgram:
    bound = bind_program(plugin, hook, c)
    assert isinstance(bound, BoundProgram), [str(d) for d in bound]
    return bound


def settings_in(ns: str, name: str) -> dict[str, int]:
    return {param: sysctl_in(ns, family, name, key) for param, (family, key) in KEYS.items()}


@contextmanager
def moved_root() -> Iterator[tuple[World, str, Done]]:
    """A world with a veth root moved into a sandbox as ``net1``; the move undone at exit."""
    with world() as w:
        sandbox = w.sandbox()
        host = w.ipr(w.host)
        root, _ = w.veth(w.host)
        moved = drive(
            w.env(sandbox),
            MOVE,
            {"interface": (host_handle(host, root, Access.EXCLUSIVE_CONFIGURE),)},
            {"ifName": "net1"},
        )
        yield w, sandbox, moved
        moved.undo()


def _ctx(done: Done, parameters: dict[str, Any], effect: str = "e2") -> EffectContext:
    return EffectContext("op1", effect, {"interface": (done.output(),)}, parameters, done.ctx.env)


def test_sysctl_apply_observe_undo_reads_back_in_the_namespace() -> None:
    with moved_root() as (_, sandbox, moved):
        baseline = settings_in(sandbox, "net1")
        namespace_wide = {
            (fam, table, key): sysctl_in(sandbox, fam, table, key)
            for fam, key in KEYS.values()
            for table in ("all", "default")
        }
        done = drive(moved.ctx.env, SYSCTL, {"interface": (moved.output(),)}, SETTINGS, effect="e2")
        assert settings_in(sandbox, "net1") == {k: int(v) for k, v in SETTINGS.items()}
        assert done.output().id == moved.output().id
        assert done.output().observations["ifName"] == "net1"
        assert done.before["values"]["ipv4/rp_filter"] == baseline["ipv4RpFilter"]
        done.undo()
        assert settings_in(sandbox, "net1") == baseline
        for (fam, table, key), value in namespace_wide.items():
            assert sysctl_in(sandbox, fam, table, key) == value


def test_sysctl_recovery_and_undo_on_each_side() -> None:
    with moved_root() as (_, sandbox, moved):
        ex = EXECUTORS[SYSCTL]
        ctx = _ctx(moved, {"ipv4RpFilter": 2, "ipv6AcceptRa": 0})
        before = ex.capture(ctx)
        assert ex.recover(ctx, before) is RecoveryObservation.NOT_APPLIED
        subprocess.run(
            ["ip", "netns", "exec", sandbox, "sysctl", "-qw", "net.ipv4.conf.net1.rp_filter=1"],
            check=True,
        )  # half-way, or someone else: not ours to judge
        assert ex.recover(ctx, before) is RecoveryObservation.UNCERTAIN
        ex.apply(ctx, before)
        assert ex.observe(ctx, before).postconditions_ok
        assert ex.recover(ctx, before) is RecoveryObservation.APPLIED
        ex.undo(ctx, before, {})
        assert sysctl_in(sandbox, "ipv4", "net1", "rp_filter") == before["values"]["ipv4/rp_filter"]
        assert ex.recover(ctx, before) is RecoveryObservation.NOT_APPLIED


def test_features_apply_observe_undo_reads_back_in_the_namespace() -> None:
    with moved_root() as (_, sandbox, moved):
        baseline = features_in(sandbox, "net1")
        assert baseline["rx-gro"] is False and baseline["tx-checksum-ip-generic"] is True
        wanted = {"rx-gro": True, "tx-checksum-ip-generic": False}
        done = drive(
            moved.ctx.env,
            FEATURES,
            {"interface": (moved.output(),)},
            {"features": wanted},
            effect="e2",
        )
        live = features_in(sandbox, "net1")
        assert (live["rx-gro"], live["tx-checksum-ip-generic"]) == (True, False)
        assert live["tx-tcp-segmentation"] is False  # the kernel drops TSO without checksums
        assert done.before["features"]["active"] == ["tx-checksum-ip-generic"]
        done.undo()
        assert features_in(sandbox, "net1") == baseline


def test_features_recovery_on_each_side() -> None:
    with moved_root() as (_, sandbox, moved):
        ex = EXECUTORS[FEATURES]
        ctx = _ctx(moved, {"features": {"rx-gro": True, "tx-nocache-copy": True}})
        before = ex.capture(ctx)
        assert ex.recover(ctx, before) is RecoveryObservation.NOT_APPLIED
        ex.apply(ctx, before)
        assert ex.recover(ctx, before) is RecoveryObservation.APPLIED
        ex.undo(ctx, before, {})
        assert ex.recover(ctx, before) is RecoveryObservation.NOT_APPLIED
        assert features_in(sandbox, "net1")["rx-gro"] is False


def test_a_fixed_feature_asked_to_change_is_refused_before_anything_changes() -> None:
    with moved_root() as (_, sandbox, moved):
        baseline = features_in(sandbox, "net1")
        assert baseline["rx-lro"] is False  # veth has no LRO: fixed off
        ex = EXECUTORS[FEATURES]
        ctx = _ctx(moved, {"features": {"rx-gro": True, "rx-lro": True}})
        with pytest.raises(ExecutorError) as refused:
            ex.capture(ctx)
        assert refused.value.code == "E_FEATURE_FIXED"
        assert "rx-lro" in str(refused.value)
        assert features_in(sandbox, "net1") == baseline
        # asking a fixed feature for the value it has changes nothing and is accepted
        done = drive(
            moved.ctx.env,
            FEATURES,
            {"interface": (moved.output(),)},
            {"features": {"rx-lro": False, "rx-gro": True}},
            effect="e3",
        )
        assert features_in(sandbox, "net1")["rx-gro"] is True
        done.undo()
        assert features_in(sandbox, "net1") == baseline


def test_a_key_the_link_lacks_is_refused_with_its_reason() -> None:
    with moved_root() as (_, sandbox, moved):
        ref = NamespaceRef.at(netns_path(sandbox))
        index = moved.output().observations["ifIndex"]
        assert isinstance(index, int)
        with pytest.raises(HostError) as refused:
            kernel_sysctl.read_values(
                moved.ctx.env, ref, index, "net1", [InterfaceSysctl("ipv4", "no_such_key")]
            )
        assert refused.value.code == "E_SYSCTL_UNAVAILABLE"


# ------------------------------------------------------------------------- the tenant


def _rename(w: World, ns: str, old: str, new: str) -> None:
    ipr = w.ipr(ns)
    index = ipr.link_lookup(ifname=old)[0]
    ipr.link("set", index=index, state="down")
    ipr.link("set", index=index, ifname=new)


@pytest.mark.adversarial
def test_a_renamed_link_is_restored_and_its_old_name_is_never_written() -> None:
    with moved_root() as (w, sandbox, moved):
        baseline = settings_in(sandbox, "net1")
        features = features_in(sandbox, "net1")
        s = drive(moved.ctx.env, SYSCTL, {"interface": (moved.output(),)}, SETTINGS, effect="e2")
        f = drive(
            moved.ctx.env,
            FEATURES,
            {"interface": (s.output(),)},
            {"features": {"rx-gro": True}},
            effect="e3",
        )
        # the tenant renames our link and gives a link of its own the old name
        _rename(w, sandbox, "net1", "tenant0")
        sb = w.ipr(sandbox)
        sb.link("add", ifname="net1", kind="veth", peer="tpeer")
        subprocess.run(
            ["ip", "netns", "exec", sandbox, "sysctl", "-qw", "net.ipv4.conf.net1.rp_filter=1"],
            check=True,
        )
        foreign = settings_in(sandbox, "net1")
        foreign_features = features_in(sandbox, "net1")
        f.undo()
        s.undo()
        assert settings_in(sandbox, "tenant0") == baseline
        assert features_in(sandbox, "tenant0") == features
        assert settings_in(sandbox, "net1") == foreign
        assert features_in(sandbox, "net1") == foreign_features
        sb.link("del", index=sb.link_lookup(ifname="net1")[0])
        _rename(w, sandbox, "tenant0", "net1")


@pytest.mark.adversarial
def test_a_stale_name_never_redirects_a_write() -> None:
    """The kernel access layer itself: files opened under a name the recorded ifindex no
    longer carries are refused, and the link that now has that name is not written."""
    with moved_root() as (w, sandbox, moved):
        index = moved.output().observations["ifIndex"]
        assert isinstance(index, int)
        _rename(w, sandbox, "net1", "tenant0")
        w.ipr(sandbox).link("add", ifname="net1", kind="veth", peer="tpeer")
        foreign = settings_in(sandbox, "net1")
        ref = NamespaceRef.at(netns_path(sandbox))
        with pytest.raises(HostError) as refused:
            kernel_sysctl.write_values(
                moved.ctx.env, ref, index, "net1", {InterfaceSysctl("ipv4", "rp_filter"): 2}
            )
        assert refused.value.code == "E_LINK_CHANGED"
        assert settings_in(sandbox, "net1") == foreign
        sb = w.ipr(sandbox)
        sb.link("del", index=sb.link_lookup(ifname="net1")[0])
        _rename(w, sandbox, "tenant0", "net1")


@pytest.mark.adversarial
def test_a_value_the_tenant_changed_is_restored_to_the_record() -> None:
    with moved_root() as (_, sandbox, moved):
        baseline = settings_in(sandbox, "net1")
        s = drive(moved.ctx.env, SYSCTL, {"interface": (moved.output(),)}, SETTINGS, effect="e2")
        for key in ("net.ipv4.conf.net1.rp_filter=1", "net.ipv6.conf.net1.accept_ra=2"):
            subprocess.run(["ip", "netns", "exec", sandbox, "sysctl", "-qw", key], check=True)
        assert EXECUTORS[SYSCTL].recover(s.ctx, s.before) is RecoveryObservation.UNCERTAIN
        s.undo()
        assert settings_in(sandbox, "net1") == baseline


@pytest.mark.adversarial
def test_an_impostor_at_the_recorded_ifindex_is_never_written() -> None:
    with moved_root() as (w, sandbox, moved):
        s = drive(moved.ctx.env, SYSCTL, {"interface": (moved.output(),)}, SETTINGS, effect="e2")
        f = drive(
            moved.ctx.env,
            FEATURES,
            {"interface": (s.output(),)},
            {"features": {"rx-gro": True}},
            effect="e3",
        )
        index = moved.output().observations["ifIndex"]
        # the tenant moves our link out of the way and puts a veth of its own at its ifindex
        sb = w.ipr(sandbox)
        away = w.sandbox()
        sb.link("set", index=index, net_ns_fd=netns_path(away))
        sb.link("add", ifname="net1", kind="veth", peer="tpeer", index=index)
        impostor = settings_in(sandbox, "net1")
        impostor_features = features_in(sandbox, "net1")
        for undo in (f.undo, s.undo):
            with pytest.raises(ExecutorError) as refused:
                undo()
            assert refused.value.code == "E_IDENTITY_MISMATCH"
        assert settings_in(sandbox, "net1") == impostor
        assert features_in(sandbox, "net1") == impostor_features
        sb.link("del", index=index)
        wa = w.ipr(away)
        wa.link("set", index=wa.link_lookup(ifname="net1")[0], net_ns_fd=netns_path(sandbox))


@pytest.mark.adversarial
def test_the_runner_quarantines_settings_it_cannot_prove_ours(tmp_path: Path) -> None:
    """host-tuned through the real binder, runner and journal: an impostor at the root's
    ifindex after connect leaves the removal Quarantined, the impostor untouched."""
    plugin, diagnostics = load_plugin_dir(HOST_TUNED)
    assert plugin is not None, diagnostics
    with world() as w:
        node = Node(tmp_path / "state", w.host)
        try:
            sandbox = w.sandbox()
            host = w.ipr(w.host)
            root, _ = w.veth(w.host)
            handle = host_handle(host, root, Access.EXCLUSIVE_CONFIGURE)
            config = {"ifName": "net1", "mode": "kernel"}
            prepared = node.run(
                "prep",
                _bind(plugin, "prepare", call(config, "prep", allocation={"interface": (handle,)})),
            )
            ref = node.pin("conn", sandbox)
            program = _bind(
                plugin,
                "connect",
                call(config, "conn", prepared=dict(prepared.exports), sandbox=ref),
            )
            node.run("conn", program, sandbox=ref)
            assert sysctl_in(sandbox, "ipv4", "net1", "rp_filter") == 2
            assert features_in(sandbox, "net1")["rx-gro"] is True
            sb = w.ipr(sandbox)
            index = link(sb, "net1").index
            away = w.sandbox()
            sb.link("set", index=index, net_ns_fd=netns_path(away))
            sb.link("add", ifname="net1", kind="veth", peer="tpeer", index=index)
            impostor = settings_in(sandbox, "net1")
            with node.runner() as r:
                result = r.cleanup("conn")
            assert result.state.value == "Quarantined", result
            assert set(result.quarantined) >= {"sysctl", "offloads"}, result
            assert settings_in(sandbox, "net1") == impostor
        finally:
            node.release_pins()


def test_a_kernel_without_ethtool_netlink_is_refused_cleanly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """This kernel has the family; a kernel without one answers the family lookup with
    ENOENT (asked here for a family no kernel has), which the opcode turns into
    E_ETHTOOL_UNSUPPORTED before anything changes."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_GENERIC)
    with sock, pytest.raises(NetlinkFailure) as missing:
        genl_family(sock, "dmn-nofamily", "E_ETHTOOL")
    assert missing.value.errno == errno.ENOENT

    def absent(sock: socket.socket, name: str, code: str) -> int:
        raise NetlinkFailure(code, errno.ENOENT, f"resolve {name}: no such family")

    with moved_root() as (_, sandbox, moved):
        baseline = features_in(sandbox, "net1")
        monkeypatch.setattr(host_ethtool, "genl_family", absent)
        ctx = _ctx(moved, {"features": {"rx-gro": True}})
        with pytest.raises(ExecutorError) as refused:
            EXECUTORS[FEATURES].capture(ctx)
        assert refused.value.code == "E_ETHTOOL_UNSUPPORTED"
        assert features_in(sandbox, "net1") == baseline


def test_a_read_only_proc_sys_is_refused_with_its_reason() -> None:
    """Where /proc/sys is mounted read-only (a container runtime's default for an
    unprivileged container; here a private mount namespace of the calling thread, which
    the opening thread inherits), a write is E_SYSCTL naming why, and nothing changes."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    with moved_root() as (_, sandbox, moved):
        before = sysctl_in(sandbox, "ipv4", "net1", "rp_filter")
        ref = NamespaceRef.at(netns_path(sandbox))
        index = moved.output().observations["ifIndex"]
        assert isinstance(index, int)
        outcome: list[BaseException | None] = []

        def confined() -> None:
            try:
                assert libc.unshare(0x00000200 | 0x00020000) == 0  # CLONE_FS | CLONE_NEWNS
                assert libc.mount(None, b"/", None, 0x4000 | (1 << 18), None) == 0  # private
                for flags in (0x1000, 0x1000 | 0x20 | 0x1):  # bind, then remount,bind,ro
                    assert libc.mount(b"/proc/sys", b"/proc/sys", None, flags, None) == 0
                key = InterfaceSysctl("ipv4", "rp_filter")
                kernel_sysctl.write_values(moved.ctx.env, ref, index, "net1", {key: 2})
                outcome.append(None)
            except BaseException as exc:
                outcome.append(exc)

        thread = threading.Thread(target=confined)
        thread.start()
        thread.join()
        (refused,) = outcome
        assert isinstance(refused, HostError) and refused.code == "E_SYSCTL", refused
        assert "read-only" in str(refused)
        assert sysctl_in(sandbox, "ipv4", "net1", "rp_filter") == before


@pytest.mark.parametrize("agent", ["root", "unprivileged"])
def test_host_tuned_through_the_runner_applies_and_undoes(tmp_path: Path, agent: str) -> None:
    """host-tuned through the real binder, runner and journal, as root and as the
    unprivileged agent (a child holding only the chart's capabilities): the settings read
    back in the sandbox, and after removal the device is back with its features as before."""
    plugin, diagnostics = load_plugin_dir(HOST_TUNED)
    assert plugin is not None, diagnostics
    server = unprivileged_server() if agent == "unprivileged" else None
    with world() as w:
        node = Node(tmp_path / "state", w.host, server=server)
        try:
            sandbox = w.sandbox()
            root, _ = w.veth(w.host)
            features = features_in(w.host, root)
            handle = host_handle(w.ipr(w.host), root, Access.EXCLUSIVE_CONFIGURE)
            config = {"ifName": "net1", "mode": "kernel", "rpFilter": 1, "acceptRa": 2}
            c = call(config, "prep", allocation={"interface": (handle,)})
            prepared = node.run("prep", _bind(plugin, "prepare", c))
            ref = node.pin("conn", sandbox)
            c = call(config, "conn", prepared=dict(prepared.exports), sandbox=ref)
            node.run("conn", _bind(plugin, "connect", c), sandbox=ref)
            assert sysctl_in(sandbox, "ipv4", "net1", "rp_filter") == 1
            assert sysctl_in(sandbox, "ipv4", "net1", "arp_ignore") == 1
            assert sysctl_in(sandbox, "ipv6", "net1", "accept_ra") == 2
            assert sysctl_in(sandbox, "ipv6", "net1", "autoconf") == 0
            live = features_in(sandbox, "net1")
            assert (live["rx-gro"], live["tx-checksum-ip-generic"]) == (True, False)
            node.cleanup("conn")
            node.cleanup("prep")
            assert features_in(w.host, root) == features
        finally:
            node.release_pins()
