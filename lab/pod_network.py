"""What the node agent reported a Pod's secondary network got, read back from the API.

The demos (both backends) and the tests assign no address themselves: the node agent adds
the pool's addresses (``ip/pool-addresses``) and publishes what its journal recorded in
each claim's ``status.devices[].networkData`` and in the Pod's
``k8s.v1.cni.cncf.io/network-status`` annotation. These helpers read the two, for a Pod
given by name; both lag behind the Pod becoming Running (the agent writes them after the
hook), so :func:`wait_reported` polls. Read-only; the same on the embedded lab and on
kube-apiserver (a claim made from a template names its Pod in ``ownerReferences``).
"""

from __future__ import annotations

import ipaddress
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dmn.agent.coordinator.pod_network_status import NETWORK_STATUS
from dmn.api.cluster import ApiFailure, Cluster, NotFound
from dmn.api.cluster import resources as r
from dmn.api.identity import DRIVER


@dataclass(frozen=True)
class ReportedNetwork:
    """One ``networkData`` entry of a claim: an interface in the Pod and what it got."""

    claim: str  # <namespace>/<name>
    interface: str
    ips: tuple[str, ...]  # CIDRs, prefix lengths as on the link
    mac: str

    @property
    def addresses(self) -> list[str]:
        """The addresses without prefix length (as ``network-status`` lists them)."""
        return [str(ipaddress.ip_interface(cidr).ip) for cidr in self.ips]


def owned_claims(cluster: Cluster, namespace: str, pod_uid: str) -> list[dict[str, Any]]:
    """The ResourceClaims made for the Pod from its templates (owned by it)."""
    return [
        c
        for c in cluster.list(r.RESOURCE_CLAIMS, namespace).items
        if any(o.get("uid") == pod_uid for o in c["metadata"].get("ownerReferences") or [])
    ]


def claim_networks(claim: Mapping[str, Any]) -> list[ReportedNetwork]:
    """Our driver's ``status.devices`` entries of ``claim`` that name an interface."""
    meta = claim["metadata"]
    out = []
    for entry in (claim.get("status") or {}).get("devices") or []:
        data = entry.get("networkData") or {}
        if entry.get("driver") != DRIVER or not data.get("interfaceName"):
            continue
        out.append(
            ReportedNetwork(
                f"{meta['namespace']}/{meta['name']}",
                str(data["interfaceName"]),
                tuple(str(x) for x in data.get("ips") or ()),
                str(data.get("hardwareAddress", "")),
            )
        )
    return out


def network_status(pod: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The Pod's ``network-status`` entries ([] when it has none)."""
    value = (pod["metadata"].get("annotations") or {}).get(NETWORK_STATUS)
    entries = json.loads(value) if value else []
    return [e for e in entries if isinstance(e, dict)]


def reported(cluster: Cluster, namespace: str, pod: str, interface: str) -> ReportedNetwork | None:
    """The Pod's claim entry for ``interface`` once it carries addresses, else None."""
    try:
        uid = cluster.get(r.PODS, pod, namespace)["metadata"]["uid"]
    except NotFound:
        return None
    for claim in owned_claims(cluster, namespace, uid):
        for net in claim_networks(claim):
            if net.interface == interface and net.ips:
                return net
    return None


def wait_reported(
    cluster: Cluster, namespace: str, pod: str, interface: str, timeout: float
) -> ReportedNetwork | None:
    """:func:`reported`, polled until it has addresses or ``timeout`` seconds passed."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = reported(cluster, namespace, pod, interface)
        except ApiFailure:
            found = None
        if found is not None or time.monotonic() >= deadline:
            return found
        time.sleep(0.3)
