"""Representative calls for every builtin hook program, bound with the real binder.

Every builtin plugin's ``prepare`` and ``connect`` program is bound for each mode that
switches effects on or off (kernel / vfio, ethernet / infiniband, RDMA, reset, representor,
trunks), so the crash matrix covers every effect line of every builtin program.
"""

from __future__ import annotations

from typing import Any

from dmn.engine.binder import Call, bind_program
from dmn.engine.bound import BoundProgram
from dmn.interpreter.loader import load_builtin_plugins
from dmn.vocabulary.handles import Handle, NamespaceIdentity, Provenance, Scope
from dmn.vocabulary.terms import Access, HandleType, LinkType, ScopeKind

SANDBOX = Scope(ScopeKind.SANDBOX, NamespaceIdentity(4, 4026532999, "boot-1"))
RW = frozenset({Access.READ, Access.EXCLUSIVE_CONFIGURE})


def _h(
    name: str,
    type_: HandleType,
    accesses: frozenset[Access],
    link: LinkType | None = None,
    scope: Scope | None = None,
) -> Handle:
    return Handle(
        id=f"h:{name}",
        type=type_,
        inventory_id=f"inv:{name}",
        scope=scope or Scope(ScopeKind.HOST),
        accesses=accesses,
        link_type=link,
        provenance=Provenance(claim_uid="claim-1", request="net", pool="node-1", device=name),
        observations={"ifName": name} if type_ is HandleType.KERNEL_INTERFACE else {},
    )


def iface(name: str, link: LinkType = LinkType.ETHERNET, *extra: Access) -> Handle:
    return _h(name, HandleType.KERNEL_INTERFACE, RW | frozenset(extra), link)


def sandbox_iface(name: str, *extra: Access) -> Handle:
    return _h(name, HandleType.KERNEL_INTERFACE, RW | frozenset(extra), LinkType.ETHERNET, SANDBOX)


RDMA = _h("mlx5_3", HandleType.RDMA_DEVICE, RW)
FUNCTION = _h("0000:3b:02.1", HandleType.PCI_FUNCTION, RW)
FUNCTION_BOUND = _h("0000:3b:02.1", HandleType.PCI_FUNCTION, RW | {Access.DEVICE_ACCESS})
REPRESENTOR = _h("pf0vf1", HandleType.HOST_REPRESENTOR, RW)
PARENT = iface("ens1f0", LinkType.ETHERNET, Access.CREATE_CHILD)
SHARED = _h("ens1f0", HandleType.SHARED_PARENT, frozenset({Access.CREATE_CHILD}), LinkType.ETHERNET)
# a shared parent as the allocation hands it to a prepare program (CreateChild only)
SHARED_LINK = _h(
    "ens1f0", HandleType.KERNEL_INTERFACE, frozenset({Access.CREATE_CHILD}), LinkType.ETHERNET
)

ETH = {"ifName": "net1", "mtu": 1500, "up": True}

BOND = {
    "ifName": "bond0",
    "mtu": 1500,
    "up": True,
    "mode": "active-backup",
    "monitorIntervalMs": 100,
    "failOverMac": "active",
}
BOND_MEMBERS = {
    "inputs": {
        "members": (
            sandbox_iface("net1", Access.ATTACH_MEMBER),
            sandbox_iface("net2", Access.ATTACH_MEMBER),
        )
    }
}
VLAN = {"ifName": "net1.10", "mtu": 1500, "up": True, "vlanId": 10}
VLAN_PARENT = {"inputs": {"parent": (sandbox_iface("net1", Access.CREATE_CHILD),)}}

# The optional network settings every link-making connect program takes (sysctls, then
# addresses, then routes on the interface it made or moved).
ADDRESSED = {
    "sysctls": {"ipv4RpFilter": 2, "ipv6AcceptRa": 0},
    "addresses": ["10.0.0.2/24", "fd00::2/64"],
    "routes": [{"destination": "10.1.0.0/16", "gateway": "10.0.0.1", "metric": 100}],
}

