"""The allocation client: IP addresses from IPPools, with the API server as the arbiter.

This is what a node's IPAM effect calls (it journals its intent, with the owner, before
:meth:`AllocationClient.allocate`)::

    ipam = AllocationClient(cluster)
    owner = Owner("ns", "claim", claim_uid, "node-1", "op-7/effect-2")
    got = ipam.allocate("macvlan-v4", AddressRequest(4), owner)            # dynamic
    got = ipam.allocate("macvlan-v4", AddressRequest(4, "10.56.0.240"), owner)  # static
    if isinstance(got, Refused): ...      # got.code: a reason code, got.message
    else: got.interface_address           # "10.56.0.17/24", got.gateway, got.routes
    ipam.release(got.name, got.uid)       # never deletes another owner's allocation
    ipam.find(owner)                      # after a crash: what a lost response created

Contract:

* **allocate** is idempotent per (owner, pool, family, kind): if the owner (same claim UID
  and operation id) already holds a dynamic address of that family in the pool (for a static
  request: the named address), that allocation is returned — so a retry after a lost
  response never takes a second address. Otherwise one snapshot (a list of the pool's
  allocations) and creates of candidates in the order of
  :func:`~dmn.api.ipam.allocator.dynamic_candidates`; a 409 AlreadyExists means another
  owner won that address (or this owner, whose lost create is then adopted). At most
  ``max_creates`` creates per snapshot and ``max_rounds`` snapshots, then
  ``E_IPAM_CONTENDED`` (retry later).
* **allocate** with ``fresh=True`` is for an owner the caller proved holds nothing in the
  pool under its operation id (the node's IPAM effect: its apply follows a fresh intent,
  or a recovery that listed nothing under the key). It first creates the owner's first
  candidate that this client does not know to be taken (:meth:`AllocationClient._optimistic`)
  without listing the pool; only when that address is held by another owner does it take
  the snapshot above. Same arbiter, same answers; one round trip instead of two when the
  first candidate is free. What this client knows to be taken (the last snapshot, its own
  creates and the conflicts it met) only ever makes it skip an address, never take one.
* **release** deletes with the allocation object's UID as a precondition: the UID
  :meth:`allocate` or :meth:`find` returned. An object recreated under the name by another
  owner has another UID and is refused with ``E_IPAM_NOT_OWNER``; a missing object is
  released already.
* **find** lists the owner's allocations by the claim-UID label and keeps those whose owner
  matches exactly (claim UID and operation id; any operation id when ``operation_id`` of the
  given owner is empty).
* Decisions are values (:class:`Allocation`, :class:`Released` or :class:`Refused`; an owner
  field the API server refuses is ``E_SCHEMA``); an API server that cannot be reached raises
  :class:`~dmn.api.cluster.ApiFailure` (retry later: nothing was decided).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from dmn.api.cluster import AlreadyExists, Cluster, Conflict, Invalid, NotFound
from dmn.api.cluster import resources as r
from dmn.api.cluster.errors import InvalidName
from dmn.api.ipam.addresses import Family, allocation_name
from dmn.api.ipam.allocator import (
    AddressRequest,
    Refusal,
    dynamic_candidates,
    exhausted,
    static_address,
    subnet_for,
)
from dmn.api.ipam.ipallocation import LABEL_CLAIM_UID, LABEL_POOL, Owner, allocation_manifest
from dmn.api.ipam.pool_plan import PoolPlan, RoutePlan, SubnetPlan, plan_pool
from dmn.interpreter.diagnostics import Code

log = logging.getLogger(__name__)

__all__ = [
    "AddressRequest",
    "Allocation",
    "AllocationClient",
    "Holding",
    "Owner",
    "Refused",
    "Released",
    "holding_of",
]


@dataclass(frozen=True)
class Holding:
    """One IPAllocation object as :meth:`AllocationClient.find` reports it."""

    name: str
    uid: str
    pool: str
    address: str
    family: Family
    kind: Literal["Dynamic", "Static"]
    owner: Owner


@dataclass(frozen=True)
class Allocation:
    """An address this owner holds, with what the node configures for it."""

    holding: Holding
    prefix_length: int
    gateway: str | None
    routes: tuple[RoutePlan, ...]

    @property
    def name(self) -> str:
        return self.holding.name

    @property
    def uid(self) -> str:
        return self.holding.uid

    @property
    def address(self) -> str:
        return self.holding.address

    @property
    def interface_address(self) -> str:
        return f"{self.holding.address}/{self.prefix_length}"


@dataclass(frozen=True)
class Refused:
    code: str
    message: str


@dataclass(frozen=True)
class Released:
    name: str
    #: True when the object was gone already (released before, or collected).
    already_gone: bool


def _refused(refusal: Refusal) -> Refused:
    return Refused(refusal.code.value, refusal.message)


def _owner(spec: Mapping[str, Any]) -> Owner:
    o = spec.get("owner") or {}
    return Owner(
        str(o.get("claimNamespace", "")),
        str(o.get("claimName", "")),
        str(o.get("claimUID", "")),
        str(o.get("nodeName", "")),
        str(o.get("operationID", "")),
    )


def holding_of(obj: Mapping[str, Any]) -> Holding:
    """The :class:`Holding` an IPAllocation object records."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    family: Family = 6 if spec.get("family") == "IPv6" else 4
    kind: Literal["Dynamic", "Static"] = "Static" if spec.get("kind") == "Static" else "Dynamic"
    return Holding(
        str(meta.get("name", "")),
        str(meta.get("uid", "")),
        str(spec.get("pool", "")),
        str(spec.get("address", "")),
        family,
        kind,
        _owner(spec),
    )


