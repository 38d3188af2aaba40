"""The node's publication loop state: personas → slices with pins, generations and read-back.

:class:`NodePublication` is what the node agent holds per node. On every trigger (inventory
change, policy event, allocation or cleanup change in the journal) it calls :meth:`plan`
with the current inventory, policies, node labels and the journal's pins; after writing the
slices it calls :meth:`verify` with what the API server stored. A stripped prerequisite
field (feature gate off) switches the publication to degraded; ``degraded`` is part of
the persisted state (:meth:`NodePublication.to_json`), so neither a later read-back that
happens to keep the fields nor an agent restart switches back silently — an operator
clears it once the API server serves the fields.

Persist ``publisher.generation`` and ``last`` (the declarations) with the journal: a
restarted agent must publish above its last generation and keep pinned declarations.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dmn.agent.inventory.facts import Inventory
from dmn.agent.personas.build import Pins, build_personas
from dmn.agent.personas.model import Finding, Persona, PersonaSet
from dmn.agent.slices.build import SlicePublisher
from dmn.agent.slices.device_health import device_taints
from dmn.agent.slices.readback import stripped_prerequisites
from dmn.api.policy import DeviceExposurePolicy

log = logging.getLogger(__name__)


#: How long a device must stay unhealthy before its slice carries the taint: a whole link
#: returning from a Pod is down for a moment (a namespace move sets it down), and a taint
#: for that moment would refuse allocations the device can serve.
TAINT_GRACE_S = 3.0


@dataclass
class Plan:
    personas: PersonaSet
    slices: list[dict[str, Any]]
    changed: bool  # the content (and so the generation) changed
    #: some unhealthy device is not tainted yet (within the grace): plan again after it
    taints_pending: bool = False

    def obsolete(self, existing: Iterable[str]) -> list[str]:
        """Names of this node's existing slices to delete after writing the plan: a pool
        that shrank must not leave slices of an older generation behind."""
        keep = {s["metadata"]["name"] for s in self.slices}
        return sorted(set(existing) - keep)


@dataclass
class NodePublication:
    node_name: str
    publisher: SlicePublisher = field(init=False)
    degraded: bool = False
    last: PersonaSet | None = None
    #: device -> when this publication first saw it unhealthy (monotonic; not persisted)
    unhealthy_since: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.publisher = SlicePublisher(self.node_name)

    def plan(
        self,
        inventory: Inventory,
        policies: Sequence[DeviceExposurePolicy],
        labels: Mapping[str, str],
        allocated: Iterable[str] = (),
        cleanup_pending: Iterable[str] = (),
        now: float | None = None,
    ) -> Plan:
        personas, taints, unhealthy_since, pending = self._declare(
            inventory, policies, labels, allocated, cleanup_pending, now
        )
        self.unhealthy_since = unhealthy_since
        changed, slices = self.publisher.publish(personas, taints)
        self.last = personas
        return Plan(personas, slices, changed, taints_pending=pending)

    def changes(
        self,
        inventory: Inventory,
        policies: Sequence[DeviceExposurePolicy],
        labels: Mapping[str, str],
        allocated: Iterable[str] = (),
        cleanup_pending: Iterable[str] = (),
        now: float | None = None,
    ) -> bool:
        """Whether :meth:`plan` with these inputs would change the published content; it
        changes nothing itself. The publisher asks before trusting a claim view that may
        lag: a plan that changes no declaration does not depend on a pin not seen yet."""
        personas, taints, _, _ = self._declare(
            inventory, policies, labels, allocated, cleanup_pending, now
        )
        return self.publisher.changes(personas, taints)

    def _declare(
        self,
        inventory: Inventory,
        policies: Sequence[DeviceExposurePolicy],
        labels: Mapping[str, str],
        allocated: Iterable[str],
        cleanup_pending: Iterable[str],
        now: float | None,
    ) -> tuple[PersonaSet, dict[str, list[dict[str, str]]], dict[str, float], bool]:
        """(personas, taints due, unhealthy-since times, whether a taint is still pending)."""
        pins = Pins(
            allocated=frozenset(allocated),
            cleanup_pending=frozenset(cleanup_pending),
            previous=self.last.by_name() if self.last else {},
        )
        personas = build_personas(inventory, policies, labels, pins, degraded=self.degraded)
        candidates = device_taints(personas.personas, inventory, pins.allocated)
        at = time.monotonic() if now is None else now
        since = {n: self.unhealthy_since.get(n, at) for n in candidates}
        taints = {n: t for n, t in candidates.items() if at - since[n] >= TAINT_GRACE_S}
        return personas, taints, since, len(taints) < len(candidates)

    def to_json(self) -> dict[str, Any]:
        """The state a restarted agent needs: last generation and digest, degradation and
        the last published declarations (persist it with the journal after every write)."""
        return {
            "nodeName": self.node_name,
            "generation": self.publisher.generation,
            "digest": self.publisher.digest,
            "degraded": self.degraded,
            "declarations": [p.to_json() for p in self.last.personas] if self.last else None,
            "counterSets": dict(self.last.counter_sets) if self.last else None,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> NodePublication:
        """Restore after a restart: the next content change publishes above the persisted
        generation, and pinned devices keep their persisted declarations."""
        pub = cls(d["nodeName"], degraded=bool(d["degraded"]))
        pub.publisher.generation = int(d["generation"])
        pub.publisher.digest = str(d["digest"])
        if d.get("declarations") is not None:
            pub.last = PersonaSet(
                personas=tuple(Persona.from_json(p) for p in d["declarations"]),
                counter_sets=dict(d.get("counterSets") or {}),
                findings=(),
            )
        return pub

    def verify(self, written: list[dict[str, Any]], stored: list[dict[str, Any]]) -> list[Finding]:
        """Compare with the stored slices; on loss, become degraded (re-plan afterwards)."""
        findings = stripped_prerequisites(written, stored)
        if findings and not self.degraded:
            log.warning(
                "slice publication degraded node=%s findings=%d", self.node_name, len(findings)
            )
            self.degraded = True
        return findings
