"""Handles and port wiring for the coordinator's calls: pure except for one link lookup.

:func:`kernel_handle` turns a verified root (persona + allocation result) into the
``KernelInterface`` handle a ``prepare`` program receives — only for the live link the
inventory scanned under that name and MAC; :func:`function_handle` turns a VFIO root into the
``PciFunction`` handle of the function the inventory scanned (its PCI address and ids, which
the ``pci/*`` executors re-verify in sysfs); :func:`root_handle` picks one by the persona's
grants; :func:`allocation_port` picks the descriptor port it fills; :func:`rdma_handle` turns
the RDMA device the inventory joined to a kernel root into the ``RdmaDevice`` handle of the
plugin's RDMA port, re-verified over RDMA netlink (name, node GUID, and the kernel's
association of its port with the granted netdev); :func:`representor_handle` turns the
switchdev representor the inventory joined to a root into its ``HostRepresentor`` handle,
re-verified by switch ID and port name; :func:`root_allocation` assembles every
allocation port of a root; :func:`operation_inputs` wires an Operation step's inputs from
earlier steps' exports.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from dmn.agent.coordinator.verify import Refusal, VerifiedRoot
from dmn.agent.inventory.facts import Inventory
from dmn.agent.personas.model import PersonaSet
from dmn.engine.config_plan import ConfigPlan, plan_for_config
from dmn.host.netns import LinkEnvironment
from dmn.host.rdma import RdmaDev, RdmaError, RdmaNetlink, open_in
from dmn.host.rtnetlink.links import LinkState, by_name
from dmn.host.rtnetlink.representor import switch_port
from dmn.interpreter.loader import Plugin
from dmn.opcodes.executor import ExecutorError
from dmn.vocabulary.handles import Handle, Provenance, Scope
from dmn.vocabulary.terms import Access, HandleType, LinkType, ScopeKind


@dataclass(frozen=True)
class LinkFacts:
    """The kernel link an inventory item was scanned as: its name and MAC ("" unknown)."""

    ifname: str
    mac: str = ""


@dataclass(frozen=True)
class FunctionFacts:
    """The PCI function an inventory item was scanned as (sysfs ``vendor``/``device``)."""

    pci_address: str
    vendor: str = ""
    device: str = ""


@dataclass(frozen=True)
class RdmaFacts:
    """An RDMA device the inventory joined to an item: its name and node GUID (sysfs), and
    the host ifindexes RDMA netlink associated its ports with (``()``: joined by PCI only)."""

    name: str
    node_guid: str
    netdev_ifindexes: tuple[int, ...] = ()


@dataclass(frozen=True)
class RepresentorFacts:
    """The switchdev host representor the inventory's devlink scan joined to an item: its
    netdev name, the port name the driver gives it (``pf0vf1``) and its switch ID ("" when
    the scan read none)."""

    ifname: str
    port_name: str
    switch_id: str


class DeviceView(Protocol):
    """This node's published devices: personas, and the kernel link, PCI function, RDMA
    devices or host representor of an inventory item."""

    def personas(self) -> PersonaSet: ...

    def link(self, inventory_id: str) -> LinkFacts | None: ...

    def function(self, inventory_id: str) -> FunctionFacts | None: ...

    def rdma(self, inventory_id: str) -> tuple[RdmaFacts, ...]: ...

    def representor(self, inventory_id: str) -> RepresentorFacts | None: ...


class InventoryDevices:
    """A :class:`DeviceView` over the node's slice publication and its inventory scan.

    ``personas`` returns what the node last published (None before the first plan) and
    ``inventory`` the current scan; both are callables so a rescan is seen at once.
    """

    def __init__(
        self,
        personas: Callable[[], PersonaSet | None],
        inventory: Callable[[], Inventory],
    ) -> None:
        self._personas = personas
        self._inventory = inventory

    def personas(self) -> PersonaSet:
        current = self._personas()
        if current is None:
            raise Refusal("E_NOT_PUBLISHED", "this node has not published its devices yet")
        return current

    def link(self, inventory_id: str) -> LinkFacts | None:
        item = self._inventory().items.get(inventory_id)
        if item is None or not item.netdevs:
            return None
        netdev = item.netdevs[0]
        mac = netdev.state.mac if isinstance(netdev.state, LinkState) else ""
        return LinkFacts(netdev.ifname, mac)

    def function(self, inventory_id: str) -> FunctionFacts | None:
        item = self._inventory().items.get(inventory_id)
        if item is None or not item.pci_address:
            return None
        return FunctionFacts(item.pci_address, item.vendor, item.device)

    def rdma(self, inventory_id: str) -> tuple[RdmaFacts, ...]:
        item = self._inventory().items.get(inventory_id)
        if item is None:
            return ()
        return tuple(RdmaFacts(r.name, r.node_guid, r.netdev_ifindexes) for r in item.rdma)

    def representor(self, inventory_id: str) -> RepresentorFacts | None:
        item = self._inventory().items.get(inventory_id)
        rep = item.representor if item is not None else None
        if rep is None:
            return None
        switch = rep.switch_id.replace(":", "").lower()
        return RepresentorFacts(rep.ifname, rep.port_name, switch)


# persona grants realised as a KernelInterface handle: a whole link, or a shared parent's
# CreateChild entitlement (the parent stays in the host namespace)
KERNEL_LINK_GRANTS = (HandleType.KERNEL_INTERFACE, HandleType.SHARED_PARENT)


def kernel_handle(
    env: LinkEnvironment, devices: DeviceView, root: VerifiedRoot, claim_uid: str
) -> Handle:
    """The allocation handle of a kernel-link root: the persona's grants on the live link
    the inventory scanned (same name and MAC), in the host namespace."""
    persona, res = root.persona, root.result
    accesses = frozenset(
        a for g in persona.grants if g.type in KERNEL_LINK_GRANTS for a in g.accesses
    )
    if Access.EXCLUSIVE_CONFIGURE in accesses:
        # a link handed off whole belongs to this attachment alone: a later Operation step
        # of the same topology may enslave it (bond-cni members need AttachMember); a
        # shared parent's CreateChild grant never implies it
        accesses |= {Access.ATTACH_MEMBER}
    if not accesses:
        raise Refusal(
            "E_PLUGIN_UNSUPPORTED",
            f"device {res.device} ({persona.persona}) is neither a kernel link nor a PCI "
            "function; this agent prepares kernel-link and VFIO personas only",
            res.device,
        )
    facts = devices.link(persona.inventory_id)
    link = by_name(env.rtnl(env.host), facts.ifname) if facts else None
    if facts is None or link is None:
        raise Refusal(
            "E_DEVICE_GONE", f"device {res.device} has no kernel link on this node", res.device
        )
    if facts.mac and link.mac.lower() != facts.mac.lower():
        raise Refusal(
            "E_DEVICE_IDENTITY",
            f"device {res.device}: {facts.ifname} now has MAC {link.mac}, not {facts.mac}",
            res.device,
        )
    return Handle(
        id=f"{res.device}/{res.share_id}" if res.share_id else res.device,
        type=HandleType.KERNEL_INTERFACE,
        inventory_id=persona.inventory_id,
        scope=Scope(ScopeKind.HOST),
        accesses=accesses,
        link_type=LinkType(persona.link_type) if persona.link_type else LinkType.ETHERNET,
        provenance=_provenance(root, claim_uid),
        observations={"ifName": link.name, "ifIndex": link.index, "mac": link.mac},
    )


def _provenance(root: VerifiedRoot, claim_uid: str) -> Provenance:
    res = root.result
    return Provenance(
        claim_uid=claim_uid,
        request=res.request,
        pool=res.pool,
        device=res.device,
        share_id=res.share_id,
        root_step=root.step,
    )


def function_handle(devices: DeviceView, root: VerifiedRoot, claim_uid: str) -> Handle:
    """The allocation handle of a VFIO root: the persona's grants on the PCI function the
    inventory scanned. Nothing is read from the kernel here; the ``pci/*`` executors
    re-verify the address and ids before they change anything."""
    persona, res = root.persona, root.result
    accesses = frozenset(
        a for g in persona.grants if g.type is HandleType.PCI_FUNCTION for a in g.accesses
    )
    facts = devices.function(persona.inventory_id)
    if facts is None:
        raise Refusal(
            "E_DEVICE_GONE", f"device {res.device} has no PCI function on this node", res.device
        )
    observations: dict[str, str | int | bool] = {"pciAddress": facts.pci_address}
    if facts.vendor:
        observations["vendor"] = facts.vendor
    if facts.device:
        observations["device"] = facts.device
    return Handle(
        id=res.device,
        type=HandleType.PCI_FUNCTION,
        inventory_id=persona.inventory_id,
        scope=Scope(ScopeKind.HOST),
        accesses=accesses,
        provenance=_provenance(root, claim_uid),
        observations=observations,
    )


def root_handle(
    env: LinkEnvironment, devices: DeviceView, root: VerifiedRoot, claim_uid: str
) -> Handle:
    """The allocation handle of a root: a PCI function for personas granting one (VFIO),
    else the kernel link."""
    if any(g.type is HandleType.PCI_FUNCTION for g in root.persona.grants):
        return function_handle(devices, root, claim_uid)
    return kernel_handle(env, devices, root, claim_uid)


def _live_rdma(nl: RdmaNetlink, facts: RdmaFacts, ifindex: int | None) -> RdmaDev | None:
    """The scanned device as the host's RDMA netlink sees it now: same name and node GUID
    and, when the inventory joined it through a netdev, a port still associated with the
    granted link's ifindex. None when it is not (gone, replaced, re-associated)."""
    dev = next((d for d in nl.devices() if d.name == facts.name), None)
    if dev is None or dev.node_guid.lower() != facts.node_guid.lower():
        return None
    if facts.netdev_ifindexes and (
        ifindex is None or not any(p.netdev_index == ifindex for p in nl.ports(dev))
    ):
        return None
    return dev


def rdma_handle(
    env: LinkEnvironment, devices: DeviceView, root: VerifiedRoot, claim_uid: str, link: Handle
) -> Handle:
    """The ``RdmaDevice`` handle of a kernel root that asks for RDMA access: the RDMA device
    the inventory joined to the allocated item (never a name from config), verified now over
    RDMA netlink in the host namespace. It belongs to the granted netdev: when the inventory
    joined it by the kernel's port association, that association must still name the live
    link ``link`` (the root's kernel handle, itself verified by name and MAC). Exactly one
    such device, else the root is refused before anything changes. The handle grants what
    the persona's RDMA grant does, plus ExclusiveConfigure when the link itself was handed
    off whole (the RDMA device goes with its exclusively allocated function, so connect may
    move it into the sandbox); the recorded index and GUID follow it through the journal."""
    persona, res = root.persona, root.result
    accesses = frozenset(
        a for g in persona.grants if g.type is HandleType.RDMA_DEVICE for a in g.accesses
    )
    if not accesses:
        raise Refusal(
            "E_PLUGIN_UNSUPPORTED",
            f"device {res.device} ({persona.persona}) grants no RDMA device; rdmaAccess needs "
            "an RDMA-capable kernel persona",
            res.device,
        )
    if Access.EXCLUSIVE_CONFIGURE in link.accesses:
        accesses |= {Access.READ, Access.EXCLUSIVE_CONFIGURE}
    ifindex = link.observations.get("ifIndex")
    ifindex = ifindex if isinstance(ifindex, int) else None
    facts = [
        f
        for f in devices.rdma(persona.inventory_id)
        if not f.netdev_ifindexes or ifindex in f.netdev_ifindexes
    ]
    if len(facts) != 1:
        raise Refusal(
            "E_DEVICE_IDENTITY" if facts else "E_DEVICE_GONE",
            f"device {res.device}: {len(facts)} RDMA devices belong to its link; exactly one "
            "is needed for rdmaAccess",
            res.device,
        )
    try:
        with open_in(env.fd(env.host)) as nl:
            dev = _live_rdma(nl, facts[0], ifindex)
    except RdmaError as exc:
        raise Refusal("E_RDMA_NETLINK", f"device {res.device}: {exc}", res.device) from exc
    if dev is None:
        raise Refusal(
            "E_DEVICE_IDENTITY",
            f"device {res.device}: RDMA device {facts[0].name} is gone, replaced or no longer "
            "associated with its link",
            res.device,
        )
    return Handle(
        id=f"{res.device}/rdma",
        type=HandleType.RDMA_DEVICE,
        inventory_id=persona.inventory_id,
        scope=Scope(ScopeKind.HOST),
        accesses=accesses,
        provenance=_provenance(root, claim_uid),
        observations={"rdmaDevice": dev.name, "nodeGuid": dev.node_guid, "rdmaIndex": dev.index},
    )


def representor_handle(
    env: LinkEnvironment, devices: DeviceView, root: VerifiedRoot, claim_uid: str
) -> Handle:
    """The ``HostRepresentor`` handle of a switchdev root that asks for its representor
    (sriov-cni ``representor: true``): the representor the inventory's devlink scan joined to
    the allocated function — never a name from config — verified now in the host namespace:
    the link of that name must report the scanned switch ID and port name
    (``IFLA_PHYS_SWITCH_ID``/``IFLA_PHYS_PORT_NAME``, set by the driver, not by whoever holds
    the link), else the root is refused before anything changes. The observations carry that
    identity; the representor executors prove it again before they act."""
    persona, res = root.persona, root.result
    accesses = frozenset(
        a for g in persona.grants if g.type is HandleType.HOST_REPRESENTOR for a in g.accesses
    )
    if not accesses:
        raise Refusal(
            "E_PLUGIN_UNSUPPORTED",
            f"device {res.device} ({persona.persona}) grants no host representor; "
            "representor: true needs a kernel or VFIO function in switchdev mode",
            res.device,
        )
    facts = devices.representor(persona.inventory_id)
    ipr = env.rtnl(env.host)
    link = by_name(ipr, facts.ifname) if facts is not None else None
    if facts is None or link is None:
        raise Refusal(
            "E_DEVICE_GONE", f"device {res.device} has no switchdev representor", res.device
        )
    try:
        found = switch_port(ipr, link.index)
    except ExecutorError as exc:
        raise Refusal("E_REPRESENTOR_MAPPING", f"device {res.device}: {exc}", res.device) from exc
    if not facts.switch_id or found != (facts.switch_id, facts.port_name):
        raise Refusal(
            "E_REPRESENTOR_MAPPING",
            f"device {res.device}: {facts.ifname} is port {found[1] if found else '-'} of "
            f"switch {found[0] if found else '-'}, not {facts.port_name} of "
            f"{facts.switch_id or '(unscanned)'}",
            res.device,
        )
    return Handle(
        id=f"{res.device}/representor",
        type=HandleType.HOST_REPRESENTOR,
        inventory_id=persona.inventory_id,
        scope=Scope(ScopeKind.HOST),
        accesses=accesses,
        provenance=_provenance(root, claim_uid),
        observations={
            "ifName": link.name,
            "ifIndex": link.index,
            "physSwitchID": facts.switch_id,
            "physPortName": facts.port_name,
        },
    )


def root_allocation(
    env: LinkEnvironment, devices: DeviceView, root: VerifiedRoot, claim_uid: str
) -> dict[str, tuple[Handle, ...]]:
    """Every allocation port of a root's ``prepare`` call: the root handle at its port and,
    when the config plan (:func:`~dmn.engine.config_plan.plan_for_config`, the binder's)
    turns an ``RdmaDevice`` port on (``rdmaAccess``), the RDMA device of the same
    allocation, or a ``HostRepresentor`` port (``representor``), the function's verified
    host representor."""
    handle = root_handle(env, devices, root, claim_uid)
    allocation: dict[str, tuple[Handle, ...]] = {allocation_port(root.plugin, handle): (handle,)}
    plan = plan_for_config(root.plugin, dict(root.config))
    if not isinstance(plan, ConfigPlan):  # the binder refuses it with positions
        return allocation
    for name, port in plan.allocation.items():
        if name in allocation:
            continue
        if port.type == HandleType.RDMA_DEVICE.value:
            allocation[name] = (rdma_handle(env, devices, root, claim_uid, handle),)
        elif port.type == HandleType.HOST_REPRESENTOR.value:
            allocation[name] = (representor_handle(env, devices, root, claim_uid),)
    return allocation


def allocation_port(plugin: Plugin, handle: Handle) -> str:
    """The allocation port a kernel-link handle fills: the first KernelInterface port of
    the handle's link type (``interface`` of host-cni/sriov-cni, ``parent`` of a share)."""
    for name, port in (plugin.descriptor.spec.allocation or {}).items():
        if port.type != handle.type.value:
            continue
        if port.link_type is None or handle.link_type is None:
            return name
        if port.link_type == handle.link_type.value:
            return name
    raise Refusal(
        "E_PLUGIN_UNSUPPORTED",
        f"{plugin.name} has no allocation port for a {handle.type.value} handle",
    )


def operation_inputs(
    bindings: Mapping[str, Any], exports: Mapping[str, Mapping[str, tuple[Handle, ...]]]
) -> dict[str, tuple[Handle, ...]]:
    """An Operation step's input ports from earlier steps' exports (``from: step.port``)."""
    out: dict[str, tuple[Handle, ...]] = {}
    for port, binding in bindings.items():
        refs: Sequence[Any] = binding if isinstance(binding, list) else [binding]
        handles: list[Handle] = []
        for ref in refs:
            step, _, out_port = str(ref["from"]).partition(".")
            if step not in exports:
                raise Refusal("E_REF_UNRESOLVED", f"input {port} from {step} which has not run")
            handles.extend(exports[step].get(out_port, ()))
        out[port] = tuple(handles)
    return out
