"""Which of this node's devices are allocated, read from ResourceClaim status.

A device allocated by the scheduler pins its declaration whether or not the node has
prepared it yet (design §11.1 case 7): between allocation and NodePrepareResources —
or while a Pod never starts — the only record of the allocation is the claim's status.
The agent therefore derives its ``allocated`` pins from the claims, never from its own
preparations alone; a claim being deleted still pins until its allocation is cleared.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


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
