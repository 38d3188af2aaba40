"""Executor of ``ip/pool-addresses/v1``: addresses from an IPPool on a granted sandbox link.

The lifecycle, and why a crash at any point leaks no allocation and never gives one address
to two Pods:

* ``capture`` (reads only) refuses without an allocation port or a verified claim
  (``E_IPAM_NOT_CONFIGURED``), finds the link (:mod:`granted_link`), reads the pool (its
  families, prefix lengths and routes) and records the intent: pool, static address, the
  owner (the claim the agent verified and the node), the operation key
  ``<operation>/<effect>`` and the routes to add (a pool route the sandbox already has,
  identically, through another of its links — a second interface of the same pool — is
  recorded as shared and left alone; any other route with its key refuses). The runner
  makes it durable before apply.
* ``apply`` allocates one address per recorded family (the static one for its family);
  the API server's create arbitrates. It then adds the addresses and the routes. Any
  refusal takes back what this apply added — routes, addresses, then the allocations — and
  is raised with its reason code.
* ``observe`` takes the owner's allocations, proves each address is on the link (none
  failed DAD) and every route is as recorded; the output handle records the leases
  (:data:`LEASES`) and the addresses' creation stamps (:data:`STAMPS`). Right after this
  process's own successful apply of the same operation key, the allocations are the ones
  that apply got — each proven ours by the API server's answer to our create (or the read
  that found our owner on it) a moment before — handed over once (:class:`_AppliedLeases`),
  so an attach lists the IPAllocations no second time. Any other observe (a later one,
  one after a restart, recovery's) lists them afresh (``held``): memory is never trusted
  across a crash or beyond that handover.
* ``recover``: NotApplied when the owner holds nothing under the operation key and no
  recorded route is present; Applied when everything is; Uncertain otherwise (the opcode is
  Reversible, so the runner undoes it, which releases what a lost response created).
* ``undo`` deletes the routes that match every recorded attribute, the addresses whose
  stamp is the recorded one (without a recorded outcome: the held addresses the link has,
  each absent at apply), then releases every lease whose address is gone from the link. An
  address re-added by someone else keeps its allocation (the sandbox still uses it) and
  undo raises ``E_ADDRESS_NOT_OWNED`` (quarantined). A namespace or link that is gone took
  its addresses with it: the leases are released.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from dmn.host.errors import HostError
from dmn.host.rtnetlink.addresses import (
    InterfaceAddress,
    add_address,
    delete_address,
    link_addresses,
)
from dmn.host.rtnetlink.routes import RTPROT_STATIC, RouteEntry, add_route, delete_route, routes_of
from dmn.opcodes.address_pools import AddressPools, ClaimOwner, PoolLease, PoolRefusal
from dmn.opcodes.device_environment import address_pools, claim_owner
from dmn.opcodes.effect_handles import Outputs, environment
from dmn.opcodes.executor import EffectContext, ExecutorError, Observed, RecoveryObservation
from dmn.opcodes.ip import specs
from dmn.opcodes.ip.addresses import STAMPS, decode_stamps, encode_stamps
from dmn.opcodes.ip.granted_link import (
    captured,
    continued,
    proven,
    proven_for_recovery,
    proven_for_undo,
    proven_or_refused,
)
from dmn.opcodes.spec import OpcodeSpec
from dmn.vocabulary import ip_values
from dmn.vocabulary.handles import IP_ADDRESSES

_log = logging.getLogger("dmn.opcodes.ip.executors")

LEASES = "ipamLeases"
"""Observation key of the output handle: each lease as ``name@uid=pool/family/address``."""

Key = tuple[str, int]


def _pools(env: Any) -> AddressPools:
    pools = address_pools(env)
    if pools is None:
        raise ExecutorError(
            "E_IPAM_NOT_CONFIGURED", "this node gave the effect no IPPool allocation client"
        )
    return pools


def _refuse(got: PoolRefusal) -> ExecutorError:
    return ExecutorError(got.code, got.message)


def _family(version: int) -> int:
    return int(socket.AF_INET if version == 4 else socket.AF_INET6)


def _route(destination: str, gateway: str | None, oif: int) -> RouteEntry:
    network = ipaddress.ip_network(destination)
    v4 = network.version == 4
    return RouteEntry(
        family=_family(network.version),
        table=ip_values.MAIN_TABLE,
        destination=str(network.network_address),
        prefixlen=network.prefixlen,
        metric=0 if v4 else ip_values.IPV6_DEFAULT_METRIC,
        gateway=str(ipaddress.ip_address(gateway)) if gateway else "",
        oif=oif,
        scope=0 if gateway or not v4 else 253,
        protocol=RTPROT_STATIC,
    )


def _routes(before: Any) -> list[RouteEntry]:
    return [RouteEntry.from_json(e) for e in before["routes"]]


def _live_routes(ipr: Any, entries: list[RouteEntry]) -> dict[Any, RouteEntry]:
    out: dict[Any, RouteEntry] = {}
    for family in sorted({e.family for e in entries}):
        for entry in routes_of(ipr, family):
            out.setdefault(entry.key, entry)
    return out


def _routes_to_add(
    wanted: list[RouteEntry], live: dict[Any, RouteEntry], index: int
) -> tuple[list[RouteEntry], list[RouteEntry]]:
    """The pool's routes this effect adds, and those it leaves to an identical route the
    sandbox already has through another of its links (a second interface from the same pool,
    e.g. two claims of one template: the kernel takes one route per key, and it already leads
    through the pool's gateway). That route is not adopted — never changed, never removed
    by this effect's undo. Any other route with the key refuses (``E_ROUTE_EXISTS``)."""
    mine: list[RouteEntry] = []
    shared: list[RouteEntry] = []
    for entry in wanted:
        found = live.get(entry.key)
        if found is None:
            mine.append(entry)
        elif found.gateway == entry.gateway and found.oif not in (0, index):
            shared.append(entry)
        else:
            raise ExecutorError(
                "E_ROUTE_EXISTS",
                f"route {found.describe()} exists; one this effect did not add is never adopted",
            )
    return mine, shared


def _owner(before: Any) -> tuple[ClaimOwner, str]:
    return ClaimOwner.from_json(before["owner"]), str(before["operation"])


def _held(pools: AddressPools, before: Any) -> list[PoolLease]:
    owner, operation = _owner(before)
    return [lease for lease in pools.held(owner, operation) if lease.pool == before["pool"]]


HANDOVER_SECONDS = 5.0
"""How long the leases an apply got may serve the observe that follows it."""


class _AppliedLeases:
    """The leases each successful apply got, by owner UID and operation key, for the one
    observe the runner makes right after it in this process (single use, at most
    :data:`HANDOVER_SECONDS` old). Not durable and never read by ``recover``: after a crash
    the process that knew them is gone, and recovery must read the API server."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._by_key: dict[tuple[str, str], tuple[float, tuple[PoolLease, ...]]] = {}

    @staticmethod
    def _key(before: Any) -> tuple[str, str]:
        owner, operation = _owner(before)
        return owner.uid, operation

    def put(self, before: Any, leases: list[PoolLease]) -> None:
        with self._lock:
            if len(self._by_key) >= 256:  # observes that never came (a refused recheck)
                self._by_key.clear()
            self._by_key[self._key(before)] = (self._clock(), tuple(leases))

    def take(self, before: Any) -> tuple[PoolLease, ...] | None:
        with self._lock:
            got = self._by_key.pop(self._key(before), None)
        if got is None or self._clock() - got[0] > HANDOVER_SECONDS:
            return None
        return got[1]

    def drop(self, before: Any) -> None:
        with self._lock:
            self._by_key.pop(self._key(before), None)


def _prefix(before: Any, family: int) -> int:
    for subnet in before["subnets"]:
        if int(subnet["family"]) == family:
            return int(subnet["prefixLength"])
    raise ExecutorError("E_IPAM_FAMILY_MISMATCH", f"no IPv{family} subnet was recorded")


def _interface(before: Any, lease: PoolLease) -> ip_values.IpInterface:
    return ipaddress.ip_interface(f"{lease.address}/{_prefix(before, lease.family)}")


def _recorded_leases(outputs: Outputs) -> list[PoolLease] | None:
    handles = outputs.get("interface", ())
    text = handles[0].observations.get(LEASES) if handles else None
    return [PoolLease.decode(t) for t in text.split()] if isinstance(text, str) else None


def _recorded_stamps(outputs: Outputs) -> dict[Key, int] | None:
    handles = outputs.get("interface", ())
    text = handles[0].observations.get(STAMPS) if handles else None
    return decode_stamps(text) if isinstance(text, str) else None


class IpPoolAddresses:
    """``ip/pool-addresses/v1``."""

    spec: OpcodeSpec = specs.IP_POOL_ADDRESSES

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._applied = _AppliedLeases(clock)

    def capture(self, ctx: EffectContext) -> Any:
        parameters = specs.IpPoolAddressesParameters.model_validate(ctx.parameters)
        pools = _pools(ctx.env)
        owner = claim_owner(ctx.env)
        if owner is None:
            raise ExecutorError(
                "E_IPAM_NOT_CONFIGURED",
                "no verified ResourceClaim was given to this run: an address is only "
                "allocated for a claim the node agent verified",
            )
        env, ref, link, record = captured(ctx)
        subnets = pools.subnets(parameters.pool)
        if isinstance(subnets, PoolRefusal):
            raise _refuse(subnets)
        if parameters.address is not None:
            version = ipaddress.ip_address(parameters.address).version
            if not any(s.family == version for s in subnets):
                raise ExecutorError(
                    "E_IPAM_FAMILY_MISMATCH",
                    f"IPPool {parameters.pool} has no IPv{version} subnet for {parameters.address}",
                )
        wanted = [_route(r.destination, r.gateway, link.index) for s in subnets for r in s.routes]
        routes, shared = _routes_to_add(wanted, _live_routes(env.rtnl(ref), wanted), link.index)
        return {
            **record,
            "pool": parameters.pool,
            "address": parameters.address,
            "owner": owner.to_json(),
            "operation": f"{ctx.operation_id}/{ctx.effect_id}",
            "subnets": [{"family": s.family, "prefixLength": s.prefix_length} for s in subnets],
            "routes": [e.to_json() for e in routes],
            "sharedRoutes": [e.to_json() for e in shared],
        }

    def apply(self, ctx: EffectContext, before: Any) -> None:
        env = environment(ctx)
        pools = _pools(env)
        self._applied.drop(before)
        ref, link = proven_or_refused(env, before)
        ipr = env.rtnl(ref)
        owner, operation = _owner(before)
        static = before.get("address")
        leases: list[PoolLease] = []
        added: list[InterfaceAddress] = []
        routes: list[RouteEntry] = []
        try:
            for subnet in before["subnets"]:
                family = int(subnet["family"])
                wanted = (
                    static if static and ipaddress.ip_address(static).version == family else None
                )
                got = pools.allocate(before["pool"], family, wanted, owner, operation)
                if isinstance(got, PoolRefusal):
                    raise _refuse(got)
                leases.append(got)
            have = {a.address for a in link_addresses(ipr, link.index)}
            for lease in leases:
                if lease.address in have:
                    raise ExecutorError(
                        "E_ADDRESS_EXISTS",
                        f"the link already has {lease.address}; an address this effect did "
                        "not add is never adopted",
                    )
            for lease in leases:
                iface = _interface(before, lease)
                add_address(ipr, link.index, iface, False)
                added.append(
                    InterfaceAddress(_family(iface.version), str(iface.ip), iface.network.prefixlen)
                )
            for entry in _routes(before):
                add_route(ipr, entry)
                routes.append(entry)
        except HostError:
            self._take_back(pools, ipr, link.index, leases, added, routes)
            raise
        self._applied.put(before, leases)

    def _take_back(
        self,
        pools: AddressPools,
        ipr: Any,
        index: int,
        leases: list[PoolLease],
        added: list[InterfaceAddress],
        routes: list[RouteEntry],
    ) -> None:
        """Undo what a failed apply did (each was refused had it been present); a release
        that fails is left to recovery, which finds the lease by owner."""
        try:
            for entry in reversed(routes):
                delete_route(ipr, entry)
            for address in reversed(added):
                delete_address(ipr, index, address)
            for lease in leases:
                pools.release(lease)
        except HostError:
            _log.warning("event=take-back-failed", exc_info=True)

    def observe(self, ctx: EffectContext, before: Any) -> Observed:
        env = environment(ctx)
        pools = _pools(env)
        handed = self._applied.take(before)
        ref, link = proven(env, before)
        if link is None:
            return Observed(False, detail="link is gone")
        ipr = env.rtnl(ref)
        leases = list(handed) if handed is not None else _held(pools, before)
        live = {(a.address, a.prefixlen): a for a in link_addresses(ipr, link.index)}
        problems: list[str] = []
        if len(leases) != len(before["subnets"]):
            problems.append(f"{len(leases)} allocations held for {len(before['subnets'])} subnets")
        stamps: dict[Key, int] = {}
        for lease in leases:
            iface = _interface(before, lease)
            key = (str(iface.ip), iface.network.prefixlen)
            found = live.get(key)
            if found is None:
                problems.append(f"{iface} missing")
                continue
            if found.dad_failed:
                problems.append(f"{iface} failed duplicate address detection")
            stamps[key] = found.created
        entries = _routes(before)
        live_routes = _live_routes(ipr, entries)
        problems += [
            f"route {e.describe()} missing" for e in entries if live_routes.get(e.key) != e
        ]
        out = continued(
            ctx,
            env,
            ref,
            link,
            {
                STAMPS: encode_stamps(stamps),
                LEASES: " ".join(lease.encode() for lease in leases),
                IP_ADDRESSES: " ".join(str(_interface(before, lease)) for lease in leases),
            },
        )
        return Observed(not problems, {"interface": (out,)}, "; ".join(problems))

    def recover(self, ctx: EffectContext, before: Any) -> RecoveryObservation:
        env = environment(ctx)
        self._applied.drop(before)  # a recovery trusts only a fresh read
        leases = _held(_pools(env), before)
        proof = proven_for_recovery(env, before)
        if proof is None:
            return RecoveryObservation.UNCERTAIN if leases else RecoveryObservation.NOT_APPLIED
        ref, link = proof
        ipr = env.rtnl(ref)
        entries = _routes(before)
        live_routes = _live_routes(ipr, entries)
        routes_here = [e for e in entries if live_routes.get(e.key) == e]
        if not leases and not routes_here:
            return RecoveryObservation.NOT_APPLIED
        live = {(a.address, a.prefixlen) for a in link_addresses(ipr, link.index)}
        addresses_here = [
            lease for lease in leases if (lease.address, _prefix(before, lease.family)) in live
        ]
        if (
            len(leases) == len(before["subnets"])
            and len(addresses_here) == len(leases)
            and len(routes_here) == len(entries)
        ):
            return RecoveryObservation.APPLIED
        return RecoveryObservation.UNCERTAIN

    def undo(self, ctx: EffectContext, before: Any, outputs: Outputs) -> None:
        env = environment(ctx)
        pools = _pools(env)
        self._applied.drop(before)
        recorded = _recorded_leases(outputs)
        leases = recorded if recorded is not None else _held(pools, before)
        stamps = _recorded_stamps(outputs)
        kept: set[str] = set()
        refused: list[str] = []
        proof = proven_for_undo(env, before, ctx.effect_id)
        if proof is not None:
            ref, link = proof
            ipr = env.rtnl(ref)
            entries = _routes(before)
            live_routes = _live_routes(ipr, entries)
            for entry in reversed(entries):
                found = live_routes.get(entry.key)
                if found is None:
                    continue
                if found != entry:
                    refused.append(f"route {entry.describe()} was changed by someone else")
                    continue
                delete_route(ipr, entry)
            live = {(a.address, a.prefixlen): a for a in link_addresses(ipr, link.index)}
            for lease in reversed(leases):
                iface = _interface(before, lease)
                key = (str(iface.ip), iface.network.prefixlen)
                mine = live.get(key)
                if mine is None:
                    continue
                if stamps is not None and stamps.get(key) != mine.created:
                    kept.add(lease.name)
                    refused.append(f"{iface} was removed and added again by someone else")
                    continue
                delete_address(ipr, link.index, mine)
        for lease in leases:
            if lease.name in kept:
                continue
            got = pools.release(lease)
            if got is not None and got.code != "E_IPAM_NOT_OWNER":
                raise _refuse(got)
        if refused:
            raise ExecutorError(
                "E_ADDRESS_NOT_OWNED",
                "left in place, not proven ours (their allocations are kept): "
                + "; ".join(refused),
            )
