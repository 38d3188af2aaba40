"""DeviceExposurePolicy: how an administrator turns node hardware into personas (design §5.2).

A policy selects inventory items by normalized facts (kind, PCI address, parent PF,
vendor, device, driver, link type) on the nodes its ``nodeSelector`` matches, and either
``Expose``s them as one persona or ``Exclude``s them. The node agent decides conflicts by
``priority``; equal-priority persona policies on one item are an error. Protected hardware
(the management closure) is never exposed whatever a policy says.

Every field is typed; no field is a path, a command or a free-form string handed to the
kernel. The CRD is generated from this model.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from dmn.api.model import (
    DNS_LABEL,
    OPCODE_NAME,
    ApiModel,
    Condition,
    DiagnosticEntry,
    list_map,
    list_set,
    validations,
)
from dmn.vocabulary.ifname import IFNAME_PATTERN
from dmn.vocabulary.terms import LinkTypeName

PCI_ADDRESS = r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$"
PCI_ID = r"^0x[0-9a-f]{4}$"
QUANTITY_INT = r"^[1-9][0-9]{0,5}$"
#: Upper bound of compatibility entries accepted by the schema. The scheduler represents
#: at most two per device; the node agent rejects a third domain with a reason code
#: instead of the schema hiding it, so the policy status can say why.
MAX_COMPATIBILITY = 4

Persona = Literal["kernel", "vfio", "macvlan", "ipvlan", "representor"]
ItemKindName = Literal["PF", "VF", "Function", "Link"]
PciAddress = Annotated[str, Field(pattern=PCI_ADDRESS)]
PciId = Annotated[str, Field(pattern=PCI_ID)]
Opcode = Annotated[str, Field(pattern=OPCODE_NAME)]
Label = Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_LABEL)]
#: an administrator alias: what a workload's config names instead of a bridge or uplink
Alias = Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_LABEL)]
#: a kernel netdev name (IFNAMSIZ - 1 bytes): an existing bridge or bridge member
NetdevName = Annotated[str, Field(min_length=1, max_length=15, pattern=IFNAME_PATTERN)]
#: a unicast MAC, lower-case, as ``ip link`` prints it
MAC_ADDRESS = r"^[0-9a-f][02468ace](:[0-9a-f]{2}){5}$"
MAX_BRIDGE_GRANTS = 8
MAX_VLAN_RANGES = 32
MAX_UPLINKS = 4


class LabelRequirement(ApiModel):
    """One ``matchExpressions`` term of a Kubernetes label selector."""

    key: str = Field(min_length=1, max_length=317, description="Label key the term tests.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = Field(
        description="How the label value is compared with ``values``."
    )
    values: list[str] | None = list_set(
        max_items=64, default=None, description="Values for In/NotIn; empty for Exists."
    )


class NodeSelector(ApiModel):
    """Which nodes the policy applies to (a Kubernetes LabelSelector)."""

    match_labels: dict[str, str] | None = Field(
        default=None, description="Labels a node must carry with exactly these values."
    )
    match_expressions: list[LabelRequirement] | None = Field(
        default=None, max_length=16, description="Further requirements, all of which must hold."
    )


class HardwareSelector(ApiModel):
    """Normalized inventory facts an item must match; every set field must match (AND),
    values within one field are alternatives (OR). An item whose fact is unknown does
    not match."""

    kind: ItemKindName | None = Field(default=None, description="PF, VF, Function or Link.")
    pci_addresses: list[PciAddress] | None = list_set(
        max_items=256,
        default=None,
        description="PCI addresses (BDF, lower-case, with domain) of the item itself.",
    )
    pf_pci_addresses: list[PciAddress] | None = list_set(
        max_items=64, default=None, description="For VFs: PCI addresses of the parent PF."
    )
    vendors: list[PciId] | None = list_set(
        max_items=16, default=None, description="PCI vendor IDs such as 0x15b3."
    )
    devices: list[PciId] | None = list_set(
        max_items=32, default=None, description="PCI device IDs such as 0x101e."
    )
    drivers: list[str] | None = list_set(
        max_items=16,
        default=None,
        description="Kernel driver the function is bound to now (e.g. mlx5_core, vfio-pci).",
    )
    link_types: list[LinkTypeName] | None = list_set(
        max_items=2, default=None, description="Link layer of the item's netdev or RDMA port."
    )
    rdma_capable: bool | None = Field(
        default=None, description="Whether the item must (true) or must not (false) have RDMA."
    )
    numa_nodes: list[int] | None = list_set(
        max_items=16, default=None, description="NUMA nodes the item may sit on."
    )


class CapacityPolicy(ApiModel):
    """A consumable capacity of a shared persona (design §5.4)."""

    value: str = Field(
        pattern=QUANTITY_INT, description="Total units, e.g. the number of macvlan children."
    )
    default: str = Field(
        default="1", pattern=QUANTITY_INT, description="Units one allocation consumes by default."
    )
    valid_values: list[str] = Field(
        default_factory=lambda: ["1"],
        min_length=1,
        max_length=10,
        description="Allowed per-allocation amounts (ascending; must contain default).",
    )


class ExposureCapacity(ApiModel):
    """Consumable capacities of a shared persona."""

    children: CapacityPolicy = Field(
        description="Children (macvlan/ipvlan) that may be created on the shared parent."
    )


class Compatibility(ApiModel):
    """One compatibility domain: personas drawing from the same domain instance co-allocate
    only when their groups intersect (Kubernetes compatibilityGroups)."""

    scope: Literal["Interface", "SriovFamily", "IommuGroup"] = Field(
        description=(
            "Which hardware the domain spans: the function itself, the PF with all its "
            "VFs, or the IOMMU group."
        )
    )
    domain: str = Field(
        min_length=1,
        max_length=24,
        pattern=DNS_LABEL,
        description="Domain name; one counter set per (scope instance, domain).",
    )
    groups: list[Label] = list_set(
        max_items=2,
        min_length=1,
        description="Compatibility groups of this persona within the domain (at most two).",
    )


class VlanRange(ApiModel):
    """Permitted 802.1Q VLAN IDs ``first``..``last`` (inclusive); ``last`` absent: one ID."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": validations(
            ("!has(self.last) || self.last >= self.first", "last must not be below first")
        )
    }

    first: int = Field(ge=1, le=4094, description="The first permitted VLAN ID.")
    last: int | None = Field(
        default=None, ge=1, le=4094, description="The last permitted VLAN ID (default: first)."
    )

    @model_validator(mode="after")
    def _ordered(self) -> VlanRange:
        if self.last is not None and self.last < self.first:
            raise ValueError(f"last ({self.last}) must not be below first ({self.first})")
        return self

    def ids(self) -> range:
        return range(self.first, (self.last or self.first) + 1)


