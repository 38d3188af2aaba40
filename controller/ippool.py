"""IPPool reconciler: status counts, validity, exhaustion Events, allocation GC, the in-use
finalizer (design §5.7).

For one pool, in this order:

1. list the pool's IPAllocations, *then* the ResourceClaims, and delete (with the
   allocation's UID as a precondition) every allocation whose claim is gone or has another
   UID. Reading allocations first means every allocation seen was created after its claim
   existed, so a claim missing from the later list is really gone;
2. a pool being deleted keeps its finalizer while allocations remain (condition
   ``Deletable`` False with ``E_IPPOOL_IN_USE``, and a Warning Event), and loses it once none
   do; otherwise the finalizer is ensured;
3. status: ``size``, ``allocated``, ``dynamicAllocated``, ``staticAllocated``, ``free``,
   condition ``Valid`` (the pool plan's checks plus overlap with other pools: the first
   diagnostic's code is the reason) and ``Exhausted`` (some family's dynamic addresses are
   all held). Becoming exhausted records a Warning Event ``E_IPPOOL_EXHAUSTED``; recovering a
   Normal Event ``IPPoolAvailable``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dmn.api.cluster import Cluster, Conflict, EventRecorder, NotFound
from dmn.api.cluster import resources as r
from dmn.api.ipam.addresses import Family, contains, size, to_int
from dmn.api.ipam.ipallocation import LABEL_POOL
from dmn.api.ipam.ippool import POOL_FINALIZER
from dmn.api.ipam.pool_plan import PoolPlan, overlap_diagnostics, plan_pool
from dmn.api.served_yaml import served_document
from dmn.controller.conditions import condition, set_condition
from dmn.interpreter.diagnostics import Code, Diagnostic

log = logging.getLogger(__name__)

Obj = dict[str, Any]


def ippool_diagnostics(
    obj: Mapping[str, Any], others: Iterable[Mapping[str, Any]] = ()
) -> list[Diagnostic]:
    """Why ``obj`` is not a valid IPPool (positions in its served YAML); empty when it is."""
    diagnostics = plan_pool(obj)[1]
    overlaps = overlap_diagnostics(obj, others)
    if not diagnostics and not overlaps:
        return []
    source = served_document(obj, "IPPool").source
    return plan_pool(obj, source)[1] + overlap_diagnostics(obj, others, source)


@dataclass(frozen=True)
class PoolCounts:
    size: int
    dynamic: int
    static: int
    exhausted_families: tuple[Family, ...]

    @property
    def allocated(self) -> int:
        return self.dynamic + self.static

    def status(self) -> dict[str, int]:
        return {
            "size": self.size,
            "allocated": self.allocated,
            "dynamicAllocated": self.dynamic,
            "staticAllocated": self.static,
            "free": max(0, self.size - self.allocated),
        }


def pool_counts(plan: PoolPlan | None, allocations: Iterable[Mapping[str, Any]]) -> PoolCounts:
    """What ``allocations`` hold of the pool; a family is exhausted when every one of its
    dynamic addresses is held (pure)."""
    dynamic = static = 0
    held: dict[Family, int] = {}
    for obj in allocations:
        spec = obj.get("spec") or {}
        if spec.get("kind") == "Static":
            static += 1
            continue
        dynamic += 1
        family: Family = 6 if spec.get("family") == "IPv6" else 4
        value = to_int(str(spec.get("address", "")))
        subnet = plan.subnets.get(family) if plan is not None else None
        if value is not None and subnet is not None and contains(subnet.dynamic, value):
            held[family] = held.get(family, 0) + 1
    exhausted: tuple[Family, ...] = ()
    if plan is not None:
        exhausted = tuple(
            f
            for f, subnet in sorted(plan.subnets.items())
            if size(subnet.dynamic) and held.get(f, 0) >= size(subnet.dynamic)
        )
    return PoolCounts(plan.size if plan is not None else 0, dynamic, static, exhausted)


@dataclass
class IPPoolReconciler:
    cluster: Cluster
    events: EventRecorder | None = None
    #: Allocations collected so far (tests and metrics read it).
    collected: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.events is None:
            self.events = EventRecorder(self.cluster, "dra-multi-network-controller")

    def reconcile(self, name: str) -> bool:
        """Converge pool ``name``; False while its deletion waits for allocations."""
        try:
            pool = self.cluster.get(r.IP_POOLS, name)
        except NotFound:
            return True
        allocations = self.cluster.list(
            r.IP_ALLOCATIONS, label_selector=f"{LABEL_POOL}={name}"
        ).items
        live = self._collect(pool, allocations)
        meta = pool["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        if meta.get("deletionTimestamp"):
            return self._deleting(pool, live, finalizers)
        if POOL_FINALIZER not in finalizers:
            pool = self.cluster.patch(
                r.IP_POOLS,
                name,
                {
                    "metadata": {
                        "finalizers": [*finalizers, POOL_FINALIZER],
                        "resourceVersion": meta.get("resourceVersion"),
                    }
                },
            )
        others = [p for p in self.cluster.list(r.IP_POOLS).items if p["metadata"]["name"] != name]
        plan, diagnostics = plan_pool(pool)
        diagnostics += overlap_diagnostics(pool, others)
        counts = pool_counts(plan, live)
        self._write_status(pool, counts, diagnostics)
        return True

    def _collect(self, pool: Obj, allocations: list[Obj]) -> list[Obj]:
        """The allocations whose claim still exists with the owner's UID; the rest deleted."""
        if not allocations:
            return []
        claims = {
            (c["metadata"].get("namespace"), c["metadata"].get("name")): c["metadata"].get("uid")
            for c in self.cluster.list(r.RESOURCE_CLAIMS).items
        }
        live: list[Obj] = []
        for obj in allocations:
            owner = (obj.get("spec") or {}).get("owner") or {}
            uid = claims.get((owner.get("claimNamespace"), owner.get("claimName")))
            if uid is not None and uid == owner.get("claimUID"):
                live.append(obj)
                continue
            why = "is gone" if uid is None else "was replaced (another UID)"
            allocation = obj["metadata"]["name"]
            try:
                self.cluster.delete(r.IP_ALLOCATIONS, allocation, uid=obj["metadata"].get("uid"))
            except (NotFound, Conflict):
                continue  # released meanwhile (or replaced by a newer owner's object)
            self.collected.append(allocation)
            log.info(
                "ip allocation collected allocation=%s claim=%s/%s reason=claim %s",
                allocation,
                owner.get("claimNamespace"),
                owner.get("claimName"),
                why,
            )
            assert self.events is not None
            self.events.record(
                pool,
                "Normal",
                "IPAllocationCollected",
                f"released {obj['spec'].get('address')}: ResourceClaim "
                f"{owner.get('claimNamespace')}/{owner.get('claimName')} {why}",
            )
        return live

    def _deleting(self, pool: Obj, live: list[Obj], finalizers: list[str]) -> bool:
        name = pool["metadata"]["name"]
        if live:
            message = (
                f"{len(live)} addresses are still allocated from this pool: its deletion waits "
                "until they are released"
            )
            status = pool.get("status") or {}
            conditions = set_condition(
                status.get("conditions"),
                "Deletable",
                False,
                Code.E_IPPOOL_IN_USE.value,
                message,
                pool["metadata"].get("generation"),
            )
            if conditions != status.get("conditions"):
                with contextlib.suppress(NotFound, Conflict):
                    self.cluster.patch(
                        r.IP_POOLS, name, {"status": {"conditions": conditions}}, status=True
                    )
                assert self.events is not None
                self.events.record(pool, "Warning", Code.E_IPPOOL_IN_USE.value, message)
            return False
        if POOL_FINALIZER in finalizers:
            with contextlib.suppress(NotFound):
                self.cluster.patch(
                    r.IP_POOLS,
                    name,
                    {
                        "metadata": {
                            "finalizers": [f for f in finalizers if f != POOL_FINALIZER],
                            "resourceVersion": pool["metadata"].get("resourceVersion"),
                        }
                    },
                )
            log.info("ip pool released name=%s", name)
        return True

    def _write_status(self, pool: Obj, counts: PoolCounts, diagnostics: list[Diagnostic]) -> None:
        meta = pool["metadata"]
        generation = meta.get("generation")
        status = pool.get("status") or {}
        conditions = status.get("conditions")
        if diagnostics:
            first = diagnostics[0]
            conditions = set_condition(
                conditions,
                "Valid",
                False,
                first.code.value,
                f"{first.path or '<object>'}: {first.message}",
                generation,
            )
        else:
            conditions = set_condition(
                conditions, "Valid", True, "Validated", "the pool's addresses are valid", generation
            )
        families = ", ".join(f"IPv{f}" for f in counts.exhausted_families)
        was_exhausted = (condition(pool, "Exhausted") or {}).get("status") == "True"
        if counts.exhausted_families:
            message = f"every dynamic {families} address is allocated"
            conditions = set_condition(
                conditions, "Exhausted", True, Code.E_IPPOOL_EXHAUSTED.value, message, generation
            )
        else:
            message = "dynamic addresses are free"
            conditions = set_condition(
                conditions, "Exhausted", False, "IPPoolAvailable", message, generation
            )
        wanted = {**counts.status(), "observedGeneration": generation, "conditions": conditions}
        if all(status.get(k) == v for k, v in wanted.items()):
            return
        try:
            self.cluster.patch(r.IP_POOLS, meta["name"], {"status": wanted}, status=True)
        except NotFound:
            return
        assert self.events is not None
        if counts.exhausted_families and not was_exhausted:
            self.events.record(pool, "Warning", Code.E_IPPOOL_EXHAUSTED.value, message)
        elif was_exhausted and not counts.exhausted_families:
            self.events.record(pool, "Normal", "IPPoolAvailable", message)
