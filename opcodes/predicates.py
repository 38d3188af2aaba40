"""Registered predicate contracts: the names a program may use in ``requires`` and
``postconditions`` (design §3.2: preconditions and postconditions name registered,
versioned predicates).

A ``requires`` predicate is checked by the runner/executor immediately before apply (the
identity, ownership and protected-scope re-check of design §3.5); a postcondition is
checked by ``observe`` after apply. Each opcode spec lists the subset it implements; the
checker rejects a program naming a predicate its opcode does not support. The text here is
the contract the executor must honour.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

REQUIRES: Mapping[str, str] = MappingProxyType(
    {
        "same-sandbox": "every sandbox-scoped input lives in the call's verified, pinned sandbox",
        "host-scope": "every input lives in the host namespace of this boot",
        "create-child-grant": "the parent handle grants CreateChild (a share or an owned link)",
        "owned-link": "the link is one this attachment created or was allocated, re-verified by "
        "identity and ownership alias",
        "exclusive-grant": "the handle grants ExclusiveConfigure from the verified allocation",
        "member-grant": "the member handle grants AttachMember and has no foreign master",
        "master-grant": "the master handle grants ExclusiveMaster and was created by this step",
        "mtu-within-parent": "the child's MTU does not exceed its parent's MTU",
        "vlan-tag-free": "no other VLAN link on the parent carries this tag",
        "member-mtu-match": "the member's MTU equals the master's (design §6.3 equal MTUs)",
        "name-free": "the requested interface name is unused in the target namespace",
        "protected-scope-clear": "the target is outside the protected dependency closure of "
        "the management/primary interfaces",
        "share-entitlement": "the allocation holds a consumable-capacity share of this parent",
        "parent-mode-compatible": "no other share on the parent uses an incompatible child kind "
        "or mode",
        "driver-allowlisted": "the target driver is in the exposure policy's allowlist",
        "iommu-group-owned": "every function of the IOMMU group is owned by this grant",
        "reset-domain-quiescent": "no other allocation, preparation, sandbox or external owner "
        "is active in the reset domain",
        "drained-scope": "the node is cordoned and drained for this management action",
        "rdma-exclusive-netns": "the RDMA subsystem runs in exclusive network-namespace mode",
        "rdma-netns-mode": "the RDMA subsystem runs in the network-namespace mode the call "
        "names (exclusive: the device is moved; shared: it stays, the sandbox must see it)",
        "representor-mapping-verified": "controller/PF/VF/port tuple and PCI association of the "
        "representor are verified from devlink/sysfs",
        "bridge-grant": "the bridge alias is an approved allowedHostBridges entry with VLAN "
        "filtering, fixed MAC, up and the expected incarnation",
        "vlan-grant": "every VLAN ID is permitted by the bridge or uplink grant",
        "uplink-grant": "the uplink alias names an approved member of the approved bridge",
        "ovs-bridge-grant": "the OVS bridge alias is approved by the exposure policy and its "
        "Bridge row is the one recorded at capture (same UUID)",
        "device-node-identity": "the character device's major/minor match the allocated device",
        "vf-mapping-verified": "the VF index and its PF are verified from sysfs/rtnetlink to be "
        "the allocated function, and the PF's kernel identity is recorded",
        "addresses-absent": "the link has none of the addresses to add (an address this "
        "effect did not add is never adopted)",
        "routes-absent": "no route with the destination, table and metric of a route to add "
        "exists in the sandbox",
        "rules-absent": "no rule of the family holds a priority of a rule to add",
        "pool-owner-verified": "the allocations' owner is the ResourceClaim the node agent "
        "verified and this node (never configuration), journaled with the pool and the "
        "effect before any allocation is created",
        "neighbours-absent": "the link has no permanent or no-ARP neighbour entry for an "
        "address to add (a learned one is the kernel's cache and is written over)",
        "carried-config-absent": "the link has none of the carried addresses and no route "
        "holds the destination, table and metric of a carried route (an entry this effect "
        "did not add is never adopted)",
        "consumer-verified": "the node agent verified, before any change, that the claim is "
        "reserved for exactly one live Pod on this node that references it, and rendered "
        "every template of it; the binding names exactly this allocated device",
        "shadow-name-free": "no object holds the shadow's name, or the one that does equals "
        "the recorded shadow in identity and content (a lost create response of ours)",
        "selection-mergeable": "the Pod of the recorded UID is live on this node and its "
        "selection takes the entry: no manual selection of the managed template, every "
        "owned entry provable from the registry, the annotations within the size limit",
        "shadow-owned": "the shadow of the recorded UID equals the recorded one in identity "
        "and content",
    }
)

POSTCONDITIONS: Mapping[str, str] = MappingProxyType(
    {
        "link-state-match": "MTU, admin state and address read back as requested",
        "link-in-sandbox": "the link is in the sandbox namespace with the requested name",
        "link-state-recorded": "the link's admin state and MTU on the host are recorded with "
        "its kernel identity",
        "vlan-parent-and-tag-match": "the VLAN link's lower device and tag read back as bound",
        "macvlan-mode-match": "the macvlan child has the bound lower device and mode",
        "ipvlan-mode-match": "the ipvlan child has the bound lower device and mode",
        "bond-mode-match": "the bond's mode, miimon and fail_over_mac read back as bound",
        "member-of-master": "the member's master is the bound bond",
        "share-held": "the journal holds this share's parent reference and the parent baseline",
        "driver-bound": "the function is bound to the requested driver",
        "function-rediscovered": "the function and its dependents are found again by stable "
        "inventory identity",
        "reset-completed": "the function answers config space with the expected identity",
        "vfio-node-identity": "the VFIO group/cdev node exists with the expected major/minor",
        "rdma-in-sandbox": "the RDMA device is associated with the sandbox namespace",
        "rdma-node-identity": "the RDMA character devices match the allocated device",
        "ib-port-state-match": "IPoIB mode and MTU read back as requested",
        "eswitch-mode-match": "the devlink eswitch mode reads back as requested",
        "representor-state-match": "the representor's MTU and admin state read back as requested",
        "bridge-membership-match": "the representor's master is the approved bridge",
        "bridge-vlan-match": "the port VLAN table equals the requested entries",
        "uplink-vlan-present": "the uplink carries the VLAN and the reference is journaled",
        "ovs-port-owned": "the OVS Port/Interface rows with the journaled UUIDs are on the "
        "recorded bridge with the requested VLANs and this operation's external IDs, and "
        "ovs-vswitchd gave the interface an OpenFlow port",
        "vf-settings-match": "the PF reports the VF's requested MAC, VLAN/QoS, spoof checking, "
        "trust, TX rates and link state",
        "sysctl-values-match": "every requested per-interface sysctl of the link reads back as "
        "requested",
        "features-match": "every requested offload feature of the link is active or inactive "
        "as requested",
        "addresses-present": "every added address is on the link (none failed duplicate "
        "address detection), with its kernel creation stamp recorded",
        "routes-present": "every added route is in the sandbox with each recorded key and "
        "attribute",
        "rules-present": "every added rule is in the sandbox with each recorded attribute",
        "pool-addresses-present": "the owner holds one allocation of the pool per pool "
        "family, each address is on the link with its kernel creation stamp recorded, and "
        "every pool route is in the sandbox as recorded",
        "neighbours-present": "every added neighbour entry is on the link, permanent, with "
        "the requested MAC address",
        "carried-config-present": "every carried address is on the link (none failed "
        "duplicate address detection), with its kernel creation stamp recorded, and every "
        "carried route is in the sandbox through the link as recorded",
        "shadow-present": "the shadow exists under the recorded UID with the verified Pod as "
        "owner, this node's finalizer, the recorded provenance and the exact frozen "
        "configuration, and is not being deleted",
        "selection-present": "the Pod of the recorded UID selects the shadow under the "
        "recorded interface and this node's registry records the entry",
    }
)
