"""The ``networkData`` of a claim's device status, from what the journal recorded.

Kubernetes lets a driver say what a device became in the Pod (KEP-4817): the interface name,
its addresses in CIDR form and its hardware address. The node reports what the connect
operation's own effects recorded as their verified outcome — the interface the step exported
and every address an addressing effect added to that same interface — never what the link
shows now: a tenant with CAP_NET_ADMIN can add addresses, rename or re-MAC the link, and
that must not become the cluster's record of what the network gave it.

The result obeys the API server's rules for the field (``interfaceName`` at most 256
bytes, ``hardwareAddress`` at most 128, ``ips`` at most 16 unique canonical CIDRs), so a
report can never make the whole status write invalid.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from dmn.engine.journal import EffectRecord
from dmn.vocabulary.handles import IP_ADDRESSES, Handle

log = logging.getLogger(__name__)

INTERFACE_NAME_MAX = 256
HARDWARE_ADDRESS_MAX = 128
IPS_MAX = 16


def _canonical(text: str) -> str | None:
    try:
        return str(ipaddress.ip_interface(text))
    except ValueError:
        return None


def _outcomes(exported: Handle, records: Iterable[EffectRecord]) -> Iterator[Handle]:
    """The recorded outcomes of the exported interface, in effect order: every output handle
    of the same inventory identity in the same namespace."""
    for record in records:
        for handles in record.outputs.values():
            for h in handles:
                if h.inventory_id == exported.inventory_id and h.scope == exported.scope:
                    yield h


def recorded_addresses(exported: Handle, records: Iterable[EffectRecord]) -> list[str]:
    """Every address the operation's effects recorded adding to the exported interface, in
    effect order, canonical and without repeats."""
    out: list[str] = []
    for h in _outcomes(exported, records):
        text = h.observations.get(IP_ADDRESSES)
        if not isinstance(text, str):
            continue
        for item in text.split():
            cidr = _canonical(item)
            if cidr is not None and cidr not in out:
                out.append(cidr)
    return out


def network_data(exported: Handle, records: Sequence[EffectRecord]) -> dict[str, Any] | None:
    """``networkData`` for a device whose step exported ``exported``; None when the step
    exported no network interface (a VFIO function, an RDMA device)."""
    latest = next(reversed(list(_outcomes(exported, records))), exported)  # later refresh it
    name = latest.observations.get("ifName")
    if not isinstance(name, str) or not name or len(name.encode()) > INTERFACE_NAME_MAX:
        return None
    data: dict[str, Any] = {"interfaceName": name}
    mac = latest.observations.get("mac")
    if isinstance(mac, str) and mac and len(mac.encode()) <= HARDWARE_ADDRESS_MAX:
        data["hardwareAddress"] = mac
    ips = recorded_addresses(exported, records)
    if len(ips) > IPS_MAX:
        log.warning(
            "event=network-data-truncated interface=%s addresses=%d reported=%d",
            name,
            len(ips),
            IPS_MAX,
        )
        ips = ips[:IPS_MAX]
    if ips:
        data["ips"] = ips
    return data


DATA_KEYS = ("pciAddress", "iommuGroup", "rdmaDevice", "cdiDevice")


def device_data(exported: Sequence[Handle]) -> dict[str, Any] | None:
    """The driver-specific ``data`` of a device's status: what a VFIO or RDMA grant gave the
    workload — the PCI address, the IOMMU group, the RDMA device and the CDI device names
    the container was given — from the step's verified exports; None when there is none.
    A workload reads it from its claim, or from the Pod's network-status annotation."""
    data: dict[str, Any] = {}
    cdi: list[str] = []
    for handle in exported:
        for key in DATA_KEYS:
            value = handle.observations.get(key)
            if not isinstance(value, str) or not value or len(value) > 256:
                continue
            if key == "cdiDevice":
                if value not in cdi:
                    cdi.append(value)
            else:
                data.setdefault(key, value)
    if cdi:
        data["cdiDevices"] = cdi[:16]
    return data or None
