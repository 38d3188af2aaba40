"""The lab node: one small, documented single-node inventory and its exposure policies.

The lab's node is called ``lab-node``. Its "NICs" are two ends of a veth pair named
``lab0`` and ``lab1``. By default they are *recorded* link facts (MTU 1500, up, locally
administered MACs): the lab creates no kernel link and reads none of the host's, so
``dmn lab up`` is safe to run anywhere. With ``--links netns`` they are a real veth pair
in a namespace the lab creates and owns (:mod:`dmn.lab.node_netns`, needs root); with
``LabCluster(follow_links=True)`` the lab's slice publisher follows that namespace's
rtnetlink events and republishes when a link changes. The inventory is produced by the real scanner
(:func:`dmn.agent.inventory.scan` with ``lab_links``) over an empty sysfs tree, so
identities, protection and link types follow the same rules as on a real node.

Three DeviceExposurePolicies (created as objects in the lab API server, so ``dmn lab
apply`` can change them) expose every lab link as:

* ``kernel`` for ``host-cni`` mode ``kernel`` (whole-link handoff);
* ``macvlan`` for ``macvlan-cni`` mode ``bridge``, 4 children (shared parent);
* ``ipvlan`` for ``ipvlan-cni`` mode ``l2``, 4 children (shared parent);

with one ``Interface`` compatibility domain per link, so a link handed off whole cannot
also parent children, and macvlan and ipvlan children never share a parent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dmn.agent.inventory import Inventory, RecordedDevlink, RecordedLinks, ScanConfig, scan
from dmn.api.identity import API_VERSION
from dmn.host.inventory_sources import LinkSource
from dmn.host.rtnetlink.links import LinkState

NODE_NAME = "lab-node"
NODE_UID = "lab-node"
LAB_LINKS = ("lab0", "lab1")
CHILDREN = 4


@dataclass(frozen=True)
class LabLink:
    name: str
    ifindex: int
    mac: str
    mtu: int = 1500


LINKS: tuple[LabLink, ...] = (
    LabLink("lab0", 2, "02:00:00:00:1a:00"),
    LabLink("lab1", 3, "02:00:00:00:1a:01"),
)


def link_states(links: Sequence[LabLink] = LINKS) -> list[LinkState]:
    """The recorded link facts: loopback plus the lab's veth ends (no default route)."""
    states = [LinkState(1, "lo", mtu=65536, mac="00:00:00:00:00:00", up=True, operstate="UNKNOWN")]
    for link in links:
        states.append(
            LinkState(
                link.ifindex,
                link.name,
                mtu=link.mtu,
                mac=link.mac,
                up=True,
                operstate="UP",
                kind="veth",
            )
        )
    return states


def inventory(sysfs_root: Path, links: LinkSource | None = None) -> Inventory:
    """Scan the lab node. ``sysfs_root`` is an empty directory the caller owns (no PCI);
    ``links`` reads live link facts (the lab's own namespace), else the recorded ones."""
    sysfs_root.mkdir(parents=True, exist_ok=True)
    return scan(
        ScanConfig(
            sysfs_root=sysfs_root,
            node_uid=NODE_UID,
            links=links if links is not None else RecordedLinks(states=link_states()),
            devlink=RecordedDevlink(),
            lab_links=[link.name for link in LINKS],
        )
    )


def _policy(
    name: str, persona: str, plugin: str, mode: str, group: str, shared: bool
) -> dict[str, Any]:
    exposure: dict[str, Any] = {
        "persona": persona,
        "plugin": plugin,
        "mode": mode,
        "compatibility": [{"scope": "Interface", "domain": "interface", "groups": [group]}],
    }
    if shared:
        exposure["allowMultipleAllocations"] = True
        exposure["capacity"] = {"children": {"value": str(CHILDREN)}}
    return {
        "apiVersion": API_VERSION,
        "kind": "DeviceExposurePolicy",
        "metadata": {"name": name},
        "spec": {
            "priority": 100,
            "action": "Expose",
            "selector": {"kind": "Link"},
            "exposure": exposure,
        },
    }


def policies() -> list[dict[str, Any]]:
    """The lab node's DeviceExposurePolicies as API objects."""
    return [
        _policy("lab-link-kernel", "kernel", "host-cni", "kernel", "kernel-handoff", False),
        _policy("lab-link-macvlan", "macvlan", "macvlan-cni", "bridge", "macvlan", True),
        _policy("lab-link-ipvlan", "ipvlan", "ipvlan-cni", "l2", "ipvlan", True),
    ]


def node_object() -> dict[str, Any]:
    """The lab's Node object (labels the policies' node selectors may use)."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": NODE_NAME,
            "labels": {"kubernetes.io/hostname": NODE_NAME, "dra-multi-network/lab": "true"},
        },
    }


#: A whole lab link handed to a Pod (the example host-device topology selects one NIC
#: model by vendor; lab links have no vendor)
HOST_DEVICE_TOPOLOGY = {
    "apiVersion": "networking.dra-multi-network.schseba.github.io/v1alpha1",
    "kind": "NetworkTopology",
    "metadata": {"name": "lab-host-device"},
    "spec": {
        "effectBudget": {"allow": ["linux/link-move/v1", "linux/link-configure/v1"]},
        "steps": [
            {
                "id": "nic",
                "kind": "Allocation",
                "pluginRef": {"name": "host-cni"},
                "config": {"mode": "kernel", "ifName": "net1", "mtu": 1500, "up": True},
            }
        ],
    },
}
