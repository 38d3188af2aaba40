"""The executors' link reader decodes bond, 802.1Q and ipvlan links as pyroute2 does (lab VM).

The host kernel lacks these kinds, so the parity test in ``tests/kernel/test_link_reader.py``
cannot reach their ``IFLA_INFO_DATA`` fields; the executors' read-back checks (bond mode,
miimon, fail_over_mac, VLAN id, ipvlan mode) depend on exactly these.
"""

from __future__ import annotations

import pytest

from dmn.host.rtnetlink.links import all_links
from tests.kernel.world import world

pytestmark = pytest.mark.kernel_lab


def test_reader_decodes_bond_vlan_and_ipvlan_like_pyroute2() -> None:
    with world() as w:
        host = w.ipr(w.host)
        a, _ = w.veth(w.host)
        host.link(
            "add", ifname="rdbond", kind="bond", bond_mode=1, bond_miimon=150, bond_fail_over_mac=1
        )
        host.link(
            "add", ifname="rdvlan", kind="vlan", link=host.link_lookup(ifname=a)[0], vlan_id=42
        )
        host.link(
            "add", ifname="rdipvl", kind="ipvlan", link=host.link_lookup(ifname=a)[0], ipvlan_mode=1
        )
        env = w.env()
        fast = {x.name: x for x in all_links(env.rtnl(env.host))}
        slow = {x.name: x for x in all_links(host)}
        assert fast.keys() == slow.keys()
        for name, x in fast.items():
            for key, value in x.info.items():
                assert slow[name].info[key] == value, (name, key)
        assert fast["rdbond"].info == {
            "IFLA_BOND_MODE": 1,
            "IFLA_BOND_MIIMON": 150,
            "IFLA_BOND_FAIL_OVER_MAC": 1,
        } | (
            {"IFLA_BOND_ACTIVE_SLAVE": 0} if "IFLA_BOND_ACTIVE_SLAVE" in fast["rdbond"].info else {}
        )
        assert fast["rdvlan"].info == {"IFLA_VLAN_ID": 42}
        assert fast["rdipvl"].info == {"IFLA_IPVLAN_MODE": 1}
        assert (fast["rdvlan"].kind, fast["rdipvl"].kind) == ("vlan", "ipvlan")
