"""A link's host addresses and routes, recorded before the link leaves the host, so they can
go with it into a sandbox and come back with it (``carryHostConfig`` of a moved link).

Why a record of its own: the kernel drops a link's addresses — and with them every route
through it — the moment the link changes namespace, and gives none of it back on return.
What is worth carrying is what an administrator configured, not what the kernel makes by
itself:

* **addresses**: IPv4 and IPv6, scope global, permanent (no lifetime: not SLAAC, temporary
  or DHCP-leased ones with an expiry), not failed duplicate address detection, no IPv4 peer
  address. Each keeps its prefix length, the flags one can write (``nodad``,
  ``noprefixroute``, ``home``, ``mngtmpaddr``, ``autojoin``, ``optimistic``) and an IPv4
  broadcast address. IPv6 link-local addresses are left out: the kernel makes them again on
  every link that comes up. Not carried: IPv4 labels (the kernel names them after the link),
  lifetimes, peer addresses.
* **routes** whose output link is this link: single-path unicast routes of every table but
  the kernel's own (253 ``default``, 255 ``local``) that the kernel did not add by itself
  (protocol ``kernel``: the connected routes, made again with the addresses), did not learn
  (``ra``, ``redirect``) and that do not expire. Each keeps its key (family, table,
  destination, metric) and attributes (gateway, preferred source, scope, protocol, type)
  and the ``onlink`` flag. Not carried: multipath routes and routes through nexthop
  objects, route metrics (``mtu``, ``advmss``, ...), IPv6 route preference, policy rules.

The record is bounded (:data:`MAX_ADDRESSES`, :data:`MAX_ROUTES`): a link that holds more
is refused (``E_CARRY_TOO_LARGE``) rather than carried in part.

Contract: :func:`read_carried` reads the record of link ``index``; :func:`add_carried_address`
/ :func:`add_carried_route` write one entry on a link (its ifindex given: an ifindex is
never recorded as the place an entry goes back to); :func:`restore_addresses` and
:func:`restore_routes` put a record back on a returned link and never fail for an entry
that cannot go back — an identical one already there is left as it is (and not adopted:
nothing later deletes it), one whose key another entry holds is left to that entry, one the
kernel refuses is skipped — each reported in what they return.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import socket
from dataclasses import dataclass, replace
from typing import Any

from dmn.host.errors import HostError
from dmn.host.rtnetlink.addresses import IFA_F_DADFAILED, IFA_F_NODAD
from dmn.host.rtnetlink.links import netlink_call
from dmn.host.rtnetlink.routes import (
    RTNH_F_ONLINK,
    RTPROT_KERNEL,
    RouteEntry,
    add_route,
    unicast_routes,
)

IFA_F_OPTIMISTIC = 0x04
IFA_F_HOMEADDRESS = 0x10
IFA_F_PERMANENT = 0x80
IFA_F_MANAGETEMPADDR = 0x100
IFA_F_NOPREFIXROUTE = 0x200
IFA_F_MCAUTOJOIN = 0x400
WRITABLE_FLAGS = (
    IFA_F_NODAD
    | IFA_F_OPTIMISTIC
    | IFA_F_HOMEADDRESS
    | IFA_F_MANAGETEMPADDR
    | IFA_F_NOPREFIXROUTE
    | IFA_F_MCAUTOJOIN
)
"""The address flags a request may set; the others are the kernel's (secondary, tentative,
permanent, ...) and are never written."""

RT_SCOPE_UNIVERSE = 0
RTPROT_REDIRECT = 1
RTPROT_RA = 9
LEARNED_PROTOCOLS = frozenset({RTPROT_REDIRECT, RTPROT_KERNEL, RTPROT_RA})
KERNEL_TABLES = frozenset({253, 255})

MAX_ADDRESSES = 32
MAX_ROUTES = 64


@dataclass(frozen=True, slots=True)
class CarriedAddress:
    """One carried address: family, address, prefix length, writable flags, IPv4 broadcast
    ("" when none)."""

    family: int
    address: str
    prefixlen: int
    flags: int = 0
    broadcast: str = ""

    @property
    def cidr(self) -> str:
        return f"{self.address}/{self.prefixlen}"

    @property
    def key(self) -> tuple[str, int]:
        return (self.address, self.prefixlen)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "family": self.family,
            "address": self.address,
            "prefixlen": self.prefixlen,
        }
        if self.flags:
            out["flags"] = self.flags
        if self.broadcast:
            out["broadcast"] = self.broadcast
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CarriedAddress:
        return cls(
            int(data["family"]),
            str(ipaddress.ip_address(str(data["address"]))),
            int(data["prefixlen"]),
            int(data.get("flags", 0)) & WRITABLE_FLAGS,
            str(data.get("broadcast", "")),
        )


@dataclass(frozen=True, slots=True)
class CarriedRoute:
    """One carried route: the kernel's entry with no output link (the link it goes on is
    given when it is written) and the ``onlink`` flag."""

    route: RouteEntry
    onlink: bool = False

    def on(self, index: int) -> RouteEntry:
        """The route through link ``index``."""
        return replace(self.route, oif=index)

    def to_json(self) -> dict[str, Any]:
        out = self.route.to_json()
        del out["oif"]
        if self.onlink:
            out["onlink"] = True
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CarriedRoute:
        fields = {k: v for k, v in data.items() if k not in ("onlink", "oif")}
        return cls(replace(RouteEntry.from_json(fields), oif=0), bool(data.get("onlink", False)))


@dataclass(frozen=True, slots=True)
class CarriedConfig:
    """What a link carries: its addresses in the kernel's order (IPv4 primaries before their
    secondaries, so adding them in this order gives each its role again) and its routes."""

    addresses: tuple[CarriedAddress, ...] = ()
    routes: tuple[CarriedRoute, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "addresses": [a.to_json() for a in self.addresses],
            "routes": [r.to_json() for r in self.routes],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CarriedConfig:
        return cls(
            tuple(CarriedAddress.from_json(a) for a in data.get("addresses", ())),
            tuple(CarriedRoute.from_json(r) for r in data.get("routes", ())),
        )

    def encode(self) -> str:
        """Canonical JSON (the form a handle observation carries)."""
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def decode(cls, text: str) -> CarriedConfig:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("a carried configuration is a JSON object")
        return cls.from_json(data)


def _address_of(msg: Any, index: int) -> CarriedAddress | None:
    family = int(msg["family"])
    if family not in (socket.AF_INET, socket.AF_INET6) or int(msg["index"]) != index:
        return None
    if int(msg["scope"]) != RT_SCOPE_UNIVERSE:
        return None  # link-local (fe80::/10, 169.254/16 with scope link) and host scope
    raw_flags = msg.get_attr("IFA_FLAGS")
    flags = int(raw_flags if raw_flags is not None else msg["flags"])
    if not flags & IFA_F_PERMANENT or flags & IFA_F_DADFAILED:
        return None
    local = msg.get_attr("IFA_LOCAL") if family == socket.AF_INET else None
    address = msg.get_attr("IFA_ADDRESS")
    if local and address and ipaddress.ip_address(local) != ipaddress.ip_address(address):
        return None  # an IPv4 point-to-point address with a peer: not carried
    raw = local or address
    if not raw:
        return None
    broadcast = msg.get_attr("IFA_BROADCAST") if family == socket.AF_INET else None
    return CarriedAddress(
        family,
        str(ipaddress.ip_address(raw)),
        int(msg["prefixlen"]),
        flags & WRITABLE_FLAGS,
        str(broadcast or ""),
    )


def _carried_route(entry: RouteEntry, msg: Any, index: int) -> CarriedRoute | None:
    if entry.oif != index or entry.table in KERNEL_TABLES:
        return None
    if entry.protocol in LEARNED_PROTOCOLS or msg.get_attr("RTA_EXPIRES"):
        return None
    return CarriedRoute(replace(entry, oif=0), bool(int(msg["flags"]) & RTNH_F_ONLINK))


def read_carried(ipr: Any, index: int) -> CarriedConfig:
    """The addresses and routes link ``index`` would carry (see the module docstring).
    ``E_CARRY_TOO_LARGE`` when it holds more than the record's bounds."""
    addresses = []
    for msg in netlink_call("read addresses", ipr.get_addr, index=index):
        found = _address_of(msg, index)
        if found is not None:
            addresses.append(found)
    routes = []
    for family in (socket.AF_INET, socket.AF_INET6):
        for entry, msg in unicast_routes(ipr, family):
            carried = _carried_route(entry, msg, index)
            if carried is not None:
                routes.append(carried)
    if len(addresses) > MAX_ADDRESSES or len(routes) > MAX_ROUTES:
        raise HostError(
            "E_CARRY_TOO_LARGE",
            f"the link has {len(addresses)} addresses and {len(routes)} routes to carry; at "
            f"most {MAX_ADDRESSES} and {MAX_ROUTES} are carried",
        )
    return CarriedConfig(tuple(addresses), tuple(routes))


