"""Publication checks: what the API server stored, and what the node still allows.

:func:`stripped_prerequisites` compares written slices with the stored ones. An API
server with ``DRADeviceCompatibilityGroups``, ``DRAConsumableCapacity`` or
``DRAPartitionableDevices`` disabled drops those fields silently; a pool published
without them would let the scheduler co-allocate incompatible personas. Any such loss
makes the publication degraded: the agent republishes with ``degraded=True`` (every
persona relying on counters, capacity or groups not allocatable) and reports
``E_PREREQUISITE_STRIPPED`` (design §11.1 case 10).

:func:`node_allocation_check` is the node-side guard against publication lag (case 12):
API publication and claim release are not atomic, so an allocation the scheduler made
from a stale view must fail on the node, before any mutation, when the device is
cleanup-pending, not allocationReady in the node's current set, or unknown.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from dmn.agent.personas.model import Finding, FindingCode, PersonaSet
from dmn.agent.slices.build import personas_of

_PREREQUISITES = ("allowMultipleAllocations", "capacity", "consumesCounters")


def stripped_prerequisites(
    written: list[dict[str, Any]], stored: list[dict[str, Any]]
) -> list[Finding]:
    out: list[Finding] = []
    stored_devices = personas_of(stored)
    stored_sets = {cs["name"] for s in stored for cs in (s["spec"].get("sharedCounters") or ())}
    for name, device in personas_of(written).items():
        got = stored_devices.get(name)
        if got is None:
            out.append(Finding(FindingCode.E_PREREQUISITE_STRIPPED, "device missing", device=name))
            continue
        for key in _PREREQUISITES:
            if key in device and key not in got:
                out.append(
                    Finding(FindingCode.E_PREREQUISITE_STRIPPED, f"{key} was dropped", device=name)
                )
        for mine, theirs in zip(
            device.get("consumesCounters") or (), got.get("consumesCounters") or (), strict=False
        ):
            if mine.get("compatibilityGroups") and not theirs.get("compatibilityGroups"):
                out.append(
                    Finding(
                        FindingCode.E_PREREQUISITE_STRIPPED,
                        "compatibilityGroups was dropped",
                        device=name,
                    )
                )
        for cap_name, cap in (device.get("capacity") or {}).items():
            stored_cap = (got.get("capacity") or {}).get(cap_name, {})
            if "requestPolicy" in cap and "requestPolicy" not in stored_cap:
                out.append(
                    Finding(
                        FindingCode.E_PREREQUISITE_STRIPPED,
                        f"capacity {cap_name} requestPolicy was dropped",
                        device=name,
                    )
                )
    for s in written:
        for cs in s["spec"].get("sharedCounters") or ():
            if cs["name"] not in stored_sets:
                out.append(
                    Finding(
                        FindingCode.E_PREREQUISITE_STRIPPED,
                        f"counter set {cs['name']} was dropped",
                    )
                )
    return out


def node_allocation_check(
    personas: PersonaSet, devices: Iterable[str], cleanup_pending: Iterable[str]
) -> list[Finding]:
    """Findings that make an allocation unpreparable on this node (empty: proceed)."""
    current = personas.by_name()
    pending = set(cleanup_pending)
    out: list[Finding] = []
    for name in devices:
        persona = current.get(name)
        if persona is None:
            out.append(
                Finding(FindingCode.E_UNKNOWN_DEVICE, "not published by this node", device=name)
            )
        elif name in pending:
            out.append(
                Finding(
                    FindingCode.E_CLEANUP_PENDING,
                    "previous use still being cleaned up",
                    device=name,
                )
            )
        elif not persona.allocation_ready:
            out.append(
                Finding(FindingCode.E_NOT_READY, "device is not allocationReady", device=name)
            )
    return out
