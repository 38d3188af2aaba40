"""A node + scheduler harness: the node agent's publish loop against the lab allocator.

``publish()`` does what the agent does on every change: rebuild personas from the
inventory, the policies and the journal's pins (devices allocated or cleanup-pending),
build the pool's slices at the next generation, and hand them to the "API server" (here
straight to the allocator's live view, or through a ``strip`` function that emulates an
API server dropping fields of a disabled feature gate).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dmn.agent.inventory import Inventory, ScanConfig, scan
from dmn.agent.personas import PersonaSet
from dmn.agent.slices.pins import allocated_devices
from dmn.agent.slices.publication import NodePublication
from dmn.api.policy import DeviceExposurePolicy
from dmn.lab.allocator import Allocator
from tests.fixtures.policies import DRIVER, STANDARD_CLASSES
from tests.fixtures.sysfs_layouts import build_reference_node

NODE = "worker-a"


@dataclass
class Harness:
    inventory: Inventory
    policies: list[DeviceExposurePolicy]
    allocator: Allocator
    publication: NodePublication
    cleanup_pending: set[str] = field(default_factory=set)
    extra_slices: list[dict[str, Any]] = field(default_factory=list)
    strip: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None
    personas: PersonaSet | None = None
    slices: list[dict[str, Any]] = field(default_factory=list)

    @property
    def degraded(self) -> bool:
        return self.publication.degraded

    def claims(self) -> list[dict[str, Any]]:
        """The claims as the API server holds them: allocations in ``status``."""
        return [
            {"metadata": {"uid": uid}, "status": {"allocation": allocation}}
            for uid, allocation in self.allocator.allocations.items()
        ]

    def allocated_devices(self) -> frozenset[str]:
        """The agent's allocated pins: read from claim status, as the agent does."""
        return allocated_devices(self.claims(), DRIVER, NODE)

    def publish(self) -> PersonaSet:
        plan = self.publication.plan(
            self.inventory, self.policies, {}, self.allocated_devices(), self.cleanup_pending
        )
        stored = self.strip(plan.slices) if self.strip else plan.slices
        was_degraded = self.publication.degraded
        if self.publication.verify(plan.slices, stored) and not was_degraded:
            # the agent noticed the API server dropped fields: republish degraded
            return self.publish()
        self.personas, self.slices = plan.personas, plan.slices
        self.allocator.set_slices([*stored, *self.extra_slices])
        return plan.personas

    def device(self, pci: str, persona: str) -> str:
        assert self.personas is not None
        for p in self.personas.personas:
            if p.pci_address == pci and p.persona == persona:
                return p.name
        raise KeyError((pci, persona))

    def allocate(self, *claims: dict[str, Any]) -> list[dict[str, Any]]:
        return self.allocator.allocate(list(claims))

    def release(self, uid: str, *, cleanup_done: bool = True) -> None:
        """Release a claim; unless cleanup is done, its devices become cleanup-pending."""
        allocation = self.allocator.allocations[uid]
        self.allocator.release(uid)
        if not cleanup_done:
            for r in allocation["devices"]["results"]:
                self.cleanup_pending.add(r["device"])
        self.publish()

    def finish_cleanup(self, device: str) -> None:
        self.cleanup_pending.discard(device)
        self.publish()


_INVENTORY: dict[str, Inventory] = {}


def reference_inventory(tmp: Path) -> Inventory:
    """The reference node's inventory, scanned once per session (inventories are immutable)."""
    if "ref" not in _INVENTORY:
        node = build_reference_node(tmp)
        _INVENTORY["ref"] = scan(
            ScanConfig(
                sysfs_root=node.sysfs,
                node_uid="uid-worker-a",
                links=node.links,
                devlink=node.devlink,
                node_ips=node.node_ips,
            )
        )
    return _INVENTORY["ref"]


def make_harness(
    tmp: Path,
    policies: Sequence[DeviceExposurePolicy],
    classes: Sequence[dict[str, Any]] = (),
    inventory: Inventory | None = None,
) -> Harness:
    inventory = inventory or reference_inventory(tmp)
    h = Harness(
        inventory=inventory,
        policies=list(policies),
        allocator=Allocator(NODE, classes=[*STANDARD_CLASSES, *classes]),
        publication=NodePublication(NODE),
    )
    h.publish()
    return h