def vlan_ids(ranges: list[VlanRange]) -> frozenset[int]:
    """Every VLAN ID the ranges permit."""
    return frozenset(v for r in ranges for v in r.ids())


def _vlan_ranges(description: str) -> Any:
    return Field(min_length=1, max_length=MAX_VLAN_RANGES, description=description)


class BridgeUplinkGrant(ApiModel):
    """An existing member of an approved bridge on which ``bridge/shared-uplink-vlan`` may add
    VLANs (design §6.7 ``allowedHostBridges[].uplinks[]``): named by its netdev, its
    administrator alias and its canonical PCI address (rechecked on the node)."""

    name: NetdevName = Field(description="The uplink's netdev name (an existing bridge port).")
    alias: Alias = Field(description="What a workload's config names instead of the uplink.")
    pci_address: PciAddress = Field(description="The uplink function's PCI address.")
    vlans: list[VlanRange] = _vlan_ranges("VLAN IDs the uplink may be given.")


class HostBridgeGrant(ApiModel):
    """An existing Linux bridge representors may join (design §6.7 ``allowedHostBridges``).

    The node agent never creates or changes the bridge: it must exist with VLAN filtering on,
    be up and carry exactly ``mac`` (the administrator-set MAC is its incarnation check; a
    bridge re-created under the same name gets another MAC unless the administrator sets it
    again). A workload names only ``alias``; its access and trunk VLANs must lie in
    ``vlans``."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": validations(
            (
                "!has(self.uplinks) || self.uplinks.all(u, u.name != self.name)",
                "an uplink cannot be the bridge itself",
            )
        )
    }

    name: NetdevName = Field(description="The bridge's netdev name on the node.")
    alias: Alias = Field(description="What a workload's config names instead of the bridge.")
    mac: str = Field(
        pattern=MAC_ADDRESS,
        min_length=17,
        max_length=17,
        description="The administrator-set MAC the bridge must carry (lower-case).",
    )
    vlans: list[VlanRange] = _vlan_ranges("VLAN IDs a representor port may be given.")
    uplinks: list[BridgeUplinkGrant] | None = list_map(
        "alias",
        max_items=MAX_UPLINKS,
        default=None,
        description=(
            "Bridge members a shared-uplink VLAN may be added to (accelerated-bridge-cni-uplink)."
        ),
    )

    @model_validator(mode="after")
    def _uplinks_distinct(self) -> HostBridgeGrant:
        names = [u.name for u in self.uplinks or ()]
        if self.name in names:
            raise ValueError(f"uplink {self.name} is the bridge itself")
        if len(set(names)) != len(names):
            raise ValueError("uplink names must be distinct")
        return self


class OvsBridgeGrant(ApiModel):
    """An existing Open vSwitch bridge representors may be added to as ports, in the node's
    OVSDB (the endpoint is a node agent flag, never a policy or workload field). The bridge's
    row UUID is recorded when a port is added: a bridge deleted and re-created is another
    incarnation and no longer the approved one for that port."""

    name: NetdevName = Field(description="The bridge's name in OVSDB (Bridge.name).")
    alias: Alias = Field(description="What a workload's config names instead of the bridge.")
    vlans: list[VlanRange] = _vlan_ranges("VLAN IDs a port's tag and trunks may use.")


def _distinct_grants(grants: list[HostBridgeGrant] | list[OvsBridgeGrant], what: str) -> None:
    for key, plural in (("alias", "aliases"), ("name", "names")):
        values = [getattr(g, key) for g in grants]
        if len(set(values)) != len(values):
            raise ValueError(f"{what} {plural} must be distinct")


class Exposure(ApiModel):
    """The persona an ``Expose`` policy publishes for each selected item."""

    persona: Persona = Field(description="Which allocation contract the item is offered under.")
    plugin: str = Field(
        min_length=1, max_length=63, pattern=DNS_LABEL, description="Root plugin, e.g. sriov-cni."
    )
    mode: str = Field(
        min_length=1,
        max_length=32,
        pattern=DNS_LABEL,
        description="Plugin mode published as the mode attribute (kernel, vfio, bridge, l2...).",
    )
    allow_multiple_allocations: bool = Field(
        default=False, description="Shared parent: several claims may allocate it at once."
    )
    capacity: ExposureCapacity | None = Field(
        default=None, description="Consumable capacity; required when allocations are shared."
    )
    compatibility: list[Compatibility] = Field(
        default_factory=list,
        max_length=MAX_COMPATIBILITY,
        description="Compatibility domains; the agent rejects more than two.",
    )
    effect_permissions: list[Opcode] = list_set(
        max_items=32,
        default_factory=list,
        description="Opcodes (family/verb/vN) hooks may run on this persona.",
    )
    attributes: dict[str, str] | None = Field(
        default=None,
        max_length=8,
        description=(
            "Extra string attributes under the driver domain; reserved names are rejected "
            "and cannot override identity, capacity, groups or eligibility."
        ),
    )
    allowed_host_bridges: list[HostBridgeGrant] | None = list_map(
        "alias",
        max_items=MAX_BRIDGE_GRANTS,
        default=None,
        description=(
            "Linux bridges the item's switchdev representor may join (accelerated-bridge-cni), "
            "by administrator alias."
        ),
    )
    allowed_ovs_bridges: list[OvsBridgeGrant] | None = list_map(
        "alias",
        max_items=MAX_BRIDGE_GRANTS,
        default=None,
        description=(
            "Open vSwitch bridges the item's switchdev representor may be added to (ovs-cni), "
            "by administrator alias."
        ),
    )

    @model_validator(mode="after")
    def _grants_distinct(self) -> Exposure:
        _distinct_grants(self.allowed_host_bridges or [], "allowedHostBridges")
        _distinct_grants(self.allowed_ovs_bridges or [], "allowedOvsBridges")
        return self


class HardwarePolicy(ApiModel):
    """Hardware changes the agent may make during approved maintenance (typed, not paths)."""

    allowed_drivers: list[Literal["kernel", "vfio-pci"]] = list_set(
        max_items=2, default_factory=list, description="Drivers a function may be rebound to."
    )
    reset_scopes: list[Literal["Function", "Slot"]] = list_set(
        max_items=2, default_factory=list, description="Resets the agent may perform."
    )
    eswitch_modes: list[Literal["legacy", "switchdev"]] = list_set(
        max_items=2, default_factory=list, description="Eswitch modes a PF may be placed in."
    )
    num_vfs: int | None = Field(
        default=None, ge=0, le=256, description="Desired VF count on selected PFs."
    )


class EswitchManagement(ApiModel):
    """Node-level management of one PF's devlink eswitch mode (design §6.7 ManageEswitch).

    The node agent places the selected PF in ``mode`` once its whole SR-IOV family is drained
    (no allocation, preparation, share or reservation of the PF or any of its VFs), and
    restores the mode it recorded when the policy goes or changes (again only when drained).
    ``allowedModes`` must hold both the desired mode and every mode it may restore;
    ``effectPermissions`` must grant ``devlink/eswitch-configure/v1`` explicitly."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": validations(
            ("self.mode in self.allowedModes", "allowedModes must contain mode"),
            (
                "'devlink/eswitch-configure/v1' in self.effectPermissions",
                "effectPermissions must grant devlink/eswitch-configure/v1",
            ),
        )
    }

    profile: Literal["ethernet-pf-vfs-v1"] = Field(
        description="The management profile: a local Ethernet PF with VFs."
    )
    mode: Literal["legacy", "switchdev"] = Field(description="The eswitch mode to place it in.")
    allowed_modes: list[Literal["legacy", "switchdev"]] = list_set(
        max_items=2, description="Modes the agent may set or restore (both directions)."
    )
    effect_permissions: list[Opcode] = list_set(
        max_items=4, description="Opcodes the management may run (devlink/eswitch-configure/v1)."
    )


