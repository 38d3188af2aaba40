"""IP values a plugin's config and the ``ip/*`` opcodes share: one rule per kind of value.

Why here, at the bottom of the import graph: the ``ip/*`` opcode parameter models refuse a
bad address when a program runs, and a plugin's ``configSchema`` (``format:`` on a string,
``format: ip-route`` on an object) refuses the same value when an administrator's config is
validated — at the field, long before anything runs. Both call the functions below, so a
value is accepted or refused for the same reason everywhere (as :mod:`dmn.vocabulary.ifname`
does for interface names).

Each ``*_problem`` function says why a value is not acceptable, or returns None. A value is
ASCII text of bounded length, never a zone index (``%eth0``: a link-local scope has no
meaning in another namespace):

* a *host address* (a gateway, a preferred source, a neighbour) is one IPv4 or IPv6 address
  without a prefix that a link can use: not unspecified, loopback, multicast, the limited
  broadcast address, IPv6 link-local (the kernel makes those) or IPv4-mapped IPv6;
* an *interface address* is a host address with its prefix length (``10.0.0.2/24``), and not
  the network or IPv4 broadcast address of its subnet (except in /31, /32, /127, /128,
  which have none: RFC 3021, 6164);
* a *prefix* is a network with no host bits set, not multicast or loopback;
* a *route destination* is a prefix or ``default`` (its family then comes from the gateway);
* a *route* (:func:`route_problem`) keeps destination, gateway and source of one family,
  gives ``default`` a gateway, keeps off the kernel's own tables and uses ``scope`` only for
  IPv4 and only ``global`` through a gateway.

Pure: standard library only.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from collections.abc import Callable

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IpInterface = ipaddress.IPv4Interface | ipaddress.IPv6Interface
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

HOST_ADDRESS_LENGTH = (2, 45)
INTERFACE_ADDRESS_LENGTH = (3, 64)
DESTINATION_LENGTH = (3, 64)
MAIN_TABLE = 254
MAX_TABLE = 65535
RESERVED_TABLES = frozenset({0, 253, 255})
"""unspec, ``default`` and ``local``: the kernel's own tables are never written."""
IPV6_DEFAULT_METRIC = 1024
"""The metric the kernel gives an IPv6 route added without one (IPv4: 0)."""
ROUTE_SCOPES = ("global", "link")

_MAC = re.compile(r"[0-9a-f]{2}(:[0-9a-f]{2}){5}")


def _text_problem(value: object, bounds: tuple[int, int]) -> str | None:
    if not isinstance(value, str):
        return "must be a string"
    low, high = bounds
    if not low <= len(value) <= high:
        return f"{value[:80]!r} must be {low}-{high} characters long"
    if not value.isascii():
        return f"{value!r} is not ASCII"
    if "%" in value:
        return f"{value!r} carries a zone index (%...), which has no meaning in the Pod"
    return None


def unusable(address: IpAddress) -> str | None:
    """Why a link cannot carry ``address`` as a host address, or None."""
    if address.is_unspecified:
        return "is the unspecified address"
    if address.is_loopback:
        return "is a loopback address"
    if address.is_multicast:
        return "is a multicast address"
    if isinstance(address, ipaddress.IPv6Address):
        if address.is_link_local:
            return "is an IPv6 link-local address (the kernel makes those)"
        if address.ipv4_mapped is not None:
            return "is an IPv4-mapped IPv6 address"
    elif address == ipaddress.IPv4Address("255.255.255.255"):
        return "is the limited broadcast address"
    return None


def _host_address_problem(value: object) -> str | None:
    """A single host address, no prefix (a gateway, a preferred source, a neighbour)."""
    problem = _text_problem(value, HOST_ADDRESS_LENGTH)
    if problem is not None:
        return problem
    assert isinstance(value, str)
    if "/" in value:
        return f"{value!r}: a host address takes no prefix length"
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        return f"{value!r} is not an IPv4 or IPv6 address"
    problem = unusable(address)
    return None if problem is None else f"{value!r} {problem}"


def _interface_address_problem(value: object) -> str | None:
    """A host address with its prefix length, as a link carries it."""
    problem = _text_problem(value, INTERFACE_ADDRESS_LENGTH)
    if problem is not None:
        return problem
    assert isinstance(value, str)
    _, slash, prefix = value.partition("/")
    if not slash or not prefix.isdigit():
        return f"{value!r}: write the address with its prefix length (10.0.0.2/24)"
    try:
        iface = ipaddress.ip_interface(value)
    except ValueError:
        return f"{value!r} is not an IPv4 or IPv6 address with a prefix"
    problem = unusable(iface.ip)
    if problem is not None:
        return f"{value!r} {problem}"
    net = iface.network
    if net.num_addresses > 2:
        if iface.ip == net.network_address:
            return f"{value!r} is the network address of {net}, not a host address"
        if isinstance(net, ipaddress.IPv4Network) and iface.ip == net.broadcast_address:
            return f"{value!r} is the broadcast address of {net}"
    return None


