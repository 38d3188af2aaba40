"""Policies → personas: match DeviceExposurePolicies against normalized inventory facts.

Entry point: :func:`build_personas`. Pure: inventory, policies, node labels and the
node's pins (allocated and cleanup-pending devices with their last published
declarations) in; a :class:`PersonaSet` out.

Rules (design §5.2–5.5):

* A policy applies when its node selector matches and every set selector field matches a
  *known* fact of the item. Higher priority wins per (item, persona); two equal-priority
  policies giving one item the same persona are an ``E_POLICY_CONFLICT`` and the item gets
  neither. An ``Exclude`` at priority ≥ an exposure's removes it.
* Protected items are never exposed (``W_PROTECTED``); items whose state is unknown are not
  exposed (``W_UNKNOWN_STATE``).
* Compatibility domains become counter sets named from the scope's inventory identity and
  the domain; at most two per device. A third is ``E_THIRD_DOMAIN`` — never flattened.
* VFIO personas on a function that shares its IOMMU group need every peer unbound or
  VFIO-bound and unprotected, and an ``IommuGroup`` domain to represent the coupling.
* Pinned devices (allocated or cleanup-pending) keep their previous declaration exactly —
  name, groups, counter sets, capacity. A pinned device whose policy went away, or whose
  policy now gives a different declaration, is kept with ``allocationReady=false`` (design
  §5.6: block new workloads until the scope is drained); so is a cleanup-pending
  device and every peer whose groups do not intersect its groups on a shared counter set;
  personas new on an item with pins wait (``allocationReady=false``) until the item is
  drained.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from dmn.agent.inventory.facts import (
    Binding,
    Inventory,
    InventoryItem,
    IommuPeer,
    ItemKind,
    Unknown,
)
from dmn.agent.personas.model import (
    RESERVED,
    Children,
    Consumption,
    Finding,
    FindingCode,
    Grant,
    Persona,
    PersonaSet,
)
from dmn.api.policy import (
    DeviceExposurePolicy,
    Exposure,
    HardwareSelector,
    HostBridgeGrant,
    NodeSelector,
    vlan_ids,
)
from dmn.api.policy import OvsBridgeGrant as ApiOvsBridgeGrant
from dmn.host.rtnetlink.links import LinkState
from dmn.interpreter.canonical_json import canonical_json
from dmn.opcodes.device_environment import BridgeGrant, OvsBridgeGrant, UplinkGrant
from dmn.vocabulary.terms import Access, HandleType

log = logging.getLogger(__name__)

MAX_DOMAINS = 2
MAX_ATTRIBUTES_AND_CAPACITIES = 32
MAX_ATTRIBUTE_VALUE = 64
MAX_ATTRIBUTE_ID = 32
_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True, slots=True)
class Pins:
    """What the journal says is still in use, keyed by device name.

    ``previous`` holds every declaration of the last published set (by device name); a
    device in ``allocated`` or ``cleanup_pending`` keeps its declaration until drained,
    and a persona absent from ``previous`` is new.
    """

    allocated: frozenset[str] = frozenset()
    cleanup_pending: frozenset[str] = frozenset()
    previous: Mapping[str, Persona] = field(default_factory=dict)

    def pinned(self) -> frozenset[str]:
        return self.allocated | self.cleanup_pending


def policy_digest(policy: DeviceExposurePolicy) -> str:
    """64 hex digits of SHA-256 over the canonical spec (fits the 64-char attribute limit)."""
    return hashlib.sha256(canonical_json(policy.spec.to_api())).hexdigest()


def device_name(inventory_id: str, persona: str) -> str:
    """Deterministic DNS-label device name from inventory identity and persona."""
    return f"{inventory_id}-{persona}"


def node_selector_matches(selector: NodeSelector | None, labels: Mapping[str, str]) -> bool:
    if selector is None:
        return True
    for key, value in (selector.match_labels or {}).items():
        if labels.get(key) != value:
            return False
    for req in selector.match_expressions or ():
        present = req.key in labels
        values = set(req.values or ())
        if req.operator == "In" and not (present and labels[req.key] in values):
            return False
        if req.operator == "NotIn" and present and labels[req.key] in values:
            return False
        if req.operator == "Exists" and not present:
            return False
        if req.operator == "DoesNotExist" and present:
            return False
    return True


def selector_matches(sel: HardwareSelector, item: InventoryItem) -> bool:
    """AND over set fields, OR within one field; an unknown fact never matches."""
    checks: list[tuple[Sequence[object] | None, object]] = [
        (sel.pci_addresses, item.pci_address),
        (sel.pf_pci_addresses, item.pf_pci_address or None),
        (sel.vendors, item.vendor or None),
        (sel.devices, item.device or None),
        (sel.drivers, item.driver or None),
        (sel.link_types, item.link_type or None),
        (sel.numa_nodes, item.numa_node),
    ]
    if sel.kind is not None and sel.kind != item.kind.value:
        return False
    for allowed, fact in checks:
        if allowed is not None and (fact is None or fact not in allowed):
            return False
    return sel.rdma_capable is None or sel.rdma_capable == item.rdma_capable


_GRANTS: dict[str, tuple[Grant, ...]] = {
    "kernel": (
        Grant(HandleType.KERNEL_INTERFACE, frozenset({Access.READ, Access.EXCLUSIVE_CONFIGURE})),
    ),
    # the allocation hands a VFIO root the PCI function itself: its prepare program binds it
    # to vfio-pci (ExclusiveConfigure) and its connect program grants the device node
    "vfio": (
        Grant(
            HandleType.PCI_FUNCTION,
            frozenset({Access.READ, Access.EXCLUSIVE_CONFIGURE, Access.DEVICE_ACCESS}),
        ),
    ),
    "macvlan": (Grant(HandleType.SHARED_PARENT, frozenset({Access.CREATE_CHILD})),),
    "ipvlan": (Grant(HandleType.SHARED_PARENT, frozenset({Access.CREATE_CHILD})),),
    "representor": (
        Grant(HandleType.HOST_REPRESENTOR, frozenset({Access.READ, Access.EXCLUSIVE_CONFIGURE})),
    ),
}
_RDMA_GRANT = Grant(HandleType.RDMA_DEVICE, frozenset({Access.DEVICE_ACCESS}))
#: a kernel or VFIO function in switchdev mode carries its host representor (design §6.7):
#: a sriov-cni root with ``representor: true`` prepares it for accelerated-bridge-cni/ovs-cni
_REPRESENTOR_GRANT = Grant(
    HandleType.HOST_REPRESENTOR, frozenset({Access.READ, Access.EXCLUSIVE_CONFIGURE})
)


def bridge_grant(g: HostBridgeGrant) -> BridgeGrant:
    """The node-side form of an ``allowedHostBridges`` entry (what the executors resolve
    aliases through)."""
    uplinks = tuple(
        UplinkGrant(u.alias, u.name, u.pci_address, vlan_ids(u.vlans)) for u in g.uplinks or ()
    )
    return BridgeGrant(g.alias, g.name, vlan_ids(g.vlans), g.mac, uplinks)


def ovs_bridge_grant(g: ApiOvsBridgeGrant) -> OvsBridgeGrant:
    """The node-side form of an ``allowedOvsBridges`` entry."""
    return OvsBridgeGrant(g.alias, g.name, vlan_ids(g.vlans))


def build_personas(
    inventory: Inventory,
    policies: Sequence[DeviceExposurePolicy],
    node_labels: Mapping[str, str],
    pins: Pins | None = None,
    *,
    degraded: bool = False,
) -> PersonaSet:
    """Evaluate policies on one node. ``degraded`` (the API server stripped a prerequisite
    field, see :mod:`dmn.agent.slices.readback`) makes every persona that relies on
    counters, capacity or groups unallocatable."""
    pins = pins or Pins()
    findings: list[Finding] = []
    applicable = [
        pol for pol in policies if node_selector_matches(pol.spec.node_selector, node_labels)
    ]
    by_pci = {item.pci_address: item for item in inventory.items.values()}

    # 1. winners per (item, persona), with equal-priority conflicts and exclusions
    chosen: dict[tuple[str, str], DeviceExposurePolicy] = {}
    conflicted: set[tuple[str, str]] = set()
    for item_id in sorted(inventory.items):
        item = inventory.items[item_id]
        matching = [pol for pol in applicable if selector_matches(pol.spec.selector, item)]
        excludes = [pol.spec.priority for pol in matching if pol.spec.action == "Exclude"]
        top_exclude = max(excludes, default=-1)
        by_persona: dict[str, list[DeviceExposurePolicy]] = {}
        for pol in matching:
            if pol.spec.action == "Expose" and pol.spec.exposure is not None:
                by_persona.setdefault(pol.spec.exposure.persona, []).append(pol)
        for persona, candidates in sorted(by_persona.items()):
            best = max(c.spec.priority for c in candidates)
            if best <= top_exclude:
                continue
            winners = [c for c in candidates if c.spec.priority == best]
            if len(winners) > 1:
                names = sorted(_name(w) for w in winners)
                conflicted.add((item_id, persona))
                for w in winners:
                    findings.append(
                        Finding(
                            FindingCode.E_POLICY_CONFLICT,
                            f"policies {', '.join(names)} give persona {persona} at equal "
                            f"priority {best}",
                            policy=_name(w),
                            item=item_id,
                        )
                    )
                continue
            chosen[(item_id, persona)] = winners[0]

    # 2. build each chosen persona, rejecting what cannot be represented safely
    digests = {id(pol): policy_digest(pol) for pol in applicable}
    fresh: dict[str, Persona] = {}
    for (item_id, _persona), policy in sorted(chosen.items(), key=lambda kv: kv[0]):
        item = inventory.items[item_id]
        assert policy.spec.exposure is not None
        built = _build_one(
            item, policy, policy.spec.exposure, digests[id(policy)], inventory, by_pci, findings
        )
        if built is not None:
            fresh[built.name] = built

    # 3. pins: retain declarations, hold new personas on items with pins
    pinned = pins.pinned()
    pinned_items = {pins.previous[n].inventory_id for n in pinned if n in pins.previous}
    result: dict[str, Persona] = {}
    for name, p in fresh.items():
        if name in pinned and name in pins.previous:
            prev = pins.previous[name]
            changed = _declaration(prev) != _declaration(p)
            if changed:
                findings.append(
                    Finding(
                        FindingCode.W_PENDING_DRAIN,
                        "declaration changed while allocated; previous declaration kept, "
                        "no new allocations, until drained",
                        policy=p.policy,
                        item=p.inventory_id,
                        device=name,
                    )
                )
            # a change waits for drain: block new workloads so the drain can complete
            result[name] = replace(prev, retained=False, allocation_ready=not changed)
        elif p.inventory_id in pinned_items and name not in pins.previous:
            findings.append(
                Finding(
                    FindingCode.W_PENDING_DRAIN,
                    "new persona on an item with active allocations waits for drain",
                    policy=p.policy,
                    item=p.inventory_id,
                    device=name,
                )
            )
            result[name] = replace(p, allocation_ready=False)
        else:
            result[name] = p
    for name in sorted(pinned):
        if name in result or name not in pins.previous:
            continue
        findings.append(
            Finding(
                FindingCode.W_PENDING_DRAIN,
                "policy no longer exposes this allocated device; declaration retained, "
                "not allocatable, until drained",
                item=pins.previous[name].inventory_id,
                device=name,
            )
        )
        result[name] = replace(pins.previous[name], retained=True, allocation_ready=False)

    # 4. cleanup-pending devices and their incompatible peers are not allocatable
    for name in pins.cleanup_pending:
        if name not in result:
            continue
        pending = result[name]
        result[name] = replace(pending, allocation_ready=False)
        for other_name, other in list(result.items()):
            if other_name != name and _incompatible(pending, other):
                result[other_name] = replace(other, allocation_ready=False)

    # 5. a ManageEswitch transition pending on a PF fences its SR-IOV family: no new
    #    allocations until the agent has changed the mode (the drain it waits for could never
    #    finish while the family stayed allocatable); the fence lifts when a rescan reads the
    #    requested mode
    fenced = _eswitch_fenced(inventory, applicable)
    for name, p in list(result.items()):
        if p.inventory_id in fenced and p.allocation_ready:
            result[name] = replace(p, allocation_ready=False)
            findings.append(
                Finding(
                    FindingCode.W_PENDING_DRAIN,
                    "an eswitch mode change of this function's PF waits for drain; "
                    "no new allocations until it is done",
                    policy=p.policy,
                    item=p.inventory_id,
                    device=name,
                )
            )

    if degraded:
        for name, p in list(result.items()):
            if p.consumptions or p.children is not None:
                result[name] = replace(p, allocation_ready=False)

    totals: dict[str, int] = {}
    for p in result.values():
        for c in p.consumptions:
            totals[c.counter_set] = totals.get(c.counter_set, 0) + 1
    personas = tuple(result[n] for n in sorted(result))
    log.info(
        "personas built personas=%d counter_sets=%d findings=%d",
        len(personas),
        len(totals),
        len(findings),
    )
    return PersonaSet(
        personas=personas, counter_sets=dict(sorted(totals.items())), findings=tuple(findings)
    )


def _name(policy: DeviceExposurePolicy) -> str:
    return str(policy.metadata.get("name", "<unnamed>"))


def _declaration(p: Persona) -> tuple[object, ...]:
    return (p.plugin, p.mode, p.link_type, p.children, p.consumptions, p.allow_multiple_allocations)


def _incompatible(a: Persona, b: Persona) -> bool:
    """True when a and b share a counter set on which their groups do not intersect."""
    groups_b = {c.counter_set: set(c.groups) for c in b.consumptions}
    for c in a.consumptions:
        other = groups_b.get(c.counter_set)
        if other is not None and not (set(c.groups) & other):
            return True
    return False


def _build_one(
    item: InventoryItem,
    policy: DeviceExposurePolicy,
    exposure: Exposure,
    digest: str,
    inventory: Inventory,
    by_pci: Mapping[str, InventoryItem],
    findings: list[Finding],
) -> Persona | None:
    pname = _name(policy)

    def reject(code: FindingCode, message: str) -> None:
        findings.append(Finding(code, message, policy=pname, item=item.inventory_id))

    if item.is_protected:
        reject(
            FindingCode.W_PROTECTED,
            f"{item.pci_address or item.inventory_id} is protected "
            f"({', '.join(r.value for r in item.protected)}); never exposed",
        )
        return None
    persona = exposure.persona
    if persona in ("kernel", "macvlan", "ipvlan"):
        if item.binding is not Binding.KERNEL:
            reject(FindingCode.E_POLICY_INVALID, f"persona {persona} needs a kernel-bound function")
            return None
        if not item.netdevs:
            reject(
                FindingCode.W_UNKNOWN_STATE,
                "kernel-bound function has no netdev in the host namespace",
            )
            return None
        if any(not isinstance(n.state, LinkState) for n in item.netdevs):
            reject(FindingCode.W_UNKNOWN_STATE, "live link state unknown")
            return None
    if persona in ("macvlan", "ipvlan"):
        if not exposure.allow_multiple_allocations or exposure.capacity is None:
            reject(
                FindingCode.E_POLICY_INVALID,
                f"persona {persona} is a shared parent: needs allowMultipleAllocations "
                "and capacity.children",
            )
            return None
        if item.link_type != "ethernet":
            reject(FindingCode.E_POLICY_INVALID, f"persona {persona} needs an ethernet link")
            return None
    if persona == "vfio" and item.binding not in (Binding.VFIO, Binding.UNBOUND):
        hw = policy.spec.hardware
        if hw is None or "vfio-pci" not in hw.allowed_drivers:
            reject(
                FindingCode.E_POLICY_INVALID,
                "vfio persona needs a vfio-bound function or allowedDrivers: [vfio-pci]",
            )
            return None
    if persona == "representor" and item.representor is None:
        reject(FindingCode.E_POLICY_INVALID, "no switchdev representor for this function")
        return None
    if exposure.allow_multiple_allocations and persona not in ("macvlan", "ipvlan"):
        reject(
            FindingCode.E_POLICY_INVALID,
            f"persona {persona} is exclusive; allowMultipleAllocations is not allowed",
        )
        return None

    if len(exposure.compatibility) > MAX_DOMAINS:
        domains = ", ".join(f"{c.scope}/{c.domain}" for c in exposure.compatibility)
        reject(
            FindingCode.E_THIRD_DOMAIN,
            f"{len(exposure.compatibility)} compatibility domains ({domains}); the scheduler "
            f"represents at most {MAX_DOMAINS} per device and a third is not flattened",
        )
        return None
    scopes = [(c.scope, c.domain) for c in exposure.compatibility]
    if len(set(scopes)) != len(scopes):
        reject(FindingCode.E_POLICY_INVALID, "duplicate compatibility scope/domain")
        return None

    if persona == "vfio" and isinstance(item.iommu_peer_details, Unknown):
        reject(
            FindingCode.W_UNKNOWN_STATE,
            f"IOMMU group members unknown ({item.iommu_peer_details.reason}): VFIO isolation "
            "cannot be established",
        )
        return None
    if persona == "vfio" and item.iommu_peers:
        peers: tuple[IommuPeer, ...] = (
            () if isinstance(item.iommu_peer_details, Unknown) else item.iommu_peer_details
        )
        details = {p.pci_address: p for p in peers}
        for peer in item.iommu_peers:
            other = by_pci.get(peer)
            known = details.get(peer)
            kernel_bound = (other is not None and other.binding is Binding.KERNEL) or (
                known is None or not known.allows_vfio
            )
            if (other is not None and other.is_protected) or kernel_bound:
                reject(
                    FindingCode.E_IOMMU_GROUP_BUSY,
                    f"IOMMU group {item.iommu_group} peer {peer} is bound to a host driver "
                    f"({known.driver if known else 'unknown'}) or protected",
                )
                return None
        if not any(c.scope == "IommuGroup" for c in exposure.compatibility):
            reject(
                FindingCode.E_ISOLATION_UNREPRESENTED,
                f"IOMMU group {item.iommu_group} is shared with {', '.join(item.iommu_peers)}; "
                "an IommuGroup compatibility domain is required",
            )
            return None
    if persona == "vfio" and item.iommu_group is None:
        reject(FindingCode.W_UNKNOWN_STATE, "no IOMMU group: VFIO isolation cannot be established")
        return None

    consumptions: list[Consumption] = []
    for c in exposure.compatibility:
        scope_id = _scope_identity(c.scope, item, inventory, by_pci)
        if scope_id is None:
            reject(FindingCode.E_POLICY_INVALID, f"scope {c.scope} does not apply to this item")
            return None
        consumptions.append(Consumption(f"{scope_id}-{c.domain}", tuple(c.groups)))

    extras: dict[str, str] = {}
    for key, value in sorted((exposure.attributes or {}).items()):
        if key in RESERVED or "/" in key:
            reject(FindingCode.E_RESERVED_ATTRIBUTE, f"attribute {key!r} is reserved")
            return None
        if len(key) > MAX_ATTRIBUTE_ID or _C_IDENTIFIER.fullmatch(key) is None:
            reject(
                FindingCode.E_ATTRIBUTE_LIMIT,
                f"attribute name {key!r} is not a C identifier of at most {MAX_ATTRIBUTE_ID} "
                "characters",
            )
            return None
        extras[key] = value

    children = None
    if exposure.capacity is not None:
        cap = exposure.capacity.children
        valid = tuple(int(v) for v in cap.valid_values)
        if int(cap.default) not in valid or list(valid) != sorted(set(valid)):
            reject(
                FindingCode.E_POLICY_INVALID,
                "capacity validValues must be ascending and include default",
            )
            return None
        children = Children(int(cap.value), int(cap.default), valid)

    grants = _GRANTS[persona]
    if item.rdma_capable and persona in ("kernel", "vfio"):
        grants = (*grants, _RDMA_GRANT)
    if item.representor is not None and persona in ("kernel", "vfio"):
        grants = (*grants, _REPRESENTOR_GRANT)
    p = Persona(
        name=device_name(item.inventory_id, persona),
        inventory_id=item.inventory_id,
        persona=persona,
        plugin=exposure.plugin,
        mode=exposure.mode,
        link_type=_link_type(item, by_pci),
        pci_address=item.pci_address,
        pf_pci_address=item.pf_pci_address,
        rdma_capable=item.rdma_capable,
        allocation_ready=True,
        policy=pname,
        policy_digest=digest,
        allow_multiple_allocations=exposure.allow_multiple_allocations,
        children=children,
        consumptions=tuple(consumptions),
        grants=grants,
        effect_permissions=tuple(sorted(exposure.effect_permissions)),
        pcie_root=item.pcie_root,
        numa_node=item.numa_node,
        extra_attributes=extras,
        allowed_drivers=tuple(
            d
            for d in (policy.spec.hardware.allowed_drivers if policy.spec.hardware else ())
            if d != "kernel"
        ),
        bridge_grants=tuple(bridge_grant(g) for g in exposure.allowed_host_bridges or ()),
        ovs_bridge_grants=tuple(ovs_bridge_grant(g) for g in exposure.allowed_ovs_bridges or ()),
    )
    attrs = p.attributes()
    too_long = [
        k for k, v in attrs.items() if len(str(next(iter(v.values())))) > MAX_ATTRIBUTE_VALUE
    ]
    if too_long or len(attrs) + (1 if children else 0) > MAX_ATTRIBUTES_AND_CAPACITIES:
        reject(
            FindingCode.E_ATTRIBUTE_LIMIT,
            f"attribute limits exceeded ({', '.join(too_long) or 'count'})",
        )
        return None
    return p


def _eswitch_fenced(inventory: Inventory, policies: Sequence[DeviceExposurePolicy]) -> set[str]:
    """Inventory IDs of every SR-IOV family whose PF a ManageEswitch policy wants in another
    eswitch mode than the scan read (a mode the scan could not read counts as other)."""
    fenced: set[str] = set()
    for pol in policies:
        management = pol.spec.management
        addresses = pol.spec.selector.pci_addresses or []
        if pol.spec.action != "ManageEswitch" or management is None or len(addresses) != 1:
            continue
        pf = inventory.by_pci(addresses[0])
        if pf is None or pf.kind is not ItemKind.PF or pf.eswitch_mode == management.mode:
            continue
        fenced.add(pf.inventory_id)
        fenced.update(
            i.inventory_id for i in inventory.items.values() if i.pf_pci_address == pf.pci_address
        )
    return fenced


def _link_type(item: InventoryItem, by_pci: Mapping[str, InventoryItem]) -> str:
    """The item's link type; a VF without a host netdev (VFIO, unbound) inherits its PF's."""
    if item.link_type:
        return item.link_type
    parent = by_pci.get(item.pf_pci_address) if item.pf_pci_address else None
    if parent is not None and parent.link_type:
        return parent.link_type
    return "ethernet"


def _scope_identity(
    scope: str, item: InventoryItem, inventory: Inventory, by_pci: Mapping[str, InventoryItem]
) -> str | None:
    if scope == "Interface":
        return item.inventory_id
    if scope == "SriovFamily":
        if not item.pf_pci_address:
            return item.inventory_id
        parent = by_pci.get(item.pf_pci_address)
        return parent.inventory_id if parent is not None else None
    if scope == "IommuGroup":
        if item.iommu_group is None:
            return None
        digest = hashlib.sha256(f"{inventory.node_uid}\0iommu\0{item.iommu_group}".encode())
        return f"iog-{digest.hexdigest()[:12]}"
    return None
