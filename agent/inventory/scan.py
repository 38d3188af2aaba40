"""One inventory scan: PCI first, then joined with net, RDMA, devlink and live link state.

Entry point: :func:`scan`. Everything node-specific is injected through
:class:`ScanConfig` (sysfs root, link and devlink sources, node UID and IPs, the identity
registry), so the same code reads ``/sys`` on a node and a fixture tree in tests.

Which functions become items: every network-class function (class 0x02xxxx), every VF,
and every function that has a netdev or RDMA device — whatever driver it is bound to,
including ``vfio-pci`` and none. Other PCI functions are still read, because they can be
IOMMU-group and reset-domain peers.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dmn.agent.inventory.facts import (
    Binding,
    Inventory,
    InventoryItem,
    IommuPeer,
    ItemKind,
    Netdev,
    ProtectionReason,
    RdmaDevice,
    Representor,
    Unknown,
)
from dmn.agent.inventory.identity import IdentityRegistry, inventory_id
from dmn.agent.inventory.protection import FunctionNode, protected_functions, protected_links
from dmn.host.devlink import DevlinkPort
from dmn.host.inventory_sources import (
    DevlinkSource,
    LinkSource,
    LiveQueryError,
    RdmaPortNetdev,
    RdmaSource,
)
from dmn.host.rtnetlink.links import LinkState
from dmn.host.sysfs import RawFunction, RawNetdev, RawRdma, SysfsTree

log = logging.getLogger(__name__)

#: The kernel's phys_port_name format for representors: [c<controller>]pf<pf>[vf<vf>|sf<sf>].
_PORT_NAME_RE = re.compile(r"^(?:c(\d+))?pf(\d+)(?:vf(\d+)|sf(\d+))?$")
_VFIO_DRIVERS = frozenset({"vfio-pci"})
_USERSPACE_DRIVERS = frozenset({"uio_pci_generic", "igb_uio", "pci-stub"})


@dataclass
class ScanConfig:
    sysfs_root: Path
    node_uid: str
    links: LinkSource
    devlink: DevlinkSource
    node_ips: Sequence[str] = ()
    protected_pci_addresses: Sequence[str] = ()
    registry: IdentityRegistry = field(default_factory=IdentityRegistry)
    #: Non-PCI kernel links the lab inventory names as NICs (veth ends and the like).
    lab_links: Sequence[str] = ()
    #: RDMA port -> netdev associations (RDMA netlink); None: RDMA joins by PCI only.
    rdma: RdmaSource | None = None


def scan(config: ScanConfig) -> Inventory:
    """Read the node and return a complete :class:`Inventory` (never raises for bad state)."""
    tree = SysfsTree(config.sysfs_root)
    notes: list[str] = []
    raw: dict[str, RawFunction] = {}
    for address in tree.pci_addresses():
        try:
            raw[address] = tree.function(address)
        except OSError as exc:
            notes.append(f"pci {address}: vanished or unreadable during scan ({exc.strerror})")
    netdevs = tree.netdevs()
    rdma = tree.rdma_devices()

    link_states, default_routes = _live_links(config.links, notes)
    state_by_name: dict[str, LinkState] = (
        {s.name: s for s in link_states} if isinstance(link_states, list) else {}
    )
    ports = _devlink_ports(config.devlink, notes)
    rdma_ports = _rdma_ports(config.rdma, notes)

    reps_by_switch, own_netdevs = _split_representors(netdevs, ports)
    rdma_by_pci: dict[str, list[RawRdma]] = {}
    for dev in rdma:
        rdma_by_pci.setdefault(dev.pci_address, []).append(dev)

    vf_index: dict[str, tuple[str, int]] = {}
    for fn in raw.values():
        for number, vf in fn.virtfns.items():
            vf_index[vf] = (fn.address, number)

    selected = [
        fn
        for fn in raw.values()
        if fn.pci_class.startswith("0x02")
        or fn.physfn
        or own_netdevs.get(fn.address)
        or rdma_by_pci.get(fn.address)
    ]

    keys: dict[str, tuple[str, str]] = {}
    for fn in sorted(selected, key=lambda f: (bool(f.physfn), f.address)):
        keys[fn.address] = _hardware_key(fn, own_netdevs, state_by_name, keys, vf_index)
    link_keys = {f"link:{name}": "locator" for name in config.lab_links}
    incarnations = config.registry.assign({**{k: s for k, s in keys.values()}, **link_keys})

    nodes: list[FunctionNode] = []
    for fn in selected:
        nodes.append(
            FunctionNode(
                pci_address=fn.address,
                own_ifnames=tuple(n.ifname for n in own_netdevs.get(fn.address, ())),
                pf_pci_address=fn.physfn,
                reset_domain=_reset_domain(fn),
            )
        )
    protection = protected_functions(
        nodes,
        link_states,
        default_routes,
        config.node_ips,
        config.protected_pci_addresses,
    )

    items: dict[str, InventoryItem] = {}
    for fn in selected:
        key, strength = keys[fn.address]
        inc = incarnations[key]
        parent: str = fn.physfn
        index: int | None = None
        if fn.address in vf_index:
            parent, index = vf_index[fn.address]
        eswitch: str | Unknown = ""
        if fn.sriov_total_vfs > 0 or reps_by_switch.get(fn.address):
            eswitch = _eswitch_mode(config.devlink, fn.address)
        own_rep = None
        if parent and index is not None:
            own_rep = next(
                (
                    r
                    for r in reps_by_switch.get(parent, ())
                    if r.vfnum == index and r.controller == 0
                ),
                None,
            )
        group_members = (
            tree.iommu_group_members(fn.iommu_group) if fn.iommu_group is not None else []
        )
        peer_details = _iommu_peers(fn, group_members, raw)
        if isinstance(peer_details, Unknown):
            notes.append(f"pci {fn.address}: {peer_details.reason}")
        item = InventoryItem(
            inventory_id=inventory_id(config.node_uid, key, inc),
            kind=ItemKind.VF
            if fn.physfn
            else (ItemKind.PF if fn.sriov_total_vfs else ItemKind.FUNCTION),
            hardware_key=key,
            identity_strength=strength,
            incarnation=inc,
            pci_address=fn.address,
            pf_pci_address=parent,
            vf_index=index,
            vendor=fn.vendor,
            device=fn.device,
            subsystem=fn.subsystem,
            pci_class=fn.pci_class,
            driver=fn.driver,
            binding=_binding(fn.driver),
            numa_node=fn.numa_node,
            pcie_root=SysfsTree.pcie_root(fn.real_path),
            iommu_group=fn.iommu_group,
            iommu_peers=()
            if isinstance(group_members, Unknown)
            else tuple(m for m in group_members if m != fn.address),
            iommu_peer_details=peer_details,
            reset_domain=_reset_domain(fn),
            reset_methods=fn.reset_methods,
            sriov_total_vfs=fn.sriov_total_vfs,
            sriov_num_vfs=fn.sriov_num_vfs,
            netdevs=tuple(
                Netdev(
                    ifname=n.ifname,
                    type=n.type,
                    phys_port_name=n.phys_port_name,
                    phys_switch_id=n.phys_switch_id,
                    dev_port=n.dev_port,
                    state=state_by_name.get(n.ifname, Unknown(f"no live state for {n.ifname}"))
                    if isinstance(link_states, list)
                    else link_states,
                )
                for n in own_netdevs.get(fn.address, ())
            ),
            rdma=_item_rdma(
                rdma_by_pci.get(fn.address, ()),
                rdma,
                rdma_ports,
                [
                    state_by_name[n.ifname].index
                    for n in own_netdevs.get(fn.address, ())
                    if n.ifname in state_by_name
                ],
            ),
            eswitch_mode=eswitch,
            representors=tuple(reps_by_switch.get(fn.address, ())),
            representor=own_rep,
            vfio_devices=_vfio_devices(fn),
            protected=protection.get(fn.address, ()),
        )
        items[item.inventory_id] = item
    for link_item in _lab_links(
        config, netdevs, link_states, default_routes, incarnations, rdma, rdma_ports
    ):
        items[link_item.inventory_id] = link_item
    log.info("inventory scan items=%d notes=%d", len(items), len(notes))
    return Inventory(
        node_uid=config.node_uid,
        items=items,
        default_route_ifnames=_route_names(link_states, default_routes),
        notes=tuple(notes),
        identities={k: (s, incarnations[k]) for k, s in keys.values()},
        followed_links=tuple(config.lab_links),
    )


def _lab_links(
    config: ScanConfig,
    netdevs: Sequence[RawNetdev],
    states: list[LinkState] | Unknown,
    routes: frozenset[int] | Unknown,
    incarnations: dict[str, int],
    rdma: Sequence[RawRdma] = (),
    rdma_ports: Sequence[RdmaPortNetdev] = (),
) -> list[InventoryItem]:
    """Items for the lab's named kernel links: identity by name (a lab owns its names)."""
    if not config.lab_links:
        return []
    raw = {n.ifname: n for n in netdevs}
    protected: dict[str, set[ProtectionReason]] = {}
    by_name: dict[str, LinkState] = {}
    if isinstance(states, list) and not isinstance(routes, Unknown):
        by_name = {s.name: s for s in states}
        protected = protected_links(states, routes, config.node_ips)
    out: list[InventoryItem] = []
    for name in config.lab_links:
        state: LinkState | Unknown
        if isinstance(states, Unknown):
            state = states
        elif name in by_name:
            state = by_name[name]
        else:
            continue  # not present: nothing to publish
        rn = raw.get(name)
        reasons = sorted(protected.get(name, ()))
        if isinstance(state, Unknown) or isinstance(routes, Unknown):
            reasons = [ProtectionReason.UNKNOWN_STATE]
        key = f"link:{name}"
        out.append(
            InventoryItem(
                inventory_id=inventory_id(config.node_uid, key, incarnations[key]),
                kind=ItemKind.LINK,
                hardware_key=key,
                identity_strength="locator",
                incarnation=incarnations[key],
                pci_address="",
                binding=Binding.KERNEL,
                netdevs=(
                    Netdev(
                        ifname=name,
                        type=rn.type if rn else 1,
                        phys_port_name=rn.phys_port_name if rn else "",
                        phys_switch_id=rn.phys_switch_id if rn else "",
                        dev_port=rn.dev_port if rn else 0,
                        state=state,
                    ),
                ),
                rdma=_item_rdma(
                    (), rdma, rdma_ports, [state.index] if isinstance(state, LinkState) else []
                ),
                protected=tuple(reasons),
            )
        )
    return out


