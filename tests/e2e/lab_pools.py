"""IPPools for the node e2e tests: a test's own pool and macvlan topology, what it holds.

Each test brings its own IPPool (its own subnet, so the session's example pools and other
modules' Pods are never in the way) and a macvlan-cni topology addressing ``net1`` from it;
what a Pod got is read from the API server (IPAllocations, the claim's networkData, the Pod's
network-status annotation) and from inside the Pod. No address is assigned by a test.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

from dmn.api.cluster import Cluster, NotFound
from dmn.api.cluster import resources as r
from dmn.api.identity import API_VERSION, DRIVER
from dmn.api.ipam.ipallocation import LABEL_POOL
from dmn.lab.demo import wait_settled
from dmn.lab.pod_demo import claim_template
from dmn.lab.upstream.demo import Kubectl
from tests.e2e.lab_pods import WAIT

NETWORK_STATUS = "k8s.v1.cni.cncf.io/network-status"


def pool(name: str, cidr: str, first: str, last: str, **extra: Any) -> dict[str, Any]:
    """An IPPool of one subnet whose dynamic range is ``first``-``last``."""
    subnet: dict[str, Any] = {"cidr": cidr, "ranges": [{"start": first, "end": last}], **extra}
    return {
        "apiVersion": API_VERSION,
        "kind": "IPPool",
        "metadata": {"name": name},
        "spec": {"subnets": [subnet]},
    }


def topology(name: str, pool_name: str) -> dict[str, Any]:
    """The example shared-macvlan topology with ``net1`` addressed from ``pool_name``."""
    return {
        "apiVersion": API_VERSION,
        "kind": "NetworkTopology",
        "metadata": {"name": name},
        "spec": {
            "effectBudget": {
                "allow": ["share/hold-parent/v1", "linux/create-macvlan/v2", "ip/pool-addresses/v1"]
            },
            "steps": [
                {
                    "id": "net1",
                    "kind": "Allocation",
                    "pluginRef": {"name": "macvlan-cni"},
                    "config": {
                        "mode": "bridge",
                        "ifName": "net1",
                        "mtu": 1500,
                        "up": True,
                        "pool": pool_name,
                    },
                }
            ],
        },
    }


def template(name: str, device_class: str, **workload: Any) -> dict[str, Any]:
    """A claim template of ``device_class``; ``workload``: its WorkloadParameters."""
    doc = claim_template(name, device_class)
    if workload:
        parameters = {"apiVersion": API_VERSION, "kind": "WorkloadParameters", "config": workload}
        doc["spec"]["spec"]["devices"]["config"] = [
            {"requests": ["net"], "opaque": {"driver": DRIVER, "parameters": parameters}}
        ]
    return doc


@contextlib.contextmanager
def pooled(admin: Cluster, name: str, pool_doc: dict[str, Any]) -> Iterator[str]:
    """The pool and a topology of ``name`` on it, Ready; removed afterwards (the pool last,
    once the Pods' addresses are released). Yields the topology's DeviceClass."""
    admin.apply(pool_doc)
    admin.apply(topology(name, pool_doc["metadata"]["name"]))
    (settled,) = wait_settled(admin, [name], WAIT)
    assert settled.ready == "True" and settled.device_classes, settled
    try:
        yield settled.device_classes[0]
    finally:
        with contextlib.suppress(NotFound):
            admin.delete(r.NETWORK_TOPOLOGIES, name)
        with contextlib.suppress(NotFound):
            admin.delete(r.IP_POOLS, pool_doc["metadata"]["name"])


def held(admin: Cluster, pool_name: str) -> list[str]:
    """The addresses the pool's IPAllocation objects hold, sorted."""
    items = admin.list(r.IP_ALLOCATIONS, label_selector=f"{LABEL_POOL}={pool_name}").items
    return sorted(str(o["spec"]["address"]) for o in items)


def pool_status(admin: Cluster, pool_name: str) -> dict[str, Any]:
    """The controller's counts of the pool (``size``, ``allocated``, ``free``, ...)."""
    return dict(admin.get(r.IP_POOLS, pool_name).get("status") or {})


def address(kubectl: Kubectl, name: str) -> str:
    """The one IPv4 address (CIDR) on the Pod's ``net1``, from inside the Pod."""
    shown = kubectl.exec(name, "ip", "-o", "-4", "addr", "show", "net1")
    assert shown.returncode == 0, shown.stderr
    words = shown.stdout.split()
    assert words.count("inet") == 1, shown.stdout
    return words[words.index("inet") + 1]


def network_data(admin: Cluster, namespace: str, pod_name: str) -> dict[str, Any] | None:
    """The networkData of the Pod's (generated) claim that reports addresses, else None."""
    for claim in admin.list(r.RESOURCE_CLAIMS, namespace).items:
        owners = (claim.get("metadata") or {}).get("ownerReferences") or []
        if not any(o.get("name") == pod_name for o in owners):
            continue
        for entry in (claim.get("status") or {}).get("devices") or []:
            data = entry.get("networkData") or {}
            if data.get("ips"):
                return dict(data)
    return None


def network_status(pod_doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The Pod's ``k8s.v1.cni.cncf.io/network-status`` entries (empty when not written)."""
    text = ((pod_doc.get("metadata") or {}).get("annotations") or {}).get(NETWORK_STATUS)
    return list(json.loads(text)) if text else []
