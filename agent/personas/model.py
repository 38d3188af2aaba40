"""Persona values: one canonical DRA identity per allocation contract on an item.

A persona is an alternative view of the same hardware (design §5.3), not extra
capacity. Its compatibility consumptions are what make incompatible views of one piece
of hardware unallocatable together; its ``children`` capacity is what bounds repeated
shares of a shared parent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from dmn.opcodes.device_environment import BridgeGrant, OvsBridgeGrant
from dmn.vocabulary.terms import Access, HandleType

DRIVER = "dra-multi-network.schseba.github.io"
STANDARD = "resource.kubernetes.io"

#: Reserved attribute names (under the driver domain). Custom attributes cannot use them.
RESERVED = frozenset(
    {
        "pciAddress",
        "pfPciAddress",
        "inventoryID",
        "plugin",
        "mode",
        "linkType",
        "rdmaCapable",
        "allocationReady",
        "policyDigest",
        "persona",
    }
)

#: The counter every compatibility domain publishes (design §5.5).
MEMBERS = "members"
#: The consumable capacity of shared parents (design §5.4).
CHILDREN = "children"


class FindingCode(StrEnum):
    """Stable reason codes of policy evaluation and publication."""

    E_POLICY_CONFLICT = "E_POLICY_CONFLICT"  # equal-priority policies give one persona
    E_POLICY_INVALID = "E_POLICY_INVALID"  # the exposure cannot apply to this item
    E_THIRD_DOMAIN = "E_THIRD_DOMAIN"  # > 2 compatibility domains: unrepresentable
    E_ISOLATION_UNREPRESENTED = "E_ISOLATION_UNREPRESENTED"  # shared IOMMU group, no domain
    E_IOMMU_GROUP_BUSY = "E_IOMMU_GROUP_BUSY"  # a group peer is kernel-bound or protected
    E_RESERVED_ATTRIBUTE = "E_RESERVED_ATTRIBUTE"  # custom attribute uses a reserved name
    E_ATTRIBUTE_LIMIT = "E_ATTRIBUTE_LIMIT"  # > 32 attributes+capacities or value > 64
    E_PREREQUISITE_STRIPPED = "E_PREREQUISITE_STRIPPED"  # API server dropped a field
    E_NOT_READY = "E_NOT_READY"  # node check: allocated device not allocationReady
    E_CLEANUP_PENDING = "E_CLEANUP_PENDING"  # node check: device still being cleaned up
    E_UNKNOWN_DEVICE = "E_UNKNOWN_DEVICE"  # node check: not a device of this node
    W_PROTECTED = "W_PROTECTED"  # protected hardware is never exposed
    W_UNKNOWN_STATE = "W_UNKNOWN_STATE"  # facts unknown: cannot prove the item is free
    W_PENDING_DRAIN = "W_PENDING_DRAIN"  # a declaration is retained until drained


@dataclass(frozen=True, slots=True)
class Finding:
    code: FindingCode
    message: str
    policy: str = ""
    item: str = ""  # inventory ID
    device: str = ""  # persona device name

    @property
    def is_error(self) -> bool:
        return self.code.value.startswith("E_")

    def to_json(self) -> dict[str, str]:
        out = {"code": self.code.value, "message": self.message}
        for key, value in (("policy", self.policy), ("item", self.item), ("device", self.device)):
            if value:
                out[key] = value
        return out


@dataclass(frozen=True, slots=True)
class Consumption:
    """One device counter consumption: ``members: 1`` from ``counter_set`` with groups."""

    counter_set: str
    groups: tuple[str, ...]

    def to_api(self) -> dict[str, Any]:
        return {
            "counterSet": self.counter_set,
            "counters": {MEMBERS: {"value": "1"}},
            "compatibilityGroups": list(self.groups),
        }


@dataclass(frozen=True, slots=True)
class Children:
    value: int
    default: int
    valid_values: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Grant:
    """What the coordinator may hand a hook for this persona: a handle type and accesses."""

    type: HandleType
    accesses: frozenset[Access]


@dataclass(frozen=True, slots=True)
class Persona:
    """One published (or retained) device of the pool."""

    name: str
    inventory_id: str
    persona: str
    plugin: str
    mode: str
    link_type: str
    pci_address: str
    pf_pci_address: str
    rdma_capable: bool
    allocation_ready: bool
    policy: str
    policy_digest: str
    allow_multiple_allocations: bool
    children: Children | None
    consumptions: tuple[Consumption, ...]
    grants: tuple[Grant, ...]
    effect_permissions: tuple[str, ...]
    pcie_root: str = ""
    numa_node: int | None = None
    extra_attributes: Mapping[str, str] = field(default_factory=dict)
    retained: bool = False  # kept only because it is allocated or cleanup-pending
    # the policy's hardware.allowedDrivers other than "kernel": what pci/driver-bind may bind
    allowed_drivers: tuple[str, ...] = ()
    # the policy's exposure.allowedHostBridges / allowedOvsBridges: the only bridges a step
    # consuming this item's representor may name (by alias), with their permitted VLANs
    bridge_grants: tuple[BridgeGrant, ...] = ()
    ovs_bridge_grants: tuple[OvsBridgeGrant, ...] = ()

    def attributes(self) -> dict[str, dict[str, Any]]:
        """The ResourceSlice ``attributes`` map (qualified names, typed values)."""
        d = DRIVER
        out: dict[str, dict[str, Any]] = {
            f"{d}/inventoryID": {"string": self.inventory_id},
            f"{d}/persona": {"string": self.persona},
            f"{d}/plugin": {"string": self.plugin},
            f"{d}/mode": {"string": self.mode},
            f"{d}/linkType": {"string": self.link_type},
            f"{d}/rdmaCapable": {"bool": self.rdma_capable},
            f"{d}/allocationReady": {"bool": self.allocation_ready},
            f"{d}/policyDigest": {"string": self.policy_digest},
        }
        if self.pci_address:
            out[f"{d}/pciAddress"] = {"string": self.pci_address}
            out[f"{STANDARD}/pciBusID"] = {"string": self.pci_address}
        if self.pf_pci_address:
            out[f"{d}/pfPciAddress"] = {"string": self.pf_pci_address}
        if self.pcie_root:
            out[f"{STANDARD}/pcieRoot"] = {"string": self.pcie_root}
        if self.numa_node is not None:
            out[f"{STANDARD}/numaNode"] = {"int": self.numa_node}
        for key, value in sorted(self.extra_attributes.items()):
            out[f"{d}/{key}"] = {"string": value}
        return out

    def to_json(self) -> dict[str, Any]:
        """Everything needed to re-declare this persona after an agent restart."""
        return {
            "name": self.name,
            "inventoryID": self.inventory_id,
            "persona": self.persona,
            "plugin": self.plugin,
            "mode": self.mode,
            "linkType": self.link_type,
            "pciAddress": self.pci_address,
            "pfPciAddress": self.pf_pci_address,
            "rdmaCapable": self.rdma_capable,
            "allocationReady": self.allocation_ready,
            "policy": self.policy,
            "policyDigest": self.policy_digest,
            "allowMultipleAllocations": self.allow_multiple_allocations,
            "children": None
            if self.children is None
            else {
                "value": self.children.value,
                "default": self.children.default,
                "validValues": list(self.children.valid_values),
            },
            "consumptions": [
                {"counterSet": c.counter_set, "groups": list(c.groups)} for c in self.consumptions
            ],
            "grants": [
                {"type": g.type.value, "accesses": sorted(a.value for a in g.accesses)}
                for g in self.grants
            ],
            "effectPermissions": list(self.effect_permissions),
            "pcieRoot": self.pcie_root,
            "numaNode": self.numa_node,
            "extraAttributes": dict(self.extra_attributes),
            "retained": self.retained,
            "allowedDrivers": list(self.allowed_drivers),
            "bridgeGrants": [g.to_json() for g in self.bridge_grants],
            "ovsBridgeGrants": [g.to_json() for g in self.ovs_bridge_grants],
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Persona:
        children = d["children"]
        return cls(
            name=d["name"],
            inventory_id=d["inventoryID"],
            persona=d["persona"],
            plugin=d["plugin"],
            mode=d["mode"],
            link_type=d["linkType"],
            pci_address=d["pciAddress"],
            pf_pci_address=d["pfPciAddress"],
            rdma_capable=bool(d["rdmaCapable"]),
            allocation_ready=bool(d["allocationReady"]),
            policy=d["policy"],
            policy_digest=d["policyDigest"],
            allow_multiple_allocations=bool(d["allowMultipleAllocations"]),
            children=None
            if children is None
            else Children(
                int(children["value"]),
                int(children["default"]),
                tuple(int(v) for v in children["validValues"]),
            ),
            consumptions=tuple(
                Consumption(c["counterSet"], tuple(c["groups"])) for c in d["consumptions"]
            ),
            grants=tuple(
                Grant(HandleType(g["type"]), frozenset(Access(a) for a in g["accesses"]))
                for g in d["grants"]
            ),
            effect_permissions=tuple(d["effectPermissions"]),
            pcie_root=d.get("pcieRoot", ""),
            numa_node=d.get("numaNode"),
            extra_attributes=dict(d.get("extraAttributes") or {}),
            retained=bool(d.get("retained", False)),
            allowed_drivers=tuple(d.get("allowedDrivers") or ()),
            bridge_grants=tuple(BridgeGrant.from_json(g) for g in d.get("bridgeGrants") or ()),
            ovs_bridge_grants=tuple(
                OvsBridgeGrant.from_json(g) for g in d.get("ovsBridgeGrants") or ()
            ),
        )

    def to_device(self) -> dict[str, Any]:
        """The ResourceSlice ``devices[]`` entry (resource.k8s.io/v1 shape)."""
        device: dict[str, Any] = {"name": self.name, "attributes": self.attributes()}
        if self.allow_multiple_allocations:
            device["allowMultipleAllocations"] = True
        if self.children is not None:
            device["capacity"] = {
                f"{DRIVER}/{CHILDREN}": {
                    "value": str(self.children.value),
                    "requestPolicy": {
                        "default": str(self.children.default),
                        "validValues": [str(v) for v in self.children.valid_values],
                    },
                }
            }
        if self.consumptions:
            device["consumesCounters"] = [c.to_api() for c in self.consumptions]
        return device


@dataclass(frozen=True, slots=True)
class PersonaSet:
    """Everything one node publishes: personas, counter-set totals and findings."""

    personas: tuple[Persona, ...]
    counter_sets: Mapping[str, int]  # counter set name -> members total
    findings: tuple[Finding, ...]

    def by_name(self) -> dict[str, Persona]:
        return {p.name: p for p in self.personas}

    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.is_error]