class DeviceExposurePolicySpec(ApiModel):
    """What to expose (or exclude), where, and with which precedence."""

    model_config = ApiModel.model_config | {
        "json_schema_extra": validations(
            ("self.action != 'Expose' || has(self.exposure)", "Expose requires exposure"),
            ("self.action == 'Expose' || !has(self.exposure)", "only Expose takes exposure"),
            (
                "self.action != 'ManageEswitch' || has(self.management)",
                "ManageEswitch requires management",
            ),
            (
                "self.action == 'ManageEswitch' || !has(self.management)",
                "only ManageEswitch takes management",
            ),
            (
                "self.action != 'ManageEswitch' || (has(self.selector.pciAddresses) && "
                "size(self.selector.pciAddresses) == 1)",
                "ManageEswitch selects exactly one PF by pciAddresses",
            ),
        )
    }

    node_selector: NodeSelector | None = Field(
        default=None, description="Nodes the policy applies to; absent means every node."
    )
    priority: int = Field(
        default=100, ge=0, le=1000, description="Higher wins; equal-priority conflicts are errors."
    )
    selector: HardwareSelector = Field(description="Items the policy applies to.")
    action: Literal["Expose", "Exclude", "ManageEswitch"] = Field(
        default="Expose",
        description=(
            "Expose as a persona, keep items from being exposed, or manage one PF's eswitch mode."
        ),
    )
    exposure: Exposure | None = Field(default=None, description="The persona (Expose only).")
    management: EswitchManagement | None = Field(
        default=None, description="The eswitch mode management (ManageEswitch only)."
    )
    hardware: HardwarePolicy | None = Field(
        default=None, description="Hardware changes authorized for the selected items."
    )