def _prefix_problem(value: object) -> str | None:
    """A network prefix with no host bits set (``10.2.0.0/16``)."""
    problem = _text_problem(value, DESTINATION_LENGTH)
    if problem is not None:
        return problem
    assert isinstance(value, str)
    if "/" not in value:
        return f"{value!r}: write a prefix with its length (10.2.0.0/16)"
    try:
        ipaddress.ip_network(value, strict=False)
    except ValueError:
        return f"{value!r} is not an IPv4 or IPv6 prefix"
    try:
        net = ipaddress.ip_network(value)
    except ValueError:
        return f"{value!r} has host bits set (a prefix ends in zero bits)"
    if net.network_address.is_multicast or net.network_address.is_loopback:
        return f"{value!r} is a multicast or loopback prefix"
    return None


def _destination_problem(value: object) -> str | None:
    """``default`` or a network prefix with no host bits set."""
    if value == "default":
        return None
    problem = prefix_problem(value)
    if problem is not None and isinstance(value, str) and "/" not in value:
        return f"{value!r}: write a prefix (10.2.0.0/16) or 'default'"
    return problem


def _cached(check: Callable[[object], str | None]) -> Callable[[object], str | None]:
    """``check`` answered from a bounded cache for short strings: the checker asks about
    the same few values hundreds of thousands of times while it explores a configSchema's
    samples (and parsing an address is most of that time); anything longer than any valid
    value, or not a string, is checked afresh and never kept, so the cache stays small."""
    cached = functools.lru_cache(maxsize=4096)(check)

    def answer(value: object) -> str | None:
        if isinstance(value, str) and len(value) <= _CACHED_LENGTH:
            return cached(value)
        return check(value)

    answer.__doc__ = check.__doc__
    answer.__name__ = check.__name__.lstrip("_")
    return answer


_CACHED_LENGTH = 128

host_address_problem = _cached(_host_address_problem)
interface_address_problem = _cached(_interface_address_problem)
prefix_problem = _cached(_prefix_problem)
destination_problem = _cached(_destination_problem)


def unicast_mac_problem(value: object) -> str | None:
    """An Ethernet unicast MAC address, lower case (``02:00:00:00:00:01``)."""
    if not isinstance(value, str) or not _MAC.fullmatch(value):
        return f"{str(value)[:80]!r} is not a lower-case MAC address (02:00:00:00:00:01)"
    if int(value[:2], 16) & 1:
        return f"{value!r} is a multicast MAC address"
    if value == "00:00:00:00:00:00":
        return f"{value!r} is the zero MAC address"
    return None


def interface_of(value: str) -> IpInterface:
    """The parsed form of a valid interface address."""
    return ipaddress.ip_interface(value)


def address_of(value: str) -> IpAddress:
    """The parsed form of a valid host address."""
    return ipaddress.ip_address(value)


_parsed_network = functools.lru_cache(maxsize=4096)(ipaddress.ip_network)


def _network(destination: str) -> IpNetwork:
    """The parsed form of a valid prefix, cached for short ones (route keys are asked for
    again and again while a configSchema's samples are explored)."""
    if len(destination) <= _CACHED_LENGTH:
        return _parsed_network(destination)
    return ipaddress.ip_network(destination)


def route_version(destination: str, gateway: str | None) -> int:
    """The family of a valid route: its destination's, or its gateway's for ``default``."""
    if destination != "default":
        return _network(destination).version
    assert gateway is not None
    return address_of(gateway).version


def route_network(destination: str, gateway: str | None) -> IpNetwork:
    """The destination of a valid route as a network (``default`` is the family's /0)."""
    if destination == "default":
        four = route_version(destination, gateway) == 4
        return _network("0.0.0.0/0" if four else "::/0")
    return _network(destination)


def route_key(
    destination: str, gateway: str | None, table: int | None, metric: int | None
) -> tuple[IpNetwork, int, int]:
    """The kernel's key of a valid route: destination, table and metric (defaults resolved)."""
    version = route_version(destination, gateway)
    resolved_metric = metric if metric is not None else (0 if version == 4 else 1024)
    return (
        route_network(destination, gateway),
        MAIN_TABLE if table is None else table,
        resolved_metric,
    )


@functools.lru_cache(maxsize=4096)
def route_problem(
    destination: str,
    gateway: str | None = None,
    source: str | None = None,
    table: int | None = None,
    scope: str | None = None,
) -> str | None:
    """Why a route whose fields are each valid is not a route the kernel takes, or None."""
    if table is not None and table in RESERVED_TABLES:
        return f"table {table} is the kernel's own (253 default, 255 local)"
    versions = {address_of(v).version for v in (gateway, source) if v is not None}
    if destination == "default":
        if gateway is None:
            return "a default route needs a gateway (or write 0.0.0.0/0 or ::/0)"
    else:
        versions.add(_network(destination).version)
    if len(versions) != 1:
        return f"route to {destination}: destination, gateway and source must be of one family"
    if scope is not None and versions == {6}:
        return "scope applies to IPv4 routes only (the kernel ignores it for IPv6)"
    if scope == "link" and gateway is not None:
        return "a route through a gateway cannot have link scope"
    return None
