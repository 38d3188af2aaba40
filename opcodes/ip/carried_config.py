"""Executor of ``ip/carried-host-config/v1``: a moved link's host addresses and routes,
re-created on it in the sandbox.

Where the record comes from: ``linux/link-move/v1`` with ``carryHostConfig`` reads the
link's host addresses and routes (:mod:`dmn.host.rtnetlink.carried_config`) in its capture —
before the move, into its before-image — and its outcome hands them on in the output handle
(:data:`~dmn.vocabulary.handles.CARRIED_HOST_CONFIG`). This effect takes that handle (the
journal's record of the move's outcome, never configuration) and copies the record into its
own before-image, so its undo and recovery need nothing else. Putting the entries back on
the host is the move's undo: the kernel drops them when the link leaves the sandbox, and
only the move knows when the link is home.

The lifecycle, and why each step is safe:

* ``capture`` proves the link (:mod:`granted_link`) and refuses when it already has one of
  the carried addresses (``E_ADDRESS_EXISTS``) or a route holds the key of a carried route
  (``E_ROUTE_EXISTS``): an entry this effect did not add is never adopted. A handle with no
  record (a move without ``carryHostConfig``) is ``E_NOT_CARRIED``.
* ``apply`` proves the link again, refuses again, adds the addresses in the recorded order
  (IPv4 primaries before their secondaries) and then the routes through the link's
  ifindex; a kernel refusal takes back what this apply added before it is raised.
* ``observe``: every address on the link (none failed duplicate address detection) and
  every route as recorded; the output handle records the addresses' creation stamps
  (:data:`~dmn.opcodes.ip.addresses.STAMPS`) and, for the claim's ``networkData``, the
  addresses (:data:`~dmn.vocabulary.handles.IP_ADDRESSES`).
* ``undo`` deletes the routes that match every recorded attribute, then the addresses whose
  creation stamp is the recorded one (without a recorded outcome: the carried addresses the
  link has — each was absent at capture and the gate holds the sandbox's containers until
  the attachment is Ready). An entry that is gone is left gone (the tenant removed it); a
  route changed or an address re-added by someone else is left in place, and undo raises
  ``E_ROUTE_NOT_OWNED`` / ``E_ADDRESS_NOT_OWNED`` after the rest is gone (quarantined; the
  move's undo still returns the link, and the kernel drops whatever is left on it). An
  address the tenant added of its own is never ours: it is neither deleted here nor carried
  back (the host gets exactly the move's record).
* ``recover``: Applied when every entry is there as recorded, NotApplied when none of the
  addresses is on the link and no carried route's key holds a route, Uncertain otherwise.
"""

from __future__ import annotations

import errno
import logging
from typing import Any

from dmn.host.errors import HostError
from dmn.host.rtnetlink.addresses import InterfaceAddress, delete_address, link_addresses
from dmn.host.rtnetlink.carried_config import (
    CarriedAddress,
    CarriedConfig,
    add_carried_address,
    add_carried_route,
)
from dmn.host.rtnetlink.links import LinkState
from dmn.host.rtnetlink.routes import RouteEntry, delete_route, routes_of
from dmn.opcodes.effect_handles import Outputs, environment, single
from dmn.opcodes.executor import EffectContext, ExecutorError, Observed, RecoveryObservation
from dmn.opcodes.ip import specs
from dmn.opcodes.ip.addresses import STAMPS, encode_stamps, foreign_secondaries, recorded_stamps
from dmn.opcodes.ip.granted_link import (
    captured,
    continued,
    proven,
    proven_for_recovery,
    proven_for_undo,
    proven_or_refused,
)
from dmn.opcodes.spec import OpcodeSpec
from dmn.vocabulary.handles import CARRIED_HOST_CONFIG, IP_ADDRESSES, Observation

_log = logging.getLogger("dmn.opcodes.ip.executors")

AddressKey = tuple[str, int]


def _record(before: Any) -> CarriedConfig:
    return CarriedConfig.from_json(before["carried"])


def _routes(carried: CarriedConfig, link: LinkState) -> list[RouteEntry]:
    return [route.on(link.index) for route in carried.routes]


def _live_addresses(ipr: Any, link: LinkState) -> dict[AddressKey, InterfaceAddress]:
    return {(a.address, a.prefixlen): a for a in link_addresses(ipr, link.index)}


