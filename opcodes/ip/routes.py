"""Executor of ``ip/routes/v1``: routes added through a granted sandbox link.

A route is known by the kernel's key (family, table, destination prefix, metric) and its
attributes (gateway, preferred source, output link, scope, protocol, type); the
before-image records every one of them for each route, with the link's ifindex in the
recorded namespace as the output link, and the kernel deletes a route only when every
attribute the request names matches. The lifecycle (refuse a taken key, take back on
failure, undo only what matches every attribute, ``E_ROUTE_EXISTS`` /
``E_ROUTE_NOT_OWNED``) is :class:`~dmn.opcodes.ip.keyed_entries.KeyedEntries`'; a kernel
refusal of a gateway the link cannot reach is ``E_NETLINK_101``.

Two interfaces of one template in one Pod ask for the same routes, and the kernel takes one
route per key: a route through a gateway that the sandbox already has, identical in every
attribute but its output link, which is another of the sandbox's links, already leads
where this one asks. It is recorded as shared — not added, never adopted, never removed by
this effect's undo (so it goes with the interface whose effect added it). A route with the
key and any other attribute still refuses ``E_ROUTE_EXISTS``; so does an identical route
without a gateway (an on-link route belongs to its own link).
"""

from __future__ import annotations

import socket
from collections.abc import Hashable
from dataclasses import replace
from typing import Any

from dmn.host.rtnetlink.links import LinkState
from dmn.host.rtnetlink.routes import (
    RTPROT_STATIC,
    RouteEntry,
    add_route,
    delete_route,
    routes_of,
)
from dmn.opcodes.executor import EffectContext
from dmn.opcodes.ip import specs
from dmn.opcodes.ip.keyed_entries import KeyedEntries
from dmn.opcodes.spec import OpcodeSpec
from dmn.vocabulary.ip_values import address_of


def entry_of(route: specs.Route, oif: int) -> RouteEntry:
    """The kernel route a validated parameter entry asks for, through link ``oif``."""
    network = route.network()
    return RouteEntry(
        family=int(socket.AF_INET if route.version == 4 else socket.AF_INET6),
        table=route.resolved_table(),
        destination=str(network.network_address),
        prefixlen=network.prefixlen,
        metric=route.resolved_metric(),
        gateway=str(address_of(route.gateway)) if route.gateway else "",
        source=str(address_of(route.source)) if route.source else "",
        oif=oif,
        scope=route.resolved_scope(),
        protocol=RTPROT_STATIC,
    )


class IpRoutes(KeyedEntries[RouteEntry]):
    """``ip/routes/v1``."""

    spec: OpcodeSpec = specs.IP_ROUTES
    what = "route"
    exists_code = "E_ROUTE_EXISTS"
    not_owned_code = "E_ROUTE_NOT_OWNED"

    def wanted(self, ctx: EffectContext, link: LinkState) -> list[RouteEntry]:
        parameters = specs.IpRoutesParameters.model_validate(ctx.parameters)
        return [entry_of(route, link.index) for route in parameters.routes]

    def from_json(self, data: dict[str, Any]) -> RouteEntry:
        return RouteEntry.from_json(data)

    def live(
        self, ipr: Any, link: LinkState, entries: list[RouteEntry]
    ) -> dict[Hashable, RouteEntry]:
        out: dict[Hashable, RouteEntry] = {}
        for family in sorted({r.family for r in entries}):
            for entry in routes_of(ipr, family):
                out.setdefault(entry.key, entry)
        return out

    def add(self, ipr: Any, entry: RouteEntry, over: RouteEntry | None) -> None:
        add_route(ipr, entry)

    def delete(self, ipr: Any, entry: RouteEntry) -> bool:
        return delete_route(ipr, entry)

    def shares(self, found: RouteEntry, entry: RouteEntry, link: LinkState) -> bool:
        return (
            bool(entry.gateway)
            and found.oif not in (0, link.index)
            and replace(found, oif=entry.oif) == entry
        )

    def describe(self, entry: RouteEntry) -> str:
        return entry.describe()