def add_carried_address(ipr: Any, index: int, address: CarriedAddress) -> None:
    """Add ``address`` to link ``index`` as recorded (permanent; ``E_NETLINK_17`` when the
    link has it)."""
    fields: dict[str, Any] = {
        "index": index,
        "family": address.family,
        "address": address.address,
        "prefixlen": address.prefixlen,
    }
    if address.flags:
        fields["flags"] = address.flags
    if address.broadcast:
        fields["broadcast"] = address.broadcast
    netlink_call(f"add address {address.cidr}", ipr.addr, "add", **fields)


def add_carried_route(ipr: Any, index: int, route: CarriedRoute) -> None:
    """Add ``route`` through link ``index`` (``E_NETLINK_17`` when its key is taken)."""
    add_route(ipr, route.on(index), onlink=route.onlink)


def restore_addresses(ipr: Any, index: int, carried: CarriedConfig) -> list[str]:
    """Put the recorded addresses back on returned link ``index``; what was not put back,
    and why."""
    present = {
        str(ipaddress.ip_address(m.get_attr("IFA_LOCAL") or m.get_attr("IFA_ADDRESS")))
        for m in netlink_call("read addresses", ipr.get_addr, index=index)
        if int(m["index"]) == index and (m.get_attr("IFA_LOCAL") or m.get_attr("IFA_ADDRESS"))
    }
    skipped = []
    for address in carried.addresses:
        if address.address in present:
            skipped.append(f"{address.cidr}: the link has it already")
            continue
        try:
            add_carried_address(ipr, index, address)
        except HostError as exc:
            skipped.append(f"{address.cidr}: {exc.code}")
    return skipped


def restore_routes(ipr: Any, index: int, carried: CarriedConfig) -> list[str]:
    """Put the recorded routes back through returned link ``index`` (after its addresses
    and with the link up, or the kernel refuses a gateway); what was not put back, and why.
    An identical route already there is left as it is; a route holding the key with other
    attributes is someone else's and is left in place."""
    live: dict[Any, RouteEntry] = {}
    for family in sorted({r.route.family for r in carried.routes}):
        for entry, _ in unicast_routes(ipr, family):
            live.setdefault(entry.key, entry)
    skipped = []
    for route in carried.routes:
        wanted = route.on(index)
        found = live.get(wanted.key)
        if found is not None:
            why = "an identical route is there" if found == wanted else "its key is taken"
            skipped.append(f"{wanted.describe()}: {why}")
            continue
        try:
            add_carried_route(ipr, index, route)
        except HostError as exc:
            code = exc.code
            if code == f"E_NETLINK_{errno.EEXIST}":
                code = "its key was taken meanwhile"
            skipped.append(f"{wanted.describe()}: {code}")
    return skipped