#: Node reports one policy's status lists: those of the nodes that need attention, by node
#: name (every node is counted; each node's own report is on its Node). The bound keeps the
#: policy, which every node's agent watches and reads, from growing with the cluster.
MAX_LISTED_NODES = 32
#: Reason-coded problems one node reports on one policy (the aggregate keeps 64).
MAX_NODE_DIAGNOSTICS = 16
#: The conditions a node agent reports, each in its node's entry.
NodeConditionType = Literal["Ready", "Conflict", "Unsupported", "PendingDrain"]
NODE_CONDITION_TYPES: tuple[str, ...] = ("Ready", "Conflict", "Unsupported", "PendingDrain")


class NodeCondition(Condition):
    """A condition in one node's report (tighter bounds than a top-level condition)."""

    type: NodeConditionType = Field(description="Which node-owned condition.")
    status: Literal["True", "False", "Unknown"] = Field(description="Whether it holds.")
    observed_generation: int | None = Field(
        default=None, ge=0, description="Generation of the policy the condition is about."
    )
    last_transition_time: str = Field(
        json_schema_extra={"format": "date-time"}, description="When the status last changed."
    )
    reason: str = Field(
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        description="Reason code (a finding's code when the condition is an error).",
    )
    message: str = Field(max_length=1024, description="Human-readable detail.")


