"""The lab scheduler's DRA step against an API server (the lab's or a real one).

:class:`ClaimService` reads ResourceSlices and DeviceClasses, allocates ResourceClaims with
:class:`~dmn.lab.allocator.allocator.Allocator` and writes ``status.allocation`` and
``status.reservedFor`` through the ``status`` subresource with optimistic concurrency. If a
status write fails, the in-memory allocation is rolled back, so memory never claims more
than the API server recorded. :meth:`ClaimService.restore` rebuilds accounting from the
claims' status after a restart — allocated claims count whether or not a node prepared
them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from dmn.api.cluster import Cluster, Conflict
from dmn.api.cluster import resources as r
from dmn.lab.allocator.allocator import Allocator

log = logging.getLogger(__name__)

Obj = dict[str, Any]


class ClaimService:
    def __init__(self, cluster: Cluster, node_name: str) -> None:
        self.cluster = cluster
        self.node_name = node_name
        self.allocator = Allocator(node_name)

    def refresh(self) -> None:
        """Load the current slices and classes (the scheduler's live view)."""
        self.allocator.set_slices(self.cluster.list(r.RESOURCE_SLICES).items)
        for cls in self.cluster.list(r.DEVICE_CLASSES).items:
            self.allocator.set_class(cls)

    def restore(self) -> None:
        """Re-admit every allocation recorded in claim status (scheduler restart)."""
        self.allocator.allocations.clear()
        for claim in self.cluster.list(r.RESOURCE_CLAIMS).items:
            allocation = (claim.get("status") or {}).get("allocation")
            if allocation:
                self.allocator.restore(claim["metadata"]["uid"], allocation)

    def allocate(
        self, claims: Sequence[Mapping[str, Any]], pod: Mapping[str, Any] | None = None
    ) -> list[Obj]:
        """Allocate the claims together and record them; returns the updated claims.

        Raises :class:`~dmn.lab.allocator.allocator.AllocationError` when they cannot be
        allocated and :class:`~dmn.api.cluster.errors.ApiFailure` when a write fails (after
        rolling back everything this call allocated)."""
        self.refresh()
        results = self.allocator.allocate(claims)
        written: list[Obj] = []
        try:
            for claim, allocation in zip(claims, results, strict=True):
                status: Obj = {"allocation": allocation}
                if pod is not None:
                    meta = pod["metadata"]
                    status["reservedFor"] = [
                        {"resource": "pods", "name": meta["name"], "uid": meta["uid"]}
                    ]
                body = {**claim, "status": status}
                written.append(self.cluster.replace(r.RESOURCE_CLAIMS, body, status=True))
        except Exception:
            for claim in claims:
                self.allocator.release(claim["metadata"]["uid"])
            for done in written:  # undo the status writes that did land
                self._clear(done)
            raise
        log.info("claims allocated count=%d node=%s", len(written), self.node_name)
        return written

    def release(self, claim: Mapping[str, Any]) -> Obj:
        """Deallocate: clear the claim's status, then stop counting it."""
        updated = self._clear(claim)
        self.allocator.release(claim["metadata"]["uid"])
        return updated

    def _clear(self, claim: Mapping[str, Any], attempts: int = 5) -> Obj:
        """Clear the claim's status, re-reading it after a write conflict: the node agent
        writes ``status.devices`` from a background thread (its StatusWriter) and may land
        between our read and our write, as with a real scheduler, which retries too."""
        meta = claim["metadata"]
        for attempt in range(attempts):
            current = self.cluster.get(r.RESOURCE_CLAIMS, meta["name"], meta.get("namespace"))
            current["status"] = {}
            try:
                result: Obj = self.cluster.replace(r.RESOURCE_CLAIMS, current, status=True)
                return result
            except Conflict:
                if attempt == attempts - 1:
                    raise
        raise AssertionError("unreachable")
