"""The node's IPPool port (:mod:`dmn.opcodes.address_pools`) over the allocation client.

The agent builds one from its cluster connection and gives it to every executor
environment; ``ip/pool-addresses`` allocates, finds and releases through it. Owners are
mapped one to one: the verified claim and node, with the effect's operation key as the
allocation's ``operationID``. An API server that cannot be reached (or fails a request) is
``E_IPAM_UNAVAILABLE``, raised: nothing was decided, the runner's recovery retries.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from dmn.api.cluster import ApiFailure
from dmn.api.ipam.addresses import Family
from dmn.api.ipam.client import AddressRequest, AllocationClient, Owner, Refused
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


class ClusterAddressPools:
    """:class:`~dmn.opcodes.address_pools.AddressPools` over :class:`AllocationClient`."""

    def __init__(self, client: AllocationClient) -> None:
        self.client = client

    def subnets(self, pool: str) -> tuple[PoolSubnet, ...] | PoolRefusal:
        with _reachable(f"read IPPool {pool}"):
            plan = self.client.pool_plan(pool)
        if isinstance(plan, Refused):
            return PoolRefusal(plan.code, plan.message)
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
            got = self.client.allocate(pool, request, _owner(owner, operation))
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
