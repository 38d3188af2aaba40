"""Multus automatic mode on the lab node (:mod:`tests.coordinator.lab_node`): the NAD CRD, a
DeviceExposurePolicy that offers every lab link's ``macvlan`` persona to ``multus-cni-shared``
(priority 200: it takes the persona over from the lab's ``macvlan-cni`` policy), a
``multus-macvlan`` topology whose class binds the template ``macvlan-net``, the template, and
a stand-in for Multus itself: :func:`multus_attached` writes the network-status Multus writes
after a successful ADD (the lab runs no Multus; the upstream lab does)."""

from __future__ import annotations

import itertools
import json
from typing import Any

from dmn.api.cluster import Cluster
from dmn.api.cluster import resources as r
from dmn.api.identity import API_VERSION
from dmn.api.multus.network_status import NETWORK_STATUS_ANNOTATION
from dmn.lab.allocator.service import ClaimService
from dmn.lab.demo import wait_settled
from dmn.lab.node import NODE_NAME
from tests.coordinator.lab_node import WAIT, LabNode, create_claim
from tests.fixtures.multus import nad, nad_crd
from tests.waiting import wait_for

NADS = r.NETWORK_ATTACHMENT_DEFINITIONS
MULTUS_OPS = ["multus/shadow-nad/v1", "multus/pod-selection/v1", "multus/binding-ready/v1"]
TEMPLATE = {
    "cniVersion": "1.0.0",
    "name": "macvlan-net",
    "type": "macvlan",
    "mode": "bridge",
    "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.78.0.0/24"}]]},
}
POLICY = {
    "apiVersion": API_VERSION,
    "kind": "DeviceExposurePolicy",
    "metadata": {"name": "lab-link-multus"},
    "spec": {
        "priority": 200,
        "action": "Expose",
        "selector": {"kind": "Link"},
        "exposure": {
            "persona": "macvlan",
            "plugin": "multus-cni-shared",
            "mode": "shared",
            "allowMultipleAllocations": True,
            "capacity": {"children": {"value": "4"}},
            "compatibility": [{"scope": "Interface", "domain": "interface", "groups": ["macvlan"]}],
            "effectPermissions": MULTUS_OPS,
        },
    },
}
TOPOLOGY = {
    "apiVersion": API_VERSION,
    "kind": "NetworkTopology",
    "metadata": {"name": "multus-macvlan"},
    "spec": {
        "effectBudget": {"allow": MULTUS_OPS},
        "steps": [
            {
                "id": "net",
                "kind": "Allocation",
                "pluginRef": {"name": "multus-cni-shared"},
                "config": {"mode": "shared", "template": {"name": "macvlan-net"}},
            }
        ],
    },
}
_n = itertools.count()


def enable_multus(node: LabNode) -> str:
    """Install the CRD, policy, topology and template; returns the topology's DeviceClass
    once the node publishes its links for ``multus-cni-shared``."""
    cluster = node.cluster
    cluster.create(r.CUSTOM_RESOURCE_DEFINITIONS, nad_crd())
    cluster.apply(POLICY)
    cluster.apply(TOPOLOGY)
    (topo,) = wait_settled(cluster, ["multus-macvlan"], WAIT)
    assert topo.ready == "True", topo
    wait_for(
        lambda: any(
            p.plugin == "multus-cni-shared" for p in node.services.devices.personas().personas
        ),
        timeout=WAIT,
        what="the lab links published for multus-cni-shared",
    )
    cluster.create(NADS, nad("default", "macvlan-net", json.dumps(TEMPLATE)), "default")
    return topo.device_classes[0]


def claimed_pod(
    node: LabNode,
    device_class: str,
    annotations: dict[str, str] | None = None,
    extra_classes: tuple[str, ...] = (),
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Claims (one of ``device_class``, then one per extra class) and a Pod on the lab node
    referencing them in that order, allocated and reserved for it."""
    i = next(_n)
    claims = [
        create_claim(node.cluster, f"mc-{i}-{k}", cls)
        for k, cls in enumerate((device_class, *extra_classes))
    ]
    meta: dict[str, Any] = {"name": f"mp-{i}", "namespace": "default"}
    if annotations:
        meta["annotations"] = annotations
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "nodeName": NODE_NAME,
            "containers": [{"name": "app", "image": "busybox"}],
            "resourceClaims": [
                {"name": f"net{k}", "resourceClaimName": c["metadata"]["name"]}
                for k, c in enumerate(claims)
            ],
        },
    }
    pod = node.cluster.create(r.PODS, body, "default")
    allocated = ClaimService(node.cluster, NODE_NAME).allocate(claims, pod=pod)
    return allocated, pod


def shadows(cluster: Cluster, namespace: str = "default") -> list[dict[str, Any]]:
    return [
        o
        for o in cluster.list(NADS, namespace).items
        if o["metadata"]["name"].startswith("dmn-multus-")
    ]


def annotations(cluster: Cluster, pod: dict[str, Any]) -> dict[str, str]:
    live = cluster.get(r.PODS, pod["metadata"]["name"], pod["metadata"]["namespace"])
    return dict(live["metadata"].get("annotations") or {})


def multus_attached(cluster: Cluster, pod: dict[str, Any], shadow: str, interface: str) -> None:
    """What Multus writes after its ADD: the Pod's network-status with the cluster network
    and the shadow's attachment (other writers' entries are Multus' to replace: it writes
    the whole list, as the real one does)."""
    status = [
        {"name": "lab-primary", "interface": "eth0", "ips": ["10.244.0.9"], "default": True},
        {
            "name": f"{pod['metadata']['namespace']}/{shadow}",
            "interface": interface,
            "ips": ["10.78.0.2"],
            "mac": "02:00:00:00:78:02",
            "dns": {},
        },
    ]
    cluster.patch(
        r.PODS,
        pod["metadata"]["name"],
        {"metadata": {"annotations": {NETWORK_STATUS_ANNOTATION: json.dumps(status)}}},
        pod["metadata"]["namespace"],
    )
