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


#: How long one read of a pool serves captures and allocations (seconds).
PLAN_REUSE_SECONDS = 2.0


class ClusterAddressPools:
    """:class:`~dmn.opcodes.address_pools.AddressPools` over :class:`AllocationClient`.

    One successful read of a pool serves every capture (:meth:`subnets`) and allocation
    on this node for :data:`PLAN_REUSE_SECONDS` after it was read (never refreshed by a
    use, so no answer is older than that), instead of a read of the same object per
    effect and family. An allocation was never atomic with its pool read: the API
    server's create arbitrates the address, and the controller keeps a deleted pool's
    finalizer while any allocation exists, whenever it was created. So a read a moment
    older changes only how soon a pool edit or deletion is seen — by at most that
    window — and saves one round trip per Pod in a burst, where the serialized NRI
    hooks come one after another. A pool that could not be read is never reused.
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

    def _plan(self, pool: str) -> PoolPlan | PoolRefusal:
        """The pool read within the window, else read now (and kept from now on)."""
        plan = self._recent(pool)
        if plan is not None:
            return plan
        with _reachable(f"read IPPool {pool}"):
            read = self.client.pool_plan(pool)
        if isinstance(read, Refused):
            with self._lock:
                self._plans.pop(pool, None)
            return PoolRefusal(read.code, read.message)
        with self._lock:
            if len(self._plans) >= 64:
                self._plans.clear()
            self._plans[pool] = (self._clock(), read)
        return read

    def subnets(self, pool: str) -> tuple[PoolSubnet, ...] | PoolRefusal:
        plan = self._plan(pool)
        if isinstance(plan, PoolRefusal):
            return plan
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
        plan = self._plan(pool)
        if isinstance(plan, PoolRefusal):
            return plan
        with _reachable(f"allocate from IPPool {pool}"):
            got = self.client.allocate(
                pool, request, _owner(owner, operation), plan=plan, fresh=True
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
