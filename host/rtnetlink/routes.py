"""Routes through one link as rtnetlink reports them, and their writes (``ip/routes``).

A route has no creation stamp and nothing else a tenant could not also write; what
identifies one is the kernel's key — family, table, destination prefix and metric (one
route per key without multipath) — and its attributes: gateway, preferred source, output
link, scope, protocol and type. :class:`RouteEntry` holds all of them, so a before-image
can record a route whole and undo can ask for exactly that route: the kernel deletes a
route only when every attribute sent with the request matches.

Contract: :func:`routes_of` returns the single-path unicast routes of one family in every
table of the socket's namespace; :func:`add_route` adds one with NLM_F_EXCL
(``E_NETLINK_17`` when its key is taken); :func:`delete_route` deletes the route matching
every attribute and says whether there was one. Kernel refusals are
:class:`~dmn.host.errors.HostError` with the errno.
"""

from __future__ import annotations

import errno
import ipaddress
from dataclasses import asdict, dataclass
from typing import Any

from dmn.host.errors import HostError
from dmn.host.rtnetlink.links import netlink_call

RTN_UNICAST = 1
RTPROT_KERNEL = 2
RTPROT_STATIC = 4
RTNH_F_ONLINK = 4
"""rtm_flags bit: the gateway is on the link even though no prefix of the link covers it."""
"""The protocol ``ip/routes`` writes: "installed by an administrator" (a label, not a proof:
anyone may write it)."""


@dataclass(frozen=True, slots=True)
class RouteEntry:
    """One single-path route: its key (family, table, destination, prefix length, metric)
    and attributes ("" for an absent address, 0 for an absent link)."""

    family: int
    table: int
    destination: str
    prefixlen: int
    metric: int
    gateway: str = ""
    source: str = ""
    oif: int = 0
    scope: int = 0
    protocol: int = RTPROT_STATIC
    kind: int = RTN_UNICAST

    @property
    def key(self) -> tuple[int, int, str, int, int]:
        return (self.family, self.table, self.destination, self.prefixlen, self.metric)

    def describe(self) -> str:
        via = f" via {self.gateway}" if self.gateway else ""
        return f"{self.destination}/{self.prefixlen}{via} table {self.table} metric {self.metric}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RouteEntry:
        return cls(**{k: type(v)(data[k]) for k, v in asdict(_EMPTY).items() if k in data})


_EMPTY = RouteEntry(0, 0, "", 0, 0)


def _canonical(raw: Any) -> str:
    return str(ipaddress.ip_address(raw)) if raw else ""


def _entry(msg: Any) -> RouteEntry | None:
    if msg.get_attr("RTA_MULTIPATH") is not None:
        return None
    family = int(msg["family"])
    table = msg.get_attr("RTA_TABLE")
    default = "0.0.0.0" if family == 2 else "::"
    return RouteEntry(
        family=family,
        table=int(table if table is not None else msg["table"]),
        destination=_canonical(msg.get_attr("RTA_DST") or default),
        prefixlen=int(msg["dst_len"]),
        metric=int(msg.get_attr("RTA_PRIORITY") or 0),
        gateway=_canonical(msg.get_attr("RTA_GATEWAY")),
        source=_canonical(msg.get_attr("RTA_PREFSRC")),
        oif=int(msg.get_attr("RTA_OIF") or 0),
        scope=int(msg["scope"]),
        protocol=int(msg["proto"]),
        kind=int(msg["type"]),
    )


def unicast_routes(ipr: Any, family: int) -> list[tuple[RouteEntry, Any]]:
    """Every single-path unicast route of ``family`` in the socket's namespace, with the
    kernel's message it was read from (for the attributes :class:`RouteEntry` leaves out)."""
    out = []
    for msg in netlink_call("read routes", ipr.get_routes, family=family):
        entry = _entry(msg)
        if entry is not None and entry.kind == RTN_UNICAST:
            out.append((entry, msg))
    return out


def routes_of(ipr: Any, family: int) -> list[RouteEntry]:
    """Every single-path unicast route of ``family`` in the socket's namespace."""
    return [entry for entry, _ in unicast_routes(ipr, family)]


def _fields(route: RouteEntry) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "family": route.family,
        "dst_len": route.prefixlen,
        "table": route.table,
        "priority": route.metric,
        "oif": route.oif,
        "proto": route.protocol,
        "scope": route.scope,
        "type": route.kind,
    }
    if route.prefixlen:
        fields["dst"] = route.destination
    if route.gateway:
        fields["gateway"] = route.gateway
    if route.source:
        fields["prefsrc"] = route.source
    return fields


def add_route(ipr: Any, route: RouteEntry, onlink: bool = False) -> None:
    """Add ``route`` (``onlink``: its gateway need not be covered by a prefix of the link)."""
    fields = _fields(route)
    if onlink:
        fields["flags"] = RTNH_F_ONLINK
    netlink_call(f"add route {route.describe()}", ipr.route, "add", **fields)


def delete_route(ipr: Any, route: RouteEntry) -> bool:
    """Delete the route matching every attribute of ``route``; False when none does."""
    try:
        netlink_call(f"delete route {route.describe()}", ipr.route, "del", **_fields(route))
    except HostError as exc:
        if exc.code in (f"E_NETLINK_{errno.ESRCH}", f"E_NETLINK_{errno.ENOENT}"):
            return False
        raise
    return True
