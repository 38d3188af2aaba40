"""Which ResourceSlices count: the pools the scheduler would allocate from.

kube-scheduler's DRA plugin (k8s.io/dynamic-resource-allocation/structured) uses, per
(driver, pool), only the slices of the newest generation, and skips a pool entirely when it
is *incomplete* (fewer slices at that generation than ``resourceSliceCount``, as while a
publication is half written) or *invalid* (one device name twice). The lab's allocator and
the controller's per-class device count both read slices through this one rule, so "a class
matches N published devices" means the devices the scheduler can actually see.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

log = logging.getLogger(__name__)

PoolKey = tuple[str, str]  # driver, pool name


def pool_key(resource_slice: Mapping[str, Any]) -> PoolKey:
    spec = resource_slice["spec"]
    return (str(spec["driver"]), str(spec["pool"]["name"]))


def newest_generation(slices: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The slices of each pool's newest generation (older generations are being replaced)."""
    listed = list(slices)
    newest: dict[PoolKey, int] = {}
    for s in listed:
        key = pool_key(s)
        newest[key] = max(newest.get(key, 0), int(s["spec"]["pool"]["generation"]))
    return [s for s in listed if int(s["spec"]["pool"]["generation"]) == newest[pool_key(s)]]


def unusable_pools(current: Iterable[Mapping[str, Any]]) -> set[PoolKey]:
    """Pools of ``current`` (newest-generation slices) upstream does not allocate from."""
    seen: dict[PoolKey, list[Mapping[str, Any]]] = {}
    for s in current:
        seen.setdefault(pool_key(s), []).append(s["spec"])
    out: set[PoolKey] = set()
    for pool, specs in seen.items():
        names = [d["name"] for spec in specs for d in spec.get("devices") or ()]
        if len(specs) != int(specs[0]["pool"]["resourceSliceCount"]):
            log.info("pool incomplete driver=%s pool=%s slices=%d", *pool, len(specs))
            out.add(pool)
        elif len(names) != len(set(names)):
            log.info("pool invalid driver=%s pool=%s reason=duplicate-device", *pool)
            out.add(pool)
    return out


def usable_slices(slices: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Newest-generation slices of complete, valid pools, in (driver, slice name) order."""
    current = newest_generation(slices)
    unusable = unusable_pools(current)
    kept = [s for s in current if pool_key(s) not in unusable]
    return sorted(kept, key=lambda s: (s["spec"]["driver"], s["metadata"]["name"]))
