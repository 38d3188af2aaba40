"""Smoke test: discovery on this machine's real /sys and real rtnetlink."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dmn.agent.inventory import Pyroute2Devlink, Pyroute2Links, ScanConfig, Unknown, scan
from dmn.host.rtnetlink.links import LinkState

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


def test_real_inventory_publishes_nothing_protected_and_valid_slices() -> None:
    """Whatever NICs this machine has: a catch-all policy never exposes a protected or
    unknown-state function, and the resulting pool passes the v1 limits and the schema."""
    import kubernetes_validate

    from dmn.agent.personas import build_personas
    from dmn.agent.slices import build_slices, limit_violations
    from tests.fixtures.policies import iface, policy

    inv = scan(
        ScanConfig(
            sysfs_root=Path("/sys"),
            node_uid="smoke",
            links=Pyroute2Links(),
            devlink=Pyroute2Devlink(),
        )
    )
    everything = [
        policy(f"all-{kind.lower()}", persona="kernel", plugin="host-cni", mode="kernel",
               selector={"kind": kind}, compatibility=[iface("kernel-handoff")])
        for kind in ("PF", "VF", "Function")
    ]  # fmt: skip
    personas = build_personas(inv, everything, {})
    exposed = {p.inventory_id for p in personas.personas}
    for it in inv.items.values():
        if it.protected:
            assert it.inventory_id not in exposed, it.pci_address
    for s in build_slices(personas, "smoke-node", 1):
        assert limit_violations(s) == []
        kubernetes_validate.validate(s, "1.37.0", strict=True)
