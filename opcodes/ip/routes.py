"""Executor of ``ip/routes/v1``: routes added through a granted sandbox link.

A route is known by the kernel's key (family, table, destination prefix, metric) and its
attributes (gateway, preferred source, output link, scope, protocol, type); the
before-image records every one of them for each route, with the link's ifindex in the
recorded namespace as the output link (:mod:`granted_link` proves the link is still the
recorded one before every later step).

* ``capture`` refuses (``E_ROUTE_EXISTS``) when a route with one of the keys exists: a
  route this effect did not add is never adopted.
* ``apply`` proves the link, refuses again if a key was taken since, and adds the routes
  with protocol ``static``; if the kernel refuses one (``E_NETLINK_101``: the gateway is
  not reachable through the link), the routes this call added are deleted first.
* ``observe``: every recorded route is in the namespace exactly as recorded.
* ``undo`` deletes, in the recorded namespace and only while the link proves to be the
  recorded one, each route that matches every recorded key and attribute (the kernel
  deletes only a route matching everything the request names). A route that is gone is
  left gone; one with the same key and other attributes was changed by someone else and
  is left in place, and undo then raises ``E_ROUTE_NOT_OWNED`` (quarantined) after the
  others are gone.
* ``recover``: Applied when every route is there as recorded, NotApplied when no key is
  taken, Uncertain otherwise.

Limit (stated, not hidden): a route carries nothing a tenant cannot write, so a tenant that
deletes one of our routes and adds it again with every attribute identical (protocol
``static`` included) is not told apart; undo then deletes that identical route.
"""

from __future__ import annotations

import logging
import socket
from typing import Any

from dmn.host.errors import HostError
from dmn.host.rtnetlink.link_identity import NAMESPACE_LOST
from dmn.host.rtnetlink.routes import (
    RTPROT_STATIC,
    RouteEntry,
    add_route,
    delete_route,
    routes_of,
)
from dmn.opcodes.effect_handles import Outputs, environment
from dmn.opcodes.executor import EffectContext, ExecutorError, Observed, RecoveryObservation
from dmn.opcodes.ip import specs
from dmn.opcodes.ip.granted_link import captured, continued, proven, proven_or_refused
from dmn.opcodes.spec import OpcodeSpec

_log = logging.getLogger("dmn.opcodes.ip.executors")

Key = tuple[int, int, str, int, int]


def entry_of(route: specs.Route, oif: int) -> RouteEntry:
    """The kernel route a validated parameter entry asks for, through link ``oif``."""
    network = route.network()
    return RouteEntry(
        family=int(socket.AF_INET if route.version == 4 else socket.AF_INET6),
        table=route.resolved_table(),
        destination=str(network.network_address),
        prefixlen=network.prefixlen,
        metric=route.resolved_metric(),
        gateway=str(specs.address_of(route.gateway)) if route.gateway else "",
        source=str(specs.address_of(route.source)) if route.source else "",
        oif=oif,
        scope=route.resolved_scope(),
        protocol=RTPROT_STATIC,
    )


def _recorded(before: Any) -> list[RouteEntry]:
    return [RouteEntry.from_json(r) for r in before["routes"]]


def _live(ipr: Any, routes: list[RouteEntry]) -> dict[Key, RouteEntry]:
    out: dict[Key, RouteEntry] = {}
    for family in sorted({r.family for r in routes}):
        for entry in routes_of(ipr, family):
            out.setdefault(entry.key, entry)
    return out


def _refuse_taken(live: dict[Key, RouteEntry], routes: list[RouteEntry]) -> None:
    for route in routes:
        if route.key in live:
            raise ExecutorError(
                "E_ROUTE_EXISTS",
                f"a route to {route.destination}/{route.prefixlen} in table {route.table} "
                f"with metric {route.metric} exists; a route this effect did not add is "
                "never adopted",
            )


class IpRoutes:
    """``ip/routes/v1``."""

    spec: OpcodeSpec = specs.IP_ROUTES

    def capture(self, ctx: EffectContext) -> Any:
        parameters = specs.IpRoutesParameters.model_validate(ctx.parameters)
        env, ref, link, record = captured(ctx)
        routes = [entry_of(route, link.index) for route in parameters.routes]
        _refuse_taken(_live(env.rtnl(ref), routes), routes)
        return {**record, "routes": [r.to_json() for r in routes]}

    def apply(self, ctx: EffectContext, before: Any) -> None:
        env = environment(ctx)
        ref, _ = proven_or_refused(env, before)
        ipr = env.rtnl(ref)
        routes = _recorded(before)
        _refuse_taken(_live(ipr, routes), routes)
        added: list[RouteEntry] = []
        try:
            for route in routes:
                add_route(ipr, route)
                added.append(route)
        except HostError as exc:
            for route in reversed(added):
                try:
                    delete_route(ipr, route)
                except HostError:
                    _log.warning("event=take-back-failed route=%s", route.describe())
            if exc.code == "E_NETLINK_17":
                raise ExecutorError(
                    "E_ROUTE_EXISTS", f"a route appeared while adding: {exc}"
                ) from exc
            raise

    def observe(self, ctx: EffectContext, before: Any) -> Observed:
        env = environment(ctx)
        ref, link = proven(env, before)
        if link is None:
            return Observed(False, detail="link is gone")
        routes = _recorded(before)
        live = _live(env.rtnl(ref), routes)
        problems = [
            f"{route.describe()} {'missing' if route.key not in live else 'differs'}"
            for route in routes
            if live.get(route.key) != route
        ]
        out = continued(ctx, env, ref, link)
        return Observed(not problems, {"interface": (out,)}, "; ".join(problems))

    def recover(self, ctx: EffectContext, before: Any) -> RecoveryObservation:
        env = environment(ctx)
        try:
            ref, link = proven(env, before)
        except HostError:
            return RecoveryObservation.UNCERTAIN
        if link is None:
            return RecoveryObservation.UNCERTAIN
        routes = _recorded(before)
        live = _live(env.rtnl(ref), routes)
        if all(live.get(r.key) == r for r in routes):
            return RecoveryObservation.APPLIED
        if not any(r.key in live for r in routes):
            return RecoveryObservation.NOT_APPLIED
        return RecoveryObservation.UNCERTAIN

    def undo(self, ctx: EffectContext, before: Any, outputs: Outputs) -> None:
        env = environment(ctx)
        try:
            ref, link = proven(env, before)
        except HostError as exc:
            if exc.code not in NAMESPACE_LOST:
                raise
            _log.info("effect=%s event=undo-noop reason=%s", ctx.effect_id, exc.code)
            return
        if link is None:
            # routes through a link leave with it
            _log.warning("effect=%s event=undo-skip reason=link-gone", ctx.effect_id)
            return
        ipr = env.rtnl(ref)
        routes = _recorded(before)
        live = _live(ipr, routes)
        refused: list[str] = []
        for route in reversed(routes):
            found = live.get(route.key)
            if found is None:
                _log.info(
                    "effect=%s event=undo-skip route=%s reason=gone",
                    ctx.effect_id,
                    route.describe(),
                )
                continue
            if found != route:
                refused.append(f"{route.describe()} was changed by someone else")
                continue
            delete_route(ipr, route)
        if refused:
            raise ExecutorError(
                "E_ROUTE_NOT_OWNED", "left in place, not proven ours: " + "; ".join(refused)
            )