def _rdma_ports(source: RdmaSource | None, notes: list[str]) -> Sequence[RdmaPortNetdev]:
    if source is None:
        return ()
    try:
        return source.port_netdevs()
    except LiveQueryError as exc:
        notes.append(f"RDMA port netdevs unknown: {exc}")
        return ()


def _item_rdma(
    by_pci: Sequence[RawRdma],
    every: Sequence[RawRdma],
    ports: Sequence[RdmaPortNetdev],
    ifindexes: Sequence[int],
) -> tuple[RdmaDevice, ...]:
    """An item's RDMA devices: those below its PCI function, and those the kernel associates
    with one of its netdevs (soft RDMA over a link; a device of another function never joins
    through a name). Each carries the host ifindexes its ports are associated with; a device
    whose sysfs entry and netlink answer disagree on the node GUID is not joined by netdev."""
    associated: dict[str, list[int]] = {}
    guids: dict[str, str] = {}
    for p in ports:
        associated.setdefault(p.rdma_device, []).append(p.ifindex)
        guids[p.rdma_device] = p.node_guid
    wanted = set(ifindexes)
    chosen = {r.name: r for r in by_pci}
    for r in every:
        if r.name in chosen or not wanted.intersection(associated.get(r.name, ())):
            continue
        if guids.get(r.name, "").lower() == r.node_guid.lower():
            chosen[r.name] = r
    return tuple(
        RdmaDevice(
            r.name,
            r.link_layer,
            r.node_guid,
            r.char_devices,
            tuple(sorted(set(associated.get(r.name, ())))),
        )
        for r in sorted(chosen.values(), key=lambda r: r.name)
    )