def _live_routes(ipr: Any, carried: CarriedConfig) -> dict[Any, RouteEntry]:
    live: dict[Any, RouteEntry] = {}
    for family in sorted({r.route.family for r in carried.routes}):
        for entry in routes_of(ipr, family):
            live.setdefault(entry.key, entry)
    return live


def _refuse_taken(ipr: Any, link: LinkState, carried: CarriedConfig) -> None:
    have = {a.address for a in link_addresses(ipr, link.index)}
    for address in carried.addresses:
        if address.address in have:
            raise ExecutorError(
                "E_ADDRESS_EXISTS",
                f"the link already has {address.address}; an address this effect did not add "
                "is never adopted",
            )
    live = _live_routes(ipr, carried)
    for route in _routes(carried, link):
        if route.key in live:
            raise ExecutorError(
                "E_ROUTE_EXISTS",
                f"route {live[route.key].describe()} exists; one this effect did not add is "
                "never adopted",
            )


def _as_interface_address(address: CarriedAddress) -> InterfaceAddress:
    return InterfaceAddress(address.family, address.address, address.prefixlen)


class IpCarriedHostConfig:
    """``ip/carried-host-config/v1``."""

    spec: OpcodeSpec = specs.IP_CARRIED_HOST_CONFIG

    def capture(self, ctx: EffectContext) -> Any:
        specs.IpCarriedHostConfigParameters.model_validate(ctx.parameters)
        text = single(ctx, "interface").observations.get(CARRIED_HOST_CONFIG)
        if not isinstance(text, str):
            raise ExecutorError(
                "E_NOT_CARRIED",
                "the interface handle carries no host configuration: bind it from a "
                "linux/link-move/v1 effect with carryHostConfig true",
            )
        try:
            carried = CarriedConfig.decode(text)
        except (ValueError, KeyError, TypeError) as exc:
            raise ExecutorError(
                "E_NOT_CARRIED", f"the carried record is unreadable: {exc}"
            ) from exc
        env, ref, link, record = captured(ctx)
        _refuse_taken(env.rtnl(ref), link, carried)
        return {**record, "carried": carried.to_json()}

    def apply(self, ctx: EffectContext, before: Any) -> None:
        env = environment(ctx)
        ref, link = proven_or_refused(env, before)
        ipr = env.rtnl(ref)
        carried = _record(before)
        _refuse_taken(ipr, link, carried)
        added_addresses: list[CarriedAddress] = []
        added_routes: list[RouteEntry] = []
        try:
            for address in carried.addresses:
                add_carried_address(ipr, link.index, address)
                added_addresses.append(address)
            for route in carried.routes:
                add_carried_route(ipr, link.index, route)
                added_routes.append(route.on(link.index))
        except HostError as exc:
            self._take_back(ipr, link, added_addresses, added_routes)
            if exc.code == f"E_NETLINK_{errno.EEXIST}":
                what = "a route" if len(added_addresses) == len(carried.addresses) else "an address"
                code = "E_ROUTE_EXISTS" if what == "a route" else "E_ADDRESS_EXISTS"
                raise ExecutorError(code, f"{what} appeared while adding: {exc}") from exc
            raise

    def _take_back(
        self, ipr: Any, link: LinkState, addresses: list[CarriedAddress], routes: list[RouteEntry]
    ) -> None:
        """Delete what this apply added before it failed (each was refused had it been
        present; the sandbox's containers are held until the attachment is Ready)."""
        for route in reversed(routes):
            try:
                delete_route(ipr, route)
            except HostError:
                _log.warning("event=take-back-failed route=%s", route.describe(), exc_info=True)
        for address in reversed(addresses):
            try:
                delete_address(ipr, link.index, _as_interface_address(address))
            except HostError:
                _log.warning("event=take-back-failed address=%s", address.cidr, exc_info=True)

    def observe(self, ctx: EffectContext, before: Any) -> Observed:
        env = environment(ctx)
        ref, link = proven(env, before)
        if link is None:
            return Observed(False, detail="link is gone")
        ipr = env.rtnl(ref)
        carried = _record(before)
        live = _live_addresses(ipr, link)
        stamps: dict[AddressKey, int] = {}
        problems: list[str] = []
        for address in carried.addresses:
            found = live.get(address.key)
            if found is None:
                problems.append(f"{address.cidr} missing")
                continue
            if found.dad_failed:
                problems.append(f"{address.cidr} failed duplicate address detection")
            stamps[address.key] = found.created
        routes = _live_routes(ipr, carried)
        for route in _routes(carried, link):
            if routes.get(route.key) != route:
                state = "missing" if route.key not in routes else "differs"
                problems.append(f"route {route.describe()} {state}")
        extra: dict[str, Observation] = {
            STAMPS: encode_stamps(stamps),
            IP_ADDRESSES: " ".join(a.cidr for a in carried.addresses),
        }
        out = continued(ctx, env, ref, link, extra)
        return Observed(not problems, {"interface": (out,)}, "; ".join(problems))

    def recover(self, ctx: EffectContext, before: Any) -> RecoveryObservation:
        env = environment(ctx)
        proof = proven_for_recovery(env, before)
        if proof is None:
            return RecoveryObservation.UNCERTAIN
        ref, link = proof
        ipr = env.rtnl(ref)
        carried = _record(before)
        live = _live_addresses(ipr, link)
        routes = _live_routes(ipr, carried)
        wanted_routes = _routes(carried, link)
        addresses_there = [a for a in carried.addresses if a.key in live]
        if len(addresses_there) == len(carried.addresses) and all(
            routes.get(r.key) == r for r in wanted_routes
        ):
            return RecoveryObservation.APPLIED
        if not addresses_there and not any(r.key in routes for r in wanted_routes):
            return RecoveryObservation.NOT_APPLIED
        return RecoveryObservation.UNCERTAIN

    def undo(self, ctx: EffectContext, before: Any, outputs: Outputs) -> None:
        env = environment(ctx)
        proof = proven_for_undo(env, before, ctx.effect_id)
        if proof is None:
            return
        ref, link = proof
        ipr = env.rtnl(ref)
        carried = _record(before)
        refused = self._undo_routes(ctx, ipr, link, carried)
        refused += self._undo_addresses(ctx, ipr, link, carried, outputs)
        if refused:
            code = "E_ADDRESS_NOT_OWNED" if refused[-1][0] == "address" else "E_ROUTE_NOT_OWNED"
            raise ExecutorError(
                code, "left in place, not proven ours: " + "; ".join(why for _, why in refused)
            )

    def _undo_routes(
        self, ctx: EffectContext, ipr: Any, link: LinkState, carried: CarriedConfig
    ) -> list[tuple[str, str]]:
        live = _live_routes(ipr, carried)
        refused: list[tuple[str, str]] = []
        for route in reversed(_routes(carried, link)):
            found = live.get(route.key)
            if found is None:
                _log.info(
                    "effect=%s event=undo-skip route=%s reason=gone",
                    ctx.effect_id,
                    route.describe(),
                )
                continue
            if found != route:
                refused.append(("route", f"{route.describe()} was changed by someone else"))
                continue
            delete_route(ipr, route)
        return refused

    def _undo_addresses(
        self,
        ctx: EffectContext,
        ipr: Any,
        link: LinkState,
        carried: CarriedConfig,
        outputs: Outputs,
    ) -> list[tuple[str, str]]:
        all_live = link_addresses(ipr, link.index)
        live = {(a.address, a.prefixlen): a for a in all_live}
        stamps = recorded_stamps(outputs)
        ours: dict[AddressKey, InterfaceAddress] = {}
        refused: list[tuple[str, str]] = []
        for address in carried.addresses:
            found = live.get(address.key)
            if found is None:
                _log.info(
                    "effect=%s event=undo-skip address=%s reason=gone",
                    ctx.effect_id,
                    address.cidr,
                )
                continue
            if stamps is not None and stamps.get(address.key) != found.created:
                refused.append(
                    ("address", f"{address.cidr} was removed and added again by someone else")
                )
                continue
            ours[address.key] = found
        for address in reversed(carried.addresses):
            found = ours.get(address.key)
            if found is None:
                continue
            dependants = foreign_secondaries(found, all_live, ours)
            if dependants:
                refused.append(
                    (
                        "address",
                        f"{address.cidr} is the primary address of {', '.join(dependants)}, "
                        "which are not ours (the kernel would delete them with it)",
                    )
                )
                continue
            delete_address(ipr, link.index, found)
        return refused
