"""Which of this node's devices are allocated, read from ResourceClaim status.

A device allocated by the scheduler pins its declaration whether or not the node has
prepared it yet (design §11.1 case 7): between allocation and NodePrepareResources —
or while a Pod never starts — the only record of the allocation is the claim's status.
The agent therefore derives its ``allocated`` pins from the claims, never from its own
preparations alone; a claim being deleted still pins until its allocation is cleared.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any

from dmn.api.cluster.access import WatchEvent
from dmn.api.cluster.listwatch import SYNCED


def allocated_devices(
    claims: Iterable[Mapping[str, Any]], driver: str, pool: str
) -> frozenset[str]:
    """Names of ``pool``'s devices of ``driver`` in any claim's ``status.allocation``."""
    out: set[str] = set()
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or ():
            if result.get("driver") == driver and result.get("pool") == pool:
                out.add(str(result["device"]))
    return frozenset(out)


class ClaimPins:
    """This node's allocated devices per claim, as the publisher's claim watch last saw them.

    Why: every pass listed every ResourceClaim of the cluster to find this node's pins —
    bytes per pass growing with the cluster's claims, on every node, on every pass (1.5 MB
    per node per pass with 600 claims; benchmarks/scale.py). The watch the publisher runs
    anyway sees every claim change; this view keeps what it saw.

    Contract: :meth:`observe` takes the watch's events in order (``ListWatch`` events,
    ``SYNCED`` included) and says whether this node's pins moved. :meth:`allocated` is
    ``None`` until the first ``SYNCED`` and while the view is older than ``max_age``
    seconds since it was last confirmed by a full read (:meth:`confirmed`); otherwise the
    union of the pins seen. The view is a prefix of the claims' history (a watch delivers
    in order) but may lag it: the publisher uses it only for a pass whose plan changes no
    device's declaration (design §5.6), where a pin it has not seen yet changes nothing.
    Thread-safe: the watch thread observes, the publisher's thread reads.
    """

    def __init__(self, driver: str, pool: str, max_age: float = 300.0) -> None:
        self.driver = driver
        self.pool = pool
        self.max_age = max_age
        self._by_claim: dict[str, frozenset[str]] = {}
        self._synced = False
        self._confirmed_at: float | None = None
        self._lock = threading.Lock()

    def observe(self, event: WatchEvent) -> bool:
        """Record ``event``; whether this node's pins may have moved (a ``SYNCED`` marker
        after a (re)list always counts)."""
        if event.type == SYNCED:
            with self._lock:
                self._synced = True
            return True
        meta = (event.object or {}).get("metadata") or {}
        uid = str(meta.get("uid") or meta.get("name") or "")
        now = (
            frozenset()
            if event.type == "DELETED"
            else allocated_devices((event.object or {},), self.driver, self.pool)
        )
        with self._lock:
            before = self._by_claim.get(uid, frozenset())
            if now:
                self._by_claim[uid] = now
            else:
                self._by_claim.pop(uid, None)
        return now != before

    def confirmed(self, at: float | None = None) -> None:
        """A full read of the claims has just been used: the view may serve ``max_age``
        more seconds (a watch that silently stopped delivering cannot keep a released
        device pinned for longer)."""
        with self._lock:
            self._confirmed_at = time.monotonic() if at is None else at

    @property
    def synced(self) -> bool:
        """The watch has delivered its first (re)list."""
        with self._lock:
            return self._synced

    def allocated(self, at: float | None = None) -> frozenset[str] | None:
        now = time.monotonic() if at is None else at
        with self._lock:
            if not self._synced or self._confirmed_at is None:
                return None
            if now - self._confirmed_at > self.max_age:
                return None
            return frozenset().union(*self._by_claim.values())