def _live_links(
    source: LinkSource, notes: list[str]
) -> tuple[list[LinkState] | Unknown, frozenset[int] | Unknown]:
    try:
        states = list(source.links())
    except LiveQueryError as exc:
        notes.append(f"links unknown: {exc}")
        return Unknown(str(exc)), Unknown(str(exc))
    try:
        routes = source.default_route_ifindexes()
    except LiveQueryError as exc:
        notes.append(f"default routes unknown: {exc}")
        return states, Unknown(str(exc))
    return states, routes


def _route_names(
    states: list[LinkState] | Unknown, routes: frozenset[int] | Unknown
) -> frozenset[str] | Unknown:
    if isinstance(states, Unknown):
        return states
    if isinstance(routes, Unknown):
        return routes
    return frozenset(s.name for s in states if s.index in routes)


def _devlink_ports(source: DevlinkSource, notes: list[str]) -> list[DevlinkPort] | Unknown:
    try:
        return list(source.ports())
    except LiveQueryError as exc:
        notes.append(f"devlink ports unknown: {exc}")
        return Unknown(str(exc))


def _eswitch_mode(source: DevlinkSource, address: str) -> str | Unknown:
    try:
        mode = source.eswitch_mode(address)
    except LiveQueryError as exc:
        return Unknown(str(exc))
    return mode or ""


