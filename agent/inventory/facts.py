"""Inventory values: what the node has, as normalized, immutable facts (design §5.1).

Every fact a scan could not establish is an :class:`Unknown` carrying the reason, never
a default that reads as "absent" or "free": a failed netlink dump makes every link's
default-route fact Unknown, and protection/exposure treat Unknown as "cannot prove safe".

An :class:`InventoryItem` is one allocatable piece of hardware (a PCI function, or in the
lab a named kernel link). Its ``inventory_id`` is the stable identity personas, slices and
handles use; the PCI address and interface name are locators that may change.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

from dmn.host.rtnetlink.links import LinkState
from dmn.host.unknown import Unknown as Unknown

T = TypeVar("T")


def is_known(value: object) -> bool:
    return not isinstance(value, Unknown)


def known_or(value: T | Unknown, default: T) -> T:
    return default if isinstance(value, Unknown) else value


class ItemKind(StrEnum):
    PF = "PF"  # an SR-IOV capable physical function
    VF = "VF"  # an SR-IOV virtual function
    FUNCTION = "Function"  # a PCI function without SR-IOV
    LINK = "Link"  # a non-PCI kernel link named in a lab inventory


class Binding(StrEnum):
    KERNEL = "kernel"  # bound to a kernel network/RDMA driver
    VFIO = "vfio"  # bound to vfio-pci
    UNBOUND = "unbound"  # no driver
    OTHER = "other"  # bound to some other userspace-facing driver (e.g. uio)


class ProtectionReason(StrEnum):
    DEFAULT_ROUTE = "default-route"
    NODE_IP = "node-ip"
    CONFIGURED = "configured"
    MASTER_OF_PROTECTED = "master-of-protected"
    MEMBER_OF_PROTECTED = "member-of-protected"
    LOWER_OF_PROTECTED = "lower-of-protected"
    VF_OF_PROTECTED_PF = "vf-of-protected-pf"
    PF_OF_PROTECTED_VF = "pf-of-protected-vf"
    RESET_DOMAIN_PEER = "reset-domain-peer"
    UNKNOWN_STATE = "unknown-state"


def link_json(link: LinkState) -> dict[str, Any]:
    """A host link as the inventory reports it (``dmn inventory``): ``masterIfindex`` and
    ``linkIfindex`` null when the link has no master or no lower device in this namespace."""
    return {
        "ifindex": link.index,
        "ifname": link.name,
        "mtu": link.mtu,
        "mac": link.mac,
        "operstate": link.operstate,
        "kind": link.kind,
        "masterIfindex": link.master or None,
        "linkIfindex": link.local_lower or None,
        "permMac": link.perm_mac,
        "addresses": sorted(a.cidr for a in link.addresses),
    }


@dataclass(frozen=True, slots=True)
class Representor:
    """A switchdev representor netdev, identified by (switch, controller, pf, vf)."""

    ifname: str
    controller: int
    pfnum: int
    vfnum: int | None  # None: the PF representor
    switch_pci: str  # the eswitch manager PF
    source: str  # "devlink" or "phys_port_name"
    switch_id: str = ""  # phys_switch_id as sysfs printed it ("" when not reported)

    @property
    def port_name(self) -> str:
        """The ``phys_port_name`` the kernel gives this port: ``[c<controller>]pf<pf>[vf<vf>]``
        (controller 0, the local host, is not printed)."""
        head = f"c{self.controller}" if self.controller else ""
        tail = f"vf{self.vfnum}" if self.vfnum is not None else ""
        return f"{head}pf{self.pfnum}{tail}"


@dataclass(frozen=True, slots=True)
class RdmaDevice:
    """An RDMA device joined to an item: by the PCI ancestor of its sysfs ``device`` link, or
    (soft RDMA: rxe/siw have no PCI parent) because the kernel associates one of its ports
    with the item's netdev. ``netdev_ifindexes`` are those associations as RDMA netlink
    reported them in the host namespace (``()`` when no RDMA netlink source was asked)."""

    name: str
    link_layer: str  # "Ethernet" | "InfiniBand" | "" when not reported
    node_guid: str
    char_devices: tuple[str, ...]  # /dev paths: uverbsN, umadN, issmN
    netdev_ifindexes: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Netdev:
    """A kernel netdev joined to its PCI function through the sysfs ``device`` link."""

    ifname: str
    type: int  # ARPHRD: 1 ethernet, 32 infiniband
    phys_port_name: str
    phys_switch_id: str
    dev_port: int
    state: LinkState | Unknown


@dataclass(frozen=True, slots=True)
class IommuPeer:
    """Another function in an item's IOMMU group, with what VFIO viability depends on."""

    pci_address: str
    driver: str  # "" when unbound
    pci_class: str

    @property
    def allows_vfio(self) -> bool:
        """The kernel's group-viability rule (drivers/vfio ``vfio_dev_viable``): the peer is
        driver-less, bound to a vfio driver or pci-stub, or a PCI bridge (non-normal
        header: class 0x0604 PCI-to-PCI, 0x0607 CardBus)."""
        if self.pci_class.startswith(("0x0604", "0x0607")):
            return True
        driver = self.driver
        return driver in ("", "vfio-pci", "pci-stub") or driver.endswith("_vfio_pci")


