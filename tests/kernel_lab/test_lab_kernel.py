"""The kernel lab itself: the guest runs a stock kernel that has what the host kernel lacks."""

from __future__ import annotations

import os

import pytest
from pyroute2 import IPRoute

from tests.kernel.scratch import scratch_netns, unique

pytestmark = pytest.mark.kernel_lab


def test_guest_is_a_different_kernel_with_the_host_tree() -> None:
    assert os.path.isdir("/usr/lib/modules/" + os.uname().release + "/kernel")
    assert os.path.isfile(os.path.join(os.path.dirname(__file__), "harness.py"))


def test_bond_vlan_ipvlan_dummy_are_available() -> None:
    with scratch_netns() as ns, IPRoute(netns=ns) as ipr:
        a, b = unique("la"), unique("lb")
        ipr.link("add", ifname=a, kind="dummy")
        ipr.link("add", ifname=b, kind="dummy")
        bond = unique("bo")
        ipr.link("add", ifname=bond, kind="bond", bond_mode=1, bond_miimon=100)
        for m in (a, b):
            master = ipr.link_lookup(ifname=bond)[0]
            ipr.link("set", index=ipr.link_lookup(ifname=m)[0], master=master)
        vlan = unique("vl")
        ipr.link("add", ifname=vlan, kind="vlan", link=ipr.link_lookup(ifname=bond)[0], vlan_id=100)
        lower, ipv = unique("lo"), unique("iv")
        ipr.link("add", ifname=lower, kind="dummy")
        ipr.link(
            "add", ifname=ipv, kind="ipvlan", link=ipr.link_lookup(ifname=lower)[0], ipvlan_mode=0
        )
        kinds = {
            link.get("ifname"): link.get_nested("IFLA_LINKINFO", "IFLA_INFO_KIND")
            for link in ipr.get_links()
        }
        assert kinds[bond] == "bond" and kinds[vlan] == "vlan" and kinds[ipv] == "ipvlan"