def _split_representors(
    netdevs: Sequence[RawNetdev], ports: list[DevlinkPort] | Unknown
) -> tuple[dict[str, list[Representor]], dict[str, list[RawNetdev]]]:
    """Separate representors (by devlink port, else by phys_port_name) from own netdevs."""
    by_netdev: dict[str, DevlinkPort] = {}
    if isinstance(ports, list):
        by_netdev = {p.netdev_name: p for p in ports if p.netdev_name}
    reps: dict[str, list[Representor]] = {}
    own: dict[str, list[RawNetdev]] = {}
    for n in netdevs:
        rep: Representor | None = None
        port = by_netdev.get(n.ifname)
        if port is not None and port.flavour in ("pcipf", "pcivf") and port.pfnum is not None:
            switch = port.device.split("/", 1)[1] if "/" in port.device else n.pci_address
            rep = Representor(
                n.ifname,
                port.controller,
                port.pfnum,
                port.vfnum if port.flavour == "pcivf" else None,
                switch,
                "devlink",
                n.phys_switch_id,
            )
        elif port is None:
            m = _PORT_NAME_RE.match(n.phys_port_name)
            if m and m.group(4) is None and n.pci_address:
                rep = Representor(
                    n.ifname,
                    int(m.group(1) or 0),
                    int(m.group(2)),
                    int(m.group(3)) if m.group(3) is not None else None,
                    n.pci_address,
                    "phys_port_name",
                    n.phys_switch_id,
                )
        if rep is not None:
            reps.setdefault(rep.switch_pci, []).append(rep)
        elif n.pci_address:
            own.setdefault(n.pci_address, []).append(n)
    for values in reps.values():
        values.sort(key=lambda r: (r.controller, r.pfnum, -1 if r.vfnum is None else r.vfnum))
    return reps, own


def _hardware_key(
    fn: RawFunction,
    own: dict[str, list[RawNetdev]],
    states: dict[str, LinkState],
    done: dict[str, tuple[str, str]],
    vf_index: dict[str, tuple[str, int]],
) -> tuple[str, str]:
    if fn.physfn and fn.address in vf_index:
        parent, index = vf_index[fn.address]
        parent_key = done.get(parent, (f"pci:{parent}", "locator"))[0]
        return f"vf:{parent_key}/{index}", "parent"
    function_number = fn.address.rsplit(".", 1)[1]
    if fn.serial:
        return f"dsn:{fn.serial}/fn{function_number}", "serial"
    for n in own.get(fn.address, ()):
        state = states.get(n.ifname)
        if state is not None and state.perm_mac and state.perm_mac != "00:00:00:00:00:00":
            return f"mac:{state.perm_mac}", "permanent-mac"
    return f"pci:{fn.address}/{fn.vendor}:{fn.device}:{fn.subsystem}", "locator"


def _iommu_peers(
    fn: RawFunction, members: list[str] | Unknown, raw: dict[str, RawFunction]
) -> tuple[IommuPeer, ...] | Unknown:
    """The other members of ``fn``'s IOMMU group with their bindings, from the scan of
    *all* PCI functions (a peer can be a non-network device); Unknown when the group or a
    member could not be read."""
    if isinstance(members, Unknown):
        return members
    peers: list[IommuPeer] = []
    for address in members:
        if address == fn.address:
            continue
        other = raw.get(address)
        if other is None:
            return Unknown(f"iommu group {fn.iommu_group}: member {address} unreadable")
        peers.append(IommuPeer(address, other.driver, other.pci_class))
    return tuple(peers)


def _reset_domain(fn: RawFunction) -> str:
    """Functions that reset together. FLR (and every VF) resets alone; without FLR a
    reset reaches the whole slot (bus/secondary-bus reset)."""
    if fn.physfn or "flr" in fn.reset_methods:
        return f"fn:{fn.address}"
    return f"slot:{fn.address.rsplit('.', 1)[0]}"


def _binding(driver: str) -> Binding:
    if not driver:
        return Binding.UNBOUND
    if driver in _VFIO_DRIVERS:
        return Binding.VFIO
    if driver in _USERSPACE_DRIVERS:
        return Binding.OTHER
    return Binding.KERNEL


def _vfio_devices(fn: RawFunction) -> tuple[str, ...]:
    if fn.driver not in _VFIO_DRIVERS:
        return ()
    out = [f"/dev/vfio/{fn.iommu_group}"] if fn.iommu_group is not None else []
    out += [f"/dev/vfio/devices/{c}" for c in fn.vfio_cdevs]
    return tuple(out)