# (label, plugin, hook, config, call keyword arguments)
SCENARIOS: list[tuple[str, str, str, dict[str, Any], dict[str, Any]]] = [
    (
        "host-kernel-prepare",
        "host-cni",
        "prepare",
        {"mode": "kernel", **ETH},
        {"allocation": {"interface": (iface("ens2"),)}},
    ),
    (
        "host-kernel-rdma-prepare",
        "host-cni",
        "prepare",
        {"mode": "kernel", "rdmaAccess": True, **ETH},
        {"allocation": {"interface": (iface("ens2"),), "rdma": (RDMA,)}},
    ),
    (
        "host-vfio-reset-prepare",
        "host-cni",
        "prepare",
        {"mode": "vfio", "resetOnPrepare": True},
        {"allocation": {"function": (FUNCTION,)}},
    ),
    (
        "host-kernel-rdma-connect",
        "host-cni",
        "connect",
        {"mode": "kernel", "rdmaAccess": True, **ETH},
        {"prepared": {"interface": (iface("ens2"),), "rdma": (RDMA,)}},
    ),
    (
        "host-ib-connect",
        "host-cni",
        "connect",
        {"mode": "kernel", "linkType": "infiniband", "ipoibMode": "connected", **ETH},
        {"prepared": {"ibInterface": (iface("ib0", LinkType.INFINIBAND),)}},
    ),
    (
        "host-ib-prepare",
        "host-cni",
        "prepare",
        {"mode": "kernel", "linkType": "infiniband", **ETH},
        {"allocation": {"ibInterface": (iface("ib0", LinkType.INFINIBAND),)}},
    ),
    (
        "sriov-ib-connect",
        "sriov-cni",
        "connect",
        {"mode": "kernel", "linkType": "infiniband", "ipoibMode": "datagram", **ETH},
        {"prepared": {"ibInterface": (iface("ib0v1", LinkType.INFINIBAND),)}},
    ),
    (
        "host-vfio-connect",
        "host-cni",
        "connect",
        {"mode": "vfio"},
        {"prepared": {"function": (FUNCTION_BOUND,)}},
    ),
    (
        "sriov-kernel-prepare",
        "sriov-cni",
        "prepare",
        {"mode": "kernel", **ETH},
        {"allocation": {"interface": (iface("ens1f0v1"),)}},
    ),
    (
        "sriov-vf-settings-prepare",
        "sriov-cni",
        "prepare",
        {
            "mode": "kernel",
            **ETH,
            "vfSettings": True,
            "vfMac": "02:11:22:33:44:55",
            "vfVlan": 100,
            "vfQos": 3,
            "vfSpoofCheck": True,
            "vfTrust": True,
            "vfMinTxRate": 10,
            "vfMaxTxRate": 100,
            "vfLinkState": "enable",
        },
        {"allocation": {"interface": (iface("ens1f0v1"),), "function": (FUNCTION,)}},
    ),
    (
        "sriov-vfio-reset-representor-prepare",
        "sriov-cni",
        "prepare",
        {"mode": "vfio", "resetOnPrepare": True, "representor": True},
        {"allocation": {"function": (FUNCTION,), "representor": (REPRESENTOR,)}},
    ),
    (
        "sriov-kernel-rdma-connect",
        "sriov-cni",
        "connect",
        {"mode": "kernel", "rdmaAccess": True, **ETH},
        {"prepared": {"interface": (iface("ens1f0v1"),), "rdma": (RDMA,)}},
    ),
    (
        "sriov-vfio-representor-connect",
        "sriov-cni",
        "connect",
        {"mode": "vfio", "representor": True},
        {"prepared": {"function": (FUNCTION_BOUND,), "representor": (REPRESENTOR,)}},
    ),
    ("macvlan-prepare", "macvlan-cni", "prepare", ETH, {"allocation": {"parent": (PARENT,)}}),
    (
        "multus-whole-prepare",
        "multus-cni",
        "prepare",
        {"mode": "kernel", "template": {"name": "hd-net"}},
        {"allocation": {"device": (iface("ens2"),)}},
    ),
    (
        "multus-shared-prepare",
        "multus-cni-shared",
        "prepare",
        {"mode": "shared", "template": {"name": "macvlan-net", "namespace": "infra"}},
        {"allocation": {"device": (SHARED_LINK,)}},
    ),
    ("macvlan-connect", "macvlan-cni", "connect", ETH, {"prepared": {"parent": (SHARED,)}}),
    ("ipvlan-prepare", "ipvlan-cni", "prepare", ETH, {"allocation": {"parent": (PARENT,)}}),
    ("ipvlan-connect", "ipvlan-cni", "connect", ETH, {"prepared": {"parent": (SHARED,)}}),
    (
        "macvlan-addressed-connect",
        "macvlan-cni",
        "connect",
        {**ETH, **ADDRESSED, "pool": "tenant-a"},
        {"prepared": {"parent": (SHARED,)}},
    ),
    (
        "ipvlan-addressed-connect",
        "ipvlan-cni",
        "connect",
        {**ETH, **ADDRESSED},
        {"prepared": {"parent": (SHARED,)}},
    ),
    (
        "host-kernel-addressed-connect",
        "host-cni",
        "connect",
        {"mode": "kernel", **ETH, **ADDRESSED},
        {"prepared": {"interface": (iface("ens2"),)}},
    ),
    (
        "host-kernel-carried-connect",
        "host-cni",
        "connect",
        {"mode": "kernel", **ETH, "carryHostAddresses": True},
        {"prepared": {"interface": (iface("ens2"),)}},
    ),
    (
        "sriov-kernel-addressed-connect",
        "sriov-cni",
        "connect",
        {"mode": "kernel", **ETH, **ADDRESSED},
        {"prepared": {"interface": (iface("ens1f0v1"),)}},
    ),
    (
        "bond-addressed-connect",
        "bond-cni",
        "connect",
        {**BOND, **ADDRESSED},
        BOND_MEMBERS,
    ),
    (
        "vlan-addressed-connect",
        "vlan-cni",
        "connect",
        {**VLAN, **ADDRESSED},
        VLAN_PARENT,
    ),
    (
        "bond-connect",
        "bond-cni",
        "connect",
        BOND,
        BOND_MEMBERS,
    ),
    (
        "vlan-connect",
        "vlan-cni",
        "connect",
        VLAN,
        VLAN_PARENT,
    ),
    (
        "accelerated-bridge-connect",
        "accelerated-bridge-cni",
        "connect",
        {"bridge": "br0", "vlan": 100, "trunk": [200, 300], "mtu": 1500},
        {"inputs": {"representor": (REPRESENTOR,)}},
    ),
    (
        "accelerated-bridge-uplink-connect",
        "accelerated-bridge-cni-uplink",
        "connect",
        {"bridge": "br0", "uplink": "bond0", "vlan": 100, "mtu": 1500},
        {"inputs": {"representor": (REPRESENTOR,)}},
    ),
    (
        "ovs-connect",
        "ovs-cni",
        "connect",
        {"bridge": "br-int", "vlan": 100, "mtu": 1500},
        {"inputs": {"representor": (REPRESENTOR,)}},
    ),
]