def _same_owner(a: Owner, b: Owner) -> bool:
    return a.claim_uid == b.claim_uid and a.operation_id == b.operation_id


class AllocationClient:
    def __init__(self, cluster: Cluster, *, max_creates: int = 8, max_rounds: int = 4) -> None:
        self.cluster = cluster
        self.max_creates = max_creates
        self.max_rounds = max_rounds
        #: Creates sent (each one an API call); the benchmark reads it.
        self.creates = 0
        #: Pool snapshots listed (each one an API call); the benchmark reads it.
        self.snapshots = 0
        self._taken: dict[str, set[str]] = {}
        self._taken_lock = threading.Lock()

    # --- allocate ------------------------------------------------------------------------

    def allocate(
        self,
        pool: str,
        request: AddressRequest,
        owner: Owner,
        *,
        plan: PoolPlan | None = None,
        fresh: bool = False,
    ) -> Allocation | Refused:
        """An address of ``pool`` for ``owner``, or why not (see the module contract).
        ``plan``: the pool as the caller read it a moment ago (else it is read now).
        ``fresh``: the caller proved ``owner`` holds nothing in the pool under its
        operation id (a dynamic request then tries one create before any snapshot)."""
        read = plan if plan is not None and plan.name == pool else self._plan(pool)
        if isinstance(read, Refused):
            return read
        return self._allocate(read, request, owner, fresh)

    def _allocate(
        self, plan: PoolPlan, request: AddressRequest, owner: Owner, fresh: bool = False
    ) -> Allocation | Refused:
        pool = plan.name
        subnet = subnet_for(plan, request.family)
        if isinstance(subnet, Refusal):
            return _refused(subnet)
        if request.address is not None:
            address = static_address(plan, request)
            if isinstance(address, Refusal):
                return _refused(address)
            return self._static(plan, request, address, owner)
        if fresh:
            won = self._optimistic(plan, subnet, request, owner)
            if won is not None:
                return won
        for _ in range(self.max_rounds):
            holdings = [holding_of(obj) for obj in self._pool_allocations(pool)]
            taken = {held.address for held in holdings}
            self._remember(pool, taken, replace=True)
            for held in holdings:
                if (
                    _same_owner(held.owner, owner)
                    and held.family == request.family
                    and held.kind == "Dynamic"
                ):
                    return self._allocation(plan, held)
            tried = 0
            for address in dynamic_candidates(subnet, owner.key, taken):
                if tried == self.max_creates:
                    break
                tried += 1
                won = self._create(plan, request, address, owner)
                if won is not None:
                    return won
            if tried == 0:
                return _refused(exhausted(subnet))
        return Refused(
            Code.E_IPAM_CONTENDED.value,
            f"IPPool {pool}: every address tried in {self.max_rounds} snapshots was taken by "
            "a concurrent owner; retry",
        )

    def _optimistic(
        self, plan: PoolPlan, subnet: SubnetPlan, request: AddressRequest, owner: Owner
    ) -> Allocation | Refused | None:
        """One create of the owner's first candidate not known to be taken; None when there
        is none or another owner holds it (the caller then takes a snapshot)."""
        with self._taken_lock:
            known = set(self._taken.get(plan.name, ()))
        address = next(dynamic_candidates(subnet, owner.key, known), None)
        if address is None:
            return None
        return self._create(plan, request, address, owner)

    def _remember(self, pool: str, addresses: set[str], replace: bool = False) -> None:
        """Note ``addresses`` of ``pool`` as taken (``replace``: a snapshot's whole set).
        Bounded to 64 pools; forgetting only makes the next fresh request try an address
        that may be taken."""
        with self._taken_lock:
            if pool not in self._taken and len(self._taken) >= 64:
                self._taken.clear()
            if replace:
                self._taken[pool] = set(addresses)
            else:
                self._taken.setdefault(pool, set()).update(addresses)

    def _static(
        self, plan: PoolPlan, request: AddressRequest, address: str, owner: Owner
    ) -> Allocation | Refused:
        for _ in range(self.max_rounds):
            won = self._create(plan, request, address, owner)
            if won is not None:
                return won
            try:
                current = self.cluster.get(r.IP_ALLOCATIONS, allocation_name(plan.name, address))
            except NotFound:
                continue  # released between our create and our read: try again
            held = holding_of(current)
            return Refused(
                Code.E_IPAM_ADDRESS_TAKEN.value,
                f"{address} of IPPool {plan.name} is held by claim "
                f"{held.owner.claim_namespace}/{held.owner.claim_name}",
            )
        return Refused(Code.E_IPAM_CONTENDED.value, f"{address} kept changing hands; retry")

    def _create(
        self, plan: PoolPlan, request: AddressRequest, address: str, owner: Owner
    ) -> Allocation | Refused | None:
        """Our allocation of ``address`` (created now, or adopted from a lost response), None
        when another owner holds it, or Refused (``E_SCHEMA``) when the API server finds the
        object invalid (an owner field out of bounds)."""
        name = allocation_name(plan.name, address)
        body = allocation_manifest(plan.name, address, request.family, request.kind, owner)
        self.creates += 1
        self._remember(plan.name, {address})  # ours, or another owner's on a 409
        try:
            created = self.cluster.create(r.IP_ALLOCATIONS, body)
        except Invalid as exc:
            causes = "; ".join(f"{c.field}: {c.message}" for c in exc.causes[:4])
            return Refused(Code.E_SCHEMA.value, f"the allocation was refused: {causes or exc}")
        except AlreadyExists:
            try:
                current = self.cluster.get(r.IP_ALLOCATIONS, name)
            except NotFound:
                return None
            held = holding_of(current)
            if _same_owner(held.owner, owner):
                return self._allocation(plan, held)
            return None
        log.info(
            "ip allocated pool=%s address=%s claim_uid=%s operation=%s",
            plan.name,
            address,
            owner.claim_uid,
            owner.operation_id,
        )
        return self._allocation(plan, holding_of(created))

    def _allocation(self, plan: PoolPlan, held: Holding) -> Allocation:
        subnet = plan.subnets[held.family]
        return Allocation(held, subnet.prefix_length, subnet.gateway, subnet.routes)

    def pool_plan(self, pool: str) -> PoolPlan | Refused:
        """The pool as allocation sees it (its subnets, gateways, routes), or why it cannot
        hand out addresses (unknown, invalid, terminating)."""
        return self._plan(pool)

    def _plan(self, pool: str) -> PoolPlan | Refused:
        try:
            obj = self.cluster.get(r.IP_POOLS, pool)
        except (NotFound, InvalidName):
            return Refused(Code.E_IPAM_UNKNOWN_POOL.value, f"IPPool {pool[:80]!r} does not exist")
        if (obj.get("metadata") or {}).get("deletionTimestamp"):
            return Refused(Code.E_IPAM_POOL_TERMINATING.value, f"IPPool {pool} is being deleted")
        plan, diagnostics = plan_pool(obj)
        if plan is None:
            first = diagnostics[0]
            return Refused(
                Code.E_IPAM_POOL_INVALID.value,
                f"IPPool {pool} is invalid: {first.code.value} at {first.path}: {first.message}",
            )
        for cond in (obj.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "Valid" and cond.get("status") == "False":
                return Refused(
                    Code.E_IPAM_POOL_INVALID.value,
                    f"IPPool {pool} is invalid: {cond.get('reason')}: {cond.get('message')}",
                )
        return plan

    def _pool_allocations(self, pool: str) -> list[dict[str, Any]]:
        self.snapshots += 1
        return self.cluster.list(r.IP_ALLOCATIONS, label_selector=f"{LABEL_POOL}={pool}").items

    # --- release and find ----------------------------------------------------------------

    def release(self, name: str, uid: str) -> Released | Refused:
        """Delete allocation ``name`` if it is still the object with ``uid``."""
        try:
            self.cluster.delete(r.IP_ALLOCATIONS, name, uid=uid)
        except InvalidName as exc:
            return Refused(Code.E_SCHEMA.value, exc.message)
        except NotFound:
            return Released(name, already_gone=True)
        except Conflict as exc:
            return Refused(
                Code.E_IPAM_NOT_OWNER.value,
                f"IPAllocation {name} is no longer the object {uid} (another owner holds the "
                f"address now): not released ({exc.message})",
            )
        log.info("ip released allocation=%s uid=%s", name, uid)
        return Released(name, already_gone=False)

    def find(self, owner: Owner) -> list[Holding]:
        """Every allocation ``owner`` holds (any pool), sorted by name."""
        found = self.cluster.list(
            r.IP_ALLOCATIONS, label_selector=f"{LABEL_CLAIM_UID}={owner.claim_uid}"
        ).items
        out = []
        for obj in found:
            held = holding_of(obj)
            if held.owner.claim_uid != owner.claim_uid:
                continue
            if owner.operation_id and held.owner.operation_id != owner.operation_id:
                continue
            out.append(held)
        return sorted(out, key=lambda h: h.name)
