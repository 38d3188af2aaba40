"""The node's IPPool port (:mod:`dmn.opcodes.address_pools`) over the allocation client.

The agent builds one from its cluster connection and gives it to every executor
environment; ``ip/pool-addresses`` allocates, finds and releases through it. Owners are
mapped one to one: the verified claim and node, with the effect's operation key as the
allocation's ``operationID``. An API server that cannot be reached (or fails a request) is
``E_IPAM_UNAVAILABLE``, raised: nothing was decided, the runner's recovery retries.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from dmn.api.cluster import ApiFailure
from dmn.api.ipam.addresses import Family
from dmn.api.ipam.client import AddressRequest, AllocationClient, Owner, Refused
from dmn.api.ipam.pool_plan import PoolPlan
from dmn.opcodes.address_pools import (
    ClaimOwner,
    PoolLease,
    PoolRefusal,
    PoolRoute,
    PoolSubnet,
)
from dmn.opcodes.executor import ExecutorError


@contextmanager
def _reachable(what: str) -> Iterator[None]:
    try:
        yield
    except ApiFailure as exc:
        raise ExecutorError("E_IPAM_UNAVAILABLE", f"{what}: {exc}") from exc


def _owner(owner: ClaimOwner, operation: str) -> Owner:
    return Owner(owner.namespace, owner.name, owner.uid, owner.node_name, operation)


def _family(family: int) -> Family:
    return 6 if family == 6 else 4


#: How long a pool read for an effect's capture serves its allocations (seconds).
PLAN_REUSE_SECONDS = 2.0


class ClusterAddressPools:
    """:class:`~dmn.opcodes.address_pools.AddressPools` over :class:`AllocationClient`.

    The pool an effect's capture just read (:meth:`subnets`) serves that effect's
    allocations for :data:`PLAN_REUSE_SECONDS` instead of a second read of the same object:
    an allocation was never atomic with its pool read (the API server's create is the
    arbiter), so reading it a moment earlier changes nothing but one round trip per family.
    """

    def __init__(self, client: AllocationClient, clock: Callable[[], float] = time.monotonic):
        self.client = client
        self._clock = clock
        self._plans: dict[str, tuple[float, PoolPlan]] = {}
        self._lock = threading.Lock()

    def _recent(self, pool: str) -> PoolPlan | None:
        with self._lock:
            got = self._plans.get(pool)
        if got is None or self._clock() - got[0] > PLAN_REUSE_SECONDS:
            return None
        return got[1]

    def subnets(self, pool: str) -> tuple[PoolSubnet, ...] | PoolRefusal:
        with _reachable(f"read IPPool {pool}"):
            plan = self.client.pool_plan(pool)
        if isinstance(plan, Refused):
            with self._lock:
                self._plans.pop(pool, None)
            return PoolRefusal(plan.code, plan.message)
        with self._lock:
            if len(self._plans) >= 64:
                self._plans.clear()
            self._plans[pool] = (self._clock(), plan)
        return tuple(
            PoolSubnet(
                family,
                subnet.prefix_length,
                subnet.gateway,
                tuple(PoolRoute(r.destination, r.gateway) for r in subnet.routes),
            )
            for family, subnet in sorted(plan.subnets.items())
        )

    def allocate(
        self, pool: str, family: int, address: str | None, owner: ClaimOwner, operation: str
    ) -> PoolLease | PoolRefusal:
        request = AddressRequest(_family(family), address)
        with _reachable(f"allocate from IPPool {pool}"):
            got = self.client.allocate(
                pool, request, _owner(owner, operation), plan=self._recent(pool)
            )
        if isinstance(got, Refused):
            return PoolRefusal(got.code, got.message)
        return PoolLease(got.name, got.uid, pool, got.address, family)

    def release(self, lease: PoolLease) -> PoolRefusal | None:
        with _reachable(f"release IPAllocation {lease.name}"):
            got = self.client.release(lease.name, lease.uid)
        return PoolRefusal(got.code, got.message) if isinstance(got, Refused) else None

    def held(self, owner: ClaimOwner, operation: str) -> tuple[PoolLease, ...]:
        with _reachable(f"list the IPAllocations of claim {owner.uid}"):
            found = self.client.find(_owner(owner, operation))
        return tuple(PoolLease(h.name, h.uid, h.pool, h.address, h.family) for h in found)


__all__ = ["ClusterAddressPools"]