class NodePolicyStatus(ApiModel):
    """What one node's agent made of the policy. The agent writes it into the annotation
    ``policy-status`` of its own Node, which only that agent may write (the chart's
    ``dra-multi-network-node-capabilities`` admission policy); the controller copies the
    entries that need attention into the policy's ``status.nodes``."""

    node_name: str = Field(
        min_length=1, max_length=253, description="The node this report is from."
    )
    observed_generation: int | None = Field(
        default=None, ge=0, description="Generation of the policy the node acted upon."
    )
    conditions: list[NodeCondition] | None = list_map(
        "type",
        max_items=len(NODE_CONDITION_TYPES),
        default=None,
        description="Ready, Conflict, Unsupported and PendingDrain on this node.",
    )
    exposed_devices: int = Field(
        default=0, ge=0, description="Personas this node publishes from the policy."
    )
    diagnostics: list[DiagnosticEntry] | None = Field(
        default=None,
        max_length=MAX_NODE_DIAGNOSTICS,
        description="Reason-coded problems on this node (conflicts, limits).",
    )
    last_report_time: str = Field(
        json_schema_extra={"format": "date-time"},
        description="When the node last changed this report (not a heartbeat).",
    )


class DeviceExposurePolicyStatus(ApiModel):
    """What the policy does across the cluster.

    Every field is the controller's: ``Validated`` and the aggregate of the node agents'
    reports, read from each Node's ``policy-status`` annotation (``Ready`` only when every
    reporting node is ready, ``Conflict``/``Unsupported``/``PendingDrain`` when any node says
    so, the nodes counted, ``exposedDevices`` summed, ``diagnostics`` merged), and in
    ``nodes`` the reports of the nodes that need attention."""

    observed_generation: int | None = Field(
        default=None, ge=0, description="Generation the controller last validated."
    )
    conditions: list[Condition] | None = list_map(
        "type",
        max_items=16,
        default=None,
        description="Validated; Ready, Conflict, Unsupported, PendingDrain over all nodes.",
    )
    exposed_devices: int | None = Field(
        default=None, ge=0, description="Personas published from this policy on all nodes."
    )
    diagnostics: list[DiagnosticEntry] | None = Field(
        default=None, max_length=64, description="Reason-coded problems (conflicts, limits)."
    )
    reporting_nodes: int | None = Field(
        default=None, ge=0, description="Nodes whose agent reports on this policy."
    )
    ready_nodes: int | None = Field(
        default=None, ge=0, description="Reporting nodes on which the policy is Ready."
    )
    # atomic, not a list-map keyed by nodeName: one field in managedFields, whatever it holds
    nodes: list[NodePolicyStatus] | None = Field(
        default=None,
        max_length=MAX_LISTED_NODES,
        json_schema_extra={"x-kubernetes-list-type": "atomic"},
        description=(
            "The reports of the nodes that need attention (not Ready, a conflict, "
            "unsupported hardware, a pending drain, diagnostics, or an older generation), "
            "by node name; each node's own report is its Node's annotation "
            "dra-multi-network.schseba.github.io/policy-status."
        ),
    )


class DeviceExposurePolicy(ApiModel):
    """Cluster-scoped, administrator-owned exposure policy."""

    api_version: Literal["networking.dra-multi-network.schseba.github.io/v1alpha1"] = Field(
        default="networking.dra-multi-network.schseba.github.io/v1alpha1",
        description="API version.",
    )
    kind: Literal["DeviceExposurePolicy"] = Field(
        default="DeviceExposurePolicy", description="Kind."
    )
    metadata: dict[str, Any] = Field(default_factory=dict, description="Object metadata.")
    spec: DeviceExposurePolicySpec = Field(description="Desired exposure.")
    status: DeviceExposurePolicyStatus | None = Field(default=None, description="Observed state.")
