"""Node inventory: PCI-first discovery joined with net, RDMA, devlink and live state.

``scan(ScanConfig(...)) -> Inventory`` is the entry point (see :mod:`.scan`).
"""

from dmn.agent.inventory.facts import Inventory, InventoryItem, ItemKind, Unknown
from dmn.agent.inventory.identity import IdentityRegistry
from dmn.agent.inventory.scan import ScanConfig, scan
from dmn.host.inventory_sources import (
    LiveQueryError,
    NetlinkRdma,
    Pyroute2Devlink,
    Pyroute2Links,
    RdmaPortNetdev,
    RecordedDevlink,
    RecordedLinks,
    RecordedRdma,
)

__all__ = [
    "IdentityRegistry",
    "Inventory",
    "InventoryItem",
    "ItemKind",
    "LiveQueryError",
    "NetlinkRdma",
    "Pyroute2Devlink",
    "Pyroute2Links",
    "RdmaPortNetdev",
    "RecordedDevlink",
    "RecordedLinks",
    "RecordedRdma",
    "ScanConfig",
    "Unknown",
    "scan",
]