@dataclass(frozen=True, slots=True)
class InventoryItem:
    """One allocatable resource with its identity, locators, facts and protection."""

    inventory_id: str
    kind: ItemKind
    hardware_key: str  # what identity is derived from (serial, perm MAC, parent+index)
    identity_strength: str  # "serial", "permanent-mac", "parent", "locator"
    incarnation: int
    pci_address: str
    pf_pci_address: str = ""
    vf_index: int | None = None
    vendor: str = ""
    device: str = ""
    subsystem: str = ""
    pci_class: str = ""
    driver: str = ""
    binding: Binding = Binding.UNBOUND
    numa_node: int | None = None
    pcie_root: str = ""
    iommu_group: int | None = None
    iommu_peers: tuple[str, ...] = ()  # other functions in the same IOMMU group
    # their bindings; Unknown when the group or a member could not be read
    iommu_peer_details: tuple[IommuPeer, ...] | Unknown = ()
    reset_domain: str = ""
    reset_methods: tuple[str, ...] = ()
    sriov_total_vfs: int = 0
    sriov_num_vfs: int = 0
    netdevs: tuple[Netdev, ...] = ()
    rdma: tuple[RdmaDevice, ...] = ()
    eswitch_mode: str | Unknown = ""  # "" = not an eswitch manager
    representors: tuple[Representor, ...] = ()  # PF only: representors it manages
    representor: Representor | None = None  # VF/PF: its own representor, if any
    vfio_devices: tuple[str, ...] = ()  # /dev/vfio/<group>, /dev/vfio/devices/vfioN
    protected: tuple[ProtectionReason, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def link_type(self) -> str:
        """``ethernet`` or ``infiniband`` from netdev type or RDMA link layer, else ``""``."""
        for n in self.netdevs:
            if n.type == 32:
                return "infiniband"
            if n.type == 1:
                return "ethernet"
        for r in self.rdma:
            if r.link_layer == "InfiniBand":
                return "infiniband"
            if r.link_layer == "Ethernet":
                return "ethernet"
        return ""

    @property
    def rdma_capable(self) -> bool:
        return bool(self.rdma)

    @property
    def is_protected(self) -> bool:
        return bool(self.protected)

    def to_json(self) -> dict[str, Any]:
        def state(n: Netdev) -> Any:
            return (
                link_json(n.state)
                if isinstance(n.state, LinkState)
                else {"unknown": n.state.reason}
            )

        return {
            "inventoryID": self.inventory_id,
            "kind": self.kind.value,
            "hardwareKey": self.hardware_key,
            "identityStrength": self.identity_strength,
            "incarnation": self.incarnation,
            "pciAddress": self.pci_address,
            "pfPciAddress": self.pf_pci_address,
            "vfIndex": self.vf_index,
            "vendor": self.vendor,
            "device": self.device,
            "driver": self.driver,
            "binding": self.binding.value,
            "numaNode": self.numa_node,
            "pcieRoot": self.pcie_root,
            "iommuGroup": self.iommu_group,
            "iommuPeers": list(self.iommu_peers),
            "iommuPeerDetails": {"unknown": self.iommu_peer_details.reason}
            if isinstance(self.iommu_peer_details, Unknown)
            else [
                {"pciAddress": p.pci_address, "driver": p.driver, "pciClass": p.pci_class}
                for p in self.iommu_peer_details
            ],
            "resetDomain": self.reset_domain,
            "linkType": self.link_type,
            "netdevs": [
                {"ifname": n.ifname, "physPortName": n.phys_port_name, "state": state(n)}
                for n in self.netdevs
            ],
            "rdma": [
                {
                    "name": r.name,
                    "linkLayer": r.link_layer,
                    "nodeGuid": r.node_guid,
                    "charDevices": list(r.char_devices),
                    "netdevIfindexes": list(r.netdev_ifindexes),
                }
                for r in self.rdma
            ],
            "eswitchMode": (
                self.eswitch_mode
                if isinstance(self.eswitch_mode, str)
                else {"unknown": self.eswitch_mode.reason}
            ),
            "representors": [
                {"ifname": r.ifname, "controller": r.controller, "pf": r.pfnum, "vf": r.vfnum}
                for r in self.representors
            ],
            "vfioDevices": list(self.vfio_devices),
            "protected": [p.value for p in self.protected],
        }


@dataclass(frozen=True, slots=True)
class Inventory:
    """A complete scan: items by inventory ID plus the node-level facts they were judged by."""

    node_uid: str
    items: Mapping[str, InventoryItem]
    default_route_ifnames: frozenset[str] | Unknown = frozenset()
    notes: tuple[str, ...] = ()
    identities: Mapping[str, tuple[str, int]] = field(default_factory=dict)
    followed_links: tuple[str, ...] = ()
    """The named kernel links the scan looked for (a lab's links), present or not: a link
    of that name appearing is an inventory change even while none is reported."""

    def by_pci(self, address: str) -> InventoryItem | None:
        for item in self.items.values():
            if item.pci_address == address:
                return item
        return None

    def to_json(self) -> dict[str, Any]:
        routes = self.default_route_ifnames
        return {
            "nodeUID": self.node_uid,
            "defaultRouteInterfaces": (
                sorted(routes) if isinstance(routes, frozenset) else {"unknown": routes.reason}
            ),
            "items": [self.items[k].to_json() for k in sorted(self.items)],
            "notes": list(self.notes),
        }