def bind_scenario(label: str, operation_id: str = "op-1") -> BoundProgram | str:
    """The scenario's bound program, or the rendered diagnostics that prevented binding."""
    _, plugin, hook, config, kwargs = next(s for s in SCENARIOS if s[0] == label)
    call = Call(
        config=config,
        operation_id=operation_id,
        sandbox=SANDBOX if hook == "connect" else None,
        **kwargs,
    )
    result = bind_program(_plugins()[plugin], hook, call)
    if isinstance(result, BoundProgram):
        return result
    return "; ".join(d.render() for d in result)


_PLUGINS: dict[str, Any] = {}


def _plugins() -> dict[str, Any]:
    if not _PLUGINS:
        _PLUGINS.update(load_builtin_plugins())
    return _PLUGINS


def covered_effects() -> dict[str, set[str]]:
    """plugin/hook → the source effect ids the scenarios bind (for the coverage check)."""
    covered: dict[str, set[str]] = {}
    for label, plugin, hook, _, _ in SCENARIOS:
        program = bind_scenario(label)
        ids = {e.source_id for e in program.effects} if isinstance(program, BoundProgram) else set()
        covered.setdefault(f"{plugin}/{hook}", set()).update(ids)
    return covered


FOREIGN_WORLD: dict[str, Any] = {
    "objects": {"ens1f0": {"alias": "host"}, "other-link": {"alias": "dmn:someone:else"}},
    "attrs": {
        "inv:ens2.linux/link-move/v1": {"ifName": "ens2", "original": True},
        "inv:pf0vf1.representor/configure/v1": {"up": True},
        "inv:0000:3b:02.1.pci/driver-bind/v1": {"driver": "mlx5_core"},
        "inv:unrelated.linux/link-configure/v1": {"mtu": 9000},
    },
    "resets": {},
}
