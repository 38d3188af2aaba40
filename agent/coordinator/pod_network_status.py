"""The Pod's ``k8s.v1.cni.cncf.io/network-status`` annotation (Network Plumbing WG format).

Tools written for Multus read a Pod's secondary networks from this annotation: a JSON list
of ``{name, interface, ips, mac, dns}`` entries, ``ips`` without prefix lengths. The node
adds one entry per attached device of each claim, named ``<namespace>/<claim>``, built from
the same journal-recorded ``networkData`` the claim's status carries. Entries of other
writers (Multus' own, the cluster network's ``default`` one) are kept; entries named like
one of this Pod's claims are replaced.

Reporting only, never authority: the owner of a Pod can rewrite its annotations, so nothing
here is ever read back to decide what the node owns. The write is a merge patch guarded by
the Pod's resourceVersion (a concurrent writer such as Multus is never overwritten: a
conflict re-reads and re-merges, as every status write does through
:func:`~dmn.agent.coordinator.attachment_status.report_retrying`); a Pod that is gone or was
replaced by another of the same name (a different UID) is left alone; a failed write is
logged and never fails a hook.
"""

from __future__ import annotations

import ipaddress
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dmn.agent.coordinator.attachment_status import report_retrying
from dmn.api.cluster import Cluster
from dmn.api.cluster import resources as r

log = logging.getLogger(__name__)

NETWORK_STATUS = "k8s.v1.cni.cncf.io/network-status"
DEVICE_INFO_VERSION = "1.1.0"
"""The Network Plumbing WG device-info specification version of ``device-info``."""


def status_entries(
    claim_namespace: str, claim_name: str, devices: Iterable[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The annotation's entries for one claim's ``status.devices`` entries: those with an
    interface, and those with a PCI function (a VFIO grant), whose ``device-info`` names the
    PCI address (and the RDMA device) as the NPWG device-info format does."""
    out: list[dict[str, Any]] = []
    for device in devices:
        data = device.get("networkData") or {}
        granted = device.get("data") or {}
        name = data.get("interfaceName")
        if not name and not granted.get("pciAddress"):
            continue
        entry: dict[str, Any] = {"name": f"{claim_namespace}/{claim_name}"}
        if name:
            entry["interface"] = name
        ips = [str(ipaddress.ip_interface(cidr).ip) for cidr in data.get("ips") or ()]
        if ips:
            entry["ips"] = ips
        if data.get("hardwareAddress"):
            entry["mac"] = data["hardwareAddress"]
        entry["dns"] = {}
        if granted.get("pciAddress"):
            pci = {"pci-address": granted["pciAddress"]}
            if granted.get("rdmaDevice"):
                pci["rdma-device"] = granted["rdmaDevice"]
            entry["device-info"] = {"type": "pci", "version": DEVICE_INFO_VERSION, "pci": pci}
        out.append(entry)
    return out


MESSAGE_MAX = 1024


def attached_message(
    claims: Sequence[tuple[str, str]], devices: Sequence[Sequence[Mapping[str, Any]]]
) -> str:
    """The ``Attached`` Event's message: per claim, each device's interface and addresses
    (or its pool/device when it has no interface), at most :data:`MESSAGE_MAX` characters."""
    parts = []
    for (namespace, name), entries in zip(claims, devices, strict=True):
        got = []
        for device in entries:
            data = device.get("networkData") or {}
            granted = device.get("data") or {}
            if data.get("interfaceName"):
                ips = ", ".join(data.get("ips") or ()) or "no address"
                got.append(f"{data['interfaceName']} ({ips})")
            elif granted.get("pciAddress"):
                group = granted.get("iommuGroup")
                got.append(
                    f"PCI {granted['pciAddress']}" + (f" (IOMMU group {group})" if group else "")
                )
            else:
                got.append(f"{device.get('pool')}/{device.get('device')}")
        parts.append(f"claim {namespace}/{name}: {'; '.join(got) or 'nothing'}")
    text = "attached " + " | ".join(parts)
    return text if len(text) <= MESSAGE_MAX else text[: MESSAGE_MAX - 1] + "…"


def merged(existing: str | None, names: set[str], ours: Sequence[Mapping[str, Any]]) -> str:
    """The annotation value: other writers' entries as they were, then ours. A value that
    is not a JSON list of objects is replaced (it describes nothing a reader could use)."""
    try:
        current = json.loads(existing) if existing else []
    except ValueError:
        current = []
    if not isinstance(current, list):
        current = []
    kept = [e for e in current if isinstance(e, dict) and e.get("name") not in names]
    return json.dumps([*kept, *ours], indent=4)


class PodNetworkStatus:
    """Writes this node's entries into a Pod's network-status annotation."""

    def __init__(self, cluster: Cluster, attempts: int = 3) -> None:
        self.cluster = cluster
        self.attempts = attempts

    def write(
        self,
        namespace: str,
        pod_name: str,
        pod_uid: str,
        names: Sequence[str],
        ours: Sequence[Mapping[str, Any]],
    ) -> None:
        """Replace the entries named ``names`` (``<namespace>/<claim>``) with ``ours``."""

        def write_once() -> None:
            pod = self.cluster.get(r.PODS, pod_name, namespace)
            meta = pod.get("metadata") or {}
            if meta.get("uid") != pod_uid:
                log.debug("event=network-status-pod-replaced pod=%s/%s", namespace, pod_name)
                return
            annotations = meta.get("annotations") or {}
            value = merged(annotations.get(NETWORK_STATUS), set(names), ours)
            if value == annotations.get(NETWORK_STATUS):
                return
            patch = {
                "metadata": {
                    "resourceVersion": meta.get("resourceVersion"),
                    "annotations": {NETWORK_STATUS: value},
                }
            }
            self.cluster.patch(r.PODS, pod_name, patch, namespace)

        report_retrying(
            self.attempts, write_once, log, "network-status", f"pod={namespace}/{pod_name}"
        )
