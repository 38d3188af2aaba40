"""The node's sysfs view of a namespace (``MountedNetnsSysfs``) on this machine's kernel.

What ``ib/port-configure`` runs on a node up to the IPoIB attributes themselves: a fresh
sysfs mounted in a private mount namespace of one thread that entered the sandbox, showing
that namespace's netdevs only; writes through it reach the kernel; nothing stays mounted.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pyroute2 import IPRoute

from dmn.host.netns import NamespaceRef
from dmn.host.netns_sysfs import MountedNetnsSysfs
from dmn.opcodes.device_environment import DeviceEnvironment
from dmn.opcodes.executor import EffectContext, ExecutorError
from dmn.vocabulary.handles import Handle, Provenance, Scope
from dmn.vocabulary.terms import Access, HandleType, LinkType, ScopeKind
from tests.kernel.scratch import netns_path, scratch_netns
from tests.kernel.world import EXECUTORS

pytestmark = pytest.mark.netns


def _mounts() -> list[str]:
    """This process's sysfs mounts (others on the shared machine mount namespaces meanwhile)."""
    lines = Path("/proc/self/mountinfo").read_text().splitlines()
    return [line for line in lines if " - sysfs " in line]


def test_the_view_shows_the_sandbox_and_writes_reach_its_kernel() -> None:
    mounts = _mounts()
    with scratch_netns("dmho") as host, scratch_netns("dmsb") as sb:
        with IPRoute(netns=sb) as ipr:
            ipr.link("add", ifname="sbv0", kind="veth", peer="sbv1")
            index = ipr.link_lookup(ifname="sbv0")[0]
        env = DeviceEnvironment(
            host=NamespaceRef.at(netns_path(host)), sandbox=NamespaceRef.at(netns_path(sb))
        )
        view = MountedNetnsSysfs()
        assert env.sandbox is not None
        try:

            def look(root: Path) -> tuple[list[str], str]:
                (root / "class" / "net" / "sbv0" / "mtu").write_text("1280\n")
                ifindex = (root / "class" / "net" / "sbv0" / "ifindex").read_text().strip()
                return sorted(os.listdir(root / "class" / "net")), ifindex

            assert view.run(env, env.sandbox, look) == (["lo", "sbv0", "sbv1"], str(index))
            assert view.run(env, env.host, lambda r: sorted(os.listdir(r / "class" / "net"))) == [
                "lo"
            ]
            with IPRoute(netns=sb) as ipr:
                assert ipr.get_links(index)[0].get_attr("IFLA_MTU") == 1280
            # the executor over the real view: an Ethernet veth is not an IPoIB netdev
            handle = Handle(
                id="ib-1",
                type=HandleType.KERNEL_INTERFACE,
                inventory_id="pci:0000:04:00.0",
                scope=Scope(ScopeKind.SANDBOX, env.sandbox.identity),
                accesses=frozenset({Access.READ, Access.EXCLUSIVE_CONFIGURE}),
                link_type=LinkType.INFINIBAND,
                provenance=Provenance(claim_uid="c", request="ib", device="ib0"),
                observations={"ifName": "sbv0", "ifIndex": index},
            )
            ctx = EffectContext("op1", "ipoib", {"interface": (handle,)}, {"mtu": 2044}, env)
            with pytest.raises(ExecutorError) as err:
                EXECUTORS["ib/port-configure/v1"].capture(ctx)
            assert err.value.code == "E_NOT_INFINIBAND" and "type 1" in str(err.value)
        finally:
            env.close()
    assert _mounts() == mounts  # the view died with its thread


def test_no_view_of_a_namespace_that_is_gone() -> None:
    with scratch_netns("dmho") as host:
        with scratch_netns("dmsb") as sb:
            ref = NamespaceRef.at(netns_path(sb))
        env = DeviceEnvironment(host=NamespaceRef.at(netns_path(host)))
        try:
            with pytest.raises(ExecutorError) as err:
                MountedNetnsSysfs().run(env, ref, lambda root: None)
            assert err.value.code == "E_NETNS_GONE"
        finally:
            env.close()
