"""Smoke test: discovery on this machine's real /sys and real rtnetlink."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dmn.agent.inventory import Pyroute2Devlink, Pyroute2Links, ScanConfig, Unknown, scan
from dmn.agent.inventory.facts import LinkState

pytestmark = pytest.mark.skipif(
    not Path("/sys/bus/pci/devices").is_dir(), reason="no PCI sysfs on this machine"
)


def test_scan_of_real_sysfs() -> None:
    inv = scan(
        ScanConfig(
            sysfs_root=Path("/sys"),
            node_uid="smoke",
            links=Pyroute2Links(),
            devlink=Pyroute2Devlink(),
        )
    )
    routes = inv.default_route_ifnames
    assert not isinstance(routes, Unknown), inv.notes
    for it in inv.items.values():
        assert re.fullmatch(r"pci[0-9a-f]{4}:[0-9a-f]{2}", it.pcie_root) or it.pcie_root == ""
        assert it.inventory_id.startswith("inv-")
        for n in it.netdevs:
            assert isinstance(n.state, LinkState)
            if n.ifname in routes:
                # the interface carrying the default route is never free
                assert it.protected
