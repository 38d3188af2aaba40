"""``ip/*`` opcodes: the layer-3 configuration of a link the call holds in its sandbox.

Why a family of its own: a Pod's ``net1`` is useful only with an address and routes, and
those are kernel objects of their own (not link attributes), each with its own lifecycle,
before-image and proof of ownership. Every ``ip/*`` opcode takes the link only from the
granted handle (``interface``: ``KernelInterface/v1``, ``ExclusiveConfigure``, sandbox
scope) — never a namespace, path or device name from configuration — and runs in
``connect``, where the verified sandbox exists. Each outputs the same link (``inherits``)
so the next effect can continue with it: an exclusive grant is used once per effect.

Parameters are typed values, not free strings: an address is a host address with its
prefix (not the network or broadcast address of its subnet, not multicast, loopback,
unspecified or IPv6 link-local); a route destination is a network prefix with no host
bits set, or ``default`` (its family then comes from the gateway). A payload that breaks
a rule is refused by the model with a message that names the value, so the checker
reports it as ``E_PARAM_TYPE`` at the parameter, never as a traceback.
"""

from __future__ import annotations

import dataclasses
import ipaddress
from typing import Annotated, Literal

from pydantic import AfterValidator, ConfigDict, Field, model_validator

from dmn.opcodes.link_settings_contract import link_settings_spec
from dmn.opcodes.parameter_types import ParameterModel
from dmn.opcodes.spec import OpcodeSpec
from dmn.vocabulary.terms import (
    LinkType,
)

IpInterface = ipaddress.IPv4Interface | ipaddress.IPv6Interface
IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

MAX_ADDRESSES = 16
MAX_ROUTES = 32
MAIN_TABLE = 254
RESERVED_TABLES = frozenset({0, 253, 255})
"""unspec, ``default`` and ``local``: the kernel's own tables are never written."""
MAX_TABLE = 65535
IPV6_DEFAULT_METRIC = 1024
"""The metric the kernel gives an IPv6 route added without one (IPv4: 0); a route's metric
is part of its key, so the executor always sends it."""


def _unusable(address: IpAddress) -> str | None:
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


def _check_host_address(value: str) -> str:
    """A single host address, no prefix (a gateway or a preferred source)."""
    if "/" in value:
        raise ValueError(f"{value!r}: a host address takes no prefix length")
    try:
        address = ipaddress.ip_address(value)
    except ValueError:
        raise ValueError(f"{value!r} is not an IPv4 or IPv6 address") from None
    problem = _unusable(address)
    if problem is not None:
        raise ValueError(f"{value!r} {problem}")
    return value


def _check_interface_address(value: str) -> str:
    """A host address with its prefix length, as a link carries it."""
    _, slash, prefix = value.partition("/")
    if not slash or not prefix.isdigit():
        raise ValueError(f"{value!r}: write the address with its prefix length (10.0.0.2/24)")
    try:
        iface = ipaddress.ip_interface(value)
    except ValueError:
        raise ValueError(f"{value!r} is not an IPv4 or IPv6 address with a prefix") from None
    problem = _unusable(iface.ip)
    if problem is not None:
        raise ValueError(f"{value!r} {problem}")
    net = iface.network
    # /31, /32, /127, /128 have no network or broadcast address to avoid (RFC 3021, 6164)
    if net.num_addresses > 2:
        if iface.ip == net.network_address:
            raise ValueError(f"{value!r} is the network address of {net}, not a host address")
        if isinstance(net, ipaddress.IPv4Network) and iface.ip == net.broadcast_address:
            raise ValueError(f"{value!r} is the broadcast address of {net}")
    return value


def _check_destination(value: str) -> str:
    """``default`` or a network prefix with no host bits set."""
    if value == "default":
        return value
    if "/" not in value:
        raise ValueError(f"{value!r}: write a prefix (10.2.0.0/16) or 'default'")
    try:
        ipaddress.ip_network(value, strict=False)
    except ValueError:
        raise ValueError(f"{value!r} is not an IPv4 or IPv6 prefix") from None
    try:
        net = ipaddress.ip_network(value)
    except ValueError:
        raise ValueError(f"{value!r} has host bits set (a prefix ends in zero bits)") from None
    if net.network_address.is_multicast or net.network_address.is_loopback:
        raise ValueError(f"{value!r} is a multicast or loopback prefix")
    return value


InterfaceAddress = Annotated[
    str, Field(min_length=3, max_length=64), AfterValidator(_check_interface_address)
]
"""A host address with its prefix length (``10.0.0.2/24``, ``fd00::2/64``)."""

HostAddress = Annotated[
    str, Field(min_length=2, max_length=45), AfterValidator(_check_host_address)
]
"""One IPv4 or IPv6 host address without a prefix (a gateway, a preferred source)."""

RouteDestination = Annotated[
    str, Field(min_length=3, max_length=64), AfterValidator(_check_destination)
]
"""``default``, or a network prefix with no host bits set (``10.2.0.0/16``)."""

RouteTable = Annotated[int, Field(ge=1, le=MAX_TABLE)]
"""A routing table id; ``main`` (254) by default; 253 (``default``) and 255 (``local``) are
the kernel's own and refused."""

RouteMetric = Annotated[int, Field(ge=0, le=2**32 - 1)]


def interface_of(value: str) -> IpInterface:
    """The parsed form of a validated :data:`InterfaceAddress`."""
    return ipaddress.ip_interface(value)


def address_of(value: str) -> IpAddress:
    """The parsed form of a validated :data:`HostAddress`."""
    return ipaddress.ip_address(value)


class IpAddressesParameters(ParameterModel):
    """The addresses to add to the link (1-16, IPv4 and IPv6, each a host address with its
    prefix length, no two the same address) and ``nodad``: add the IPv6 ones without
    duplicate address detection (only when there is an IPv6 address)."""

    addresses: list[InterfaceAddress] = Field(min_length=1, max_length=MAX_ADDRESSES)
    nodad: bool = False

    @model_validator(mode="after")
    def _coherent(self) -> IpAddressesParameters:
        seen: set[IpAddress] = set()
        for value in self.addresses:
            ip = interface_of(value).ip
            if ip in seen:
                raise ValueError(f"address {ip} is listed twice")
            seen.add(ip)
        if self.nodad and not any(ip.version == 6 for ip in seen):
            raise ValueError("nodad applies to IPv6 addresses only; there is none")
        return self

    def interfaces(self) -> list[IpInterface]:
        return [interface_of(value) for value in self.addresses]


RouteScope = Literal["global", "link"]
SCOPE_NUMBERS = {"global": 0, "link": 253}
"""rtnetlink's scope numbers (RT_SCOPE_UNIVERSE, RT_SCOPE_LINK)."""


class Route(ParameterModel):
    """One route through the link: ``destination`` (a prefix or ``default``), ``gateway``
    (optional, same family), ``source`` (optional preferred source address), ``metric``
    (optional; the kernel's default, 0 for IPv4 and 1024 for IPv6, is written out),
    ``table`` (optional, 1-65535 but 253 and 255; ``main`` by default) and ``scope``
    (IPv4 only: ``link`` without a gateway by default, ``global`` with one)."""

    destination: RouteDestination
    gateway: HostAddress | None = None
    source: HostAddress | None = None
    metric: RouteMetric | None = None
    table: RouteTable | None = None
    scope: RouteScope | None = None

    @model_validator(mode="after")
    def _coherent(self) -> Route:
        if self.table is not None and self.table in RESERVED_TABLES:
            raise ValueError(f"table {self.table} is the kernel's own (253 default, 255 local)")
        versions = {address_of(v).version for v in (self.gateway, self.source) if v is not None}
        if self.destination == "default":
            if self.gateway is None:
                raise ValueError("a default route needs a gateway (or write 0.0.0.0/0 or ::/0)")
        else:
            versions.add(ipaddress.ip_network(self.destination).version)
        if len(versions) != 1:
            raise ValueError(
                f"route to {self.destination}: destination, gateway and source "
                "must be of one family"
            )
        if self.scope is not None and versions == {6}:
            raise ValueError("scope applies to IPv4 routes only (the kernel ignores it for IPv6)")
        if self.scope == "link" and self.gateway is not None:
            raise ValueError("a route through a gateway cannot have link scope")
        return self

    @property
    def version(self) -> int:
        if self.destination != "default":
            return ipaddress.ip_network(self.destination).version
        assert self.gateway is not None  # the validator requires it
        return address_of(self.gateway).version

    def network(self) -> IpNetwork:
        if self.destination == "default":
            return ipaddress.ip_network("0.0.0.0/0" if self.version == 4 else "::/0")
        return ipaddress.ip_network(self.destination)

    def resolved_metric(self) -> int:
        if self.metric is not None:
            return self.metric
        return 0 if self.version == 4 else IPV6_DEFAULT_METRIC

    def resolved_table(self) -> int:
        return MAIN_TABLE if self.table is None else self.table

    def resolved_scope(self) -> int:
        if self.version == 6:
            return 0
        if self.scope is not None:
            return SCOPE_NUMBERS[self.scope]
        return SCOPE_NUMBERS["global" if self.gateway is not None else "link"]


class IpRoutesParameters(ParameterModel):
    """The routes to add through the link (1-32, IPv4 and IPv6), each an object of
    ``destination`` (a prefix with no host bits set, or ``default``, which needs a
    ``gateway``), and optional ``gateway`` and ``source`` (host addresses of the same
    family), ``metric`` (0..2^32-1; 0 for IPv4, 1024 for IPv6 when absent), ``table``
    (1..65535 but 253 and 255; main, 254, when absent) and ``scope`` (IPv4 only: ``global``
    or ``link``; ``link`` without a gateway, ``global`` with one, when absent). No two may
    share a destination, table and metric (the kernel's key of a route)."""

    routes: list[Route] = Field(min_length=1, max_length=MAX_ROUTES)

    @model_validator(mode="after")
    def _distinct(self) -> IpRoutesParameters:
        seen: set[tuple[IpNetwork, int, int]] = set()
        for route in self.routes:
            key = (route.network(), route.resolved_table(), route.resolved_metric())
            if key in seen:
                raise ValueError(f"two routes to {key[0]} in table {key[1]} with metric {key[2]}")
            seen.add(key)
        return self


def _check_mac(value: str) -> str:
    octets = value.split(":")
    if int(octets[0], 16) & 1:
        raise ValueError(f"{value!r} is a multicast MAC address")
    if value == "00:00:00:00:00:00":
        raise ValueError(f"{value!r} is the zero MAC address")
    return value


UnicastMac = Annotated[
    str, Field(pattern=r"^[0-9a-f]{2}(:[0-9a-f]{2}){5}$"), AfterValidator(_check_mac)
]
"""An Ethernet unicast MAC address, lower case (``02:00:00:00:00:01``)."""

MAX_NEIGHBOURS = 16


class Neighbour(ParameterModel):
    """One static neighbour: its IP ``address`` (a host address) and its ``lladdr``."""

    address: HostAddress
    lladdr: UnicastMac


class IpNeighboursParameters(ParameterModel):
    """Permanent neighbour entries on the link (1-16, IPv4 and IPv6), each an ``address``
    (a host address) and the ``lladdr`` (an Ethernet unicast MAC, lower case) it resolves
    to; no address twice."""

    neighbours: list[Neighbour] = Field(min_length=1, max_length=MAX_NEIGHBOURS)

    @model_validator(mode="after")
    def _distinct(self) -> IpNeighboursParameters:
        seen: set[IpAddress] = set()
        for entry in self.neighbours:
            ip = address_of(entry.address)
            if ip in seen:
                raise ValueError(f"neighbour {ip} is listed twice")
            seen.add(ip)
        return self


MAX_RULES = 16
RulePriority = Annotated[int, Field(ge=1, le=32765)]
"""A rule priority; 0 (``local``), 32766 (``main``) and 32767 (``default``) are the
kernel's own rules."""


class Rule(ParameterModel):
    """One policy routing rule: ``priority`` (1-32765, free in the sandbox), ``from`` and/or
    ``to`` (prefixes with no host bits set, one family), ``table`` (as a route's) and
    ``iif``/``oif`` (match the granted interface as the input or output link)."""

    model_config = ConfigDict(**{**ParameterModel.model_config, "serialize_by_alias": True})

    priority: RulePriority
    from_: RouteDestination | None = Field(default=None, alias="from")
    to: RouteDestination | None = None
    table: RouteTable
    iif: bool = False
    oif: bool = False

    @model_validator(mode="after")
    def _coherent(self) -> Rule:
        if self.table in RESERVED_TABLES:
            raise ValueError(f"table {self.table} is the kernel's own (253 default, 255 local)")
        prefixes = [p for p in (self.from_, self.to) if p is not None]
        if not prefixes:
            raise ValueError(f"rule {self.priority}: set from and/or to (they give the family)")
        if "default" in prefixes:
            raise ValueError(f"rule {self.priority}: from/to take a prefix, not 'default'")
        if len({ipaddress.ip_network(p).version for p in prefixes}) != 1:
            raise ValueError(f"rule {self.priority}: from and to must be of one family")
        return self

    @property
    def version(self) -> int:
        prefix = self.from_ if self.from_ is not None else self.to
        assert prefix is not None  # the validator requires one
        return ipaddress.ip_network(prefix).version


class IpRulesParameters(ParameterModel):
    """Policy routing rules (1-16) sending matching traffic to a table; no two of one family
    share a priority."""

    rules: list[Rule] = Field(min_length=1, max_length=MAX_RULES)

    @model_validator(mode="after")
    def _distinct(self) -> IpRulesParameters:
        seen: set[tuple[int, int]] = set()
        for rule in self.rules:
            key = (rule.version, rule.priority)
            if key in seen:
                raise ValueError(f"two IPv{key[0]} rules with priority {key[1]}")
            seen.add(key)
        return self


_ANY_LINK = frozenset({LinkType.ETHERNET, LinkType.INFINIBAND})
_ETHERNET = frozenset({LinkType.ETHERNET})
IP_ADDRESSES = link_settings_spec(
    name="ip/addresses/v1",
    summary="Add IPv4/IPv6 addresses to a sandbox link the call exclusively configures.",
    changes=(
        "Adds each listed address (with its prefix; IPv6 optionally without duplicate "
        "address detection) to the granted link inside the Pod's namespace; the kernel adds "
        "the prefix's connected route. Refused, with nothing changed, when the link already "
        "has one of the addresses."
    ),
    undo=(
        "Deletes exactly the addresses it added, each proven by the link's recorded identity "
        "and the address's kernel creation stamp; an address someone removed is left "
        "removed, one re-added or replaced by someone else is left in place and the effect "
        "quarantined."
    ),
    parameters=IpAddressesParameters,
    link_types=_ANY_LINK,
    precondition="addresses-absent",
    postcondition="addresses-present",
)

IP_ROUTES = link_settings_spec(
    name="ip/routes/v1",
    summary="Add IPv4/IPv6 routes through a sandbox link the call exclusively configures.",
    changes=(
        "Adds each listed route (destination, optional gateway, preferred source, metric, "
        "table and scope) through the granted link inside the Pod's namespace, with "
        "protocol `static`. Refused, with nothing changed, when a route with the same "
        "destination, table and metric exists."
    ),
    undo=(
        "Deletes exactly the routes it added, each matched by every recorded key (family, "
        "table, destination, metric, gateway, source, scope, protocol, and the link's "
        "recorded ifindex in the recorded namespace); a route someone removed is left "
        "removed, one changed by someone else is left in place and the effect quarantined."
    ),
    parameters=IpRoutesParameters,
    link_types=_ANY_LINK,
    precondition="routes-absent",
    postcondition="routes-present",
)

IP_NEIGHBOURS = link_settings_spec(
    name="ip/neighbours/v1",
    summary="Add permanent neighbour entries on a sandbox Ethernet link the call configures.",
    changes=(
        "Adds a permanent neighbour entry (IP address to MAC address) for each listed "
        "neighbour on the granted Ethernet link inside the Pod's namespace, over an entry "
        "the kernel learned by itself. Refused, with nothing changed, when the link has a "
        "permanent or no-ARP entry for one of the addresses."
    ),
    undo=(
        "Deletes exactly the entries it added, each matched by the link's recorded identity "
        "in the recorded namespace, the address, the MAC address and the permanent state; "
        "an entry someone removed is left removed, one changed by someone else is left in "
        "place and the effect quarantined."
    ),
    parameters=IpNeighboursParameters,
    link_types=_ETHERNET,
    precondition="neighbours-absent",
    postcondition="neighbours-present",
)

IP_RULES = link_settings_spec(
    name="ip/rules/v1",
    summary="Add policy routing rules in the sandbox, matching the granted link by name.",
    changes=(
        "Adds each listed policy routing rule (priority, from/to prefixes, table, and "
        "optionally the granted link as input or output interface, by its name at capture) "
        "to the Pod's namespace, with protocol `static`. Refused, with nothing changed, when "
        "a rule of the family holds one of the priorities."
    ),
    undo=(
        "Deletes exactly the rules it added, each matched by every recorded attribute, in the "
        "recorded namespace while the link proves to be the recorded one; a rule someone "
        "removed is left removed, one changed by someone else is left in place and the "
        "effect quarantined."
    ),
    parameters=IpRulesParameters,
    link_types=_ANY_LINK,
    precondition="rules-absent",
    postcondition="rules-present",
)

PoolName = Annotated[
    str, Field(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
]
"""An IPPool's name (a DNS label)."""


class IpPoolAddressesParameters(ParameterModel):
    """``pool``: the IPPool the link's addresses come from (a DNS label); ``address``: an
    optional static address (no prefix) from one of the pool's reserved ranges, taken for its
    family instead of the next free one (the allocator refuses one outside them)."""

    pool: PoolName
    address: HostAddress | None = None


IP_POOL_ADDRESSES = dataclasses.replace(
    link_settings_spec(
        name="ip/pool-addresses/v1",
        summary="Give a sandbox link an address per family of an IPPool, and the pool's routes.",
        changes=(
            "Creates one IPAllocation per family of the named IPPool (the next free address, "
            "or the static address asked for) owned by the verified ResourceClaim, this node "
            "and this effect; adds each address with the pool's prefix length to the granted "
            "link inside the Pod's namespace and the pool's routes through it (protocol "
            "`static`). The pool's gateway is no default route: the Pod keeps its own. The "
            "intent (pool, owner, effect) is journaled before any allocation is created. "
            "Refused, with nothing changed, when the pool is unknown, invalid or exhausted, "
            "the static address is outside its reserved ranges or taken, the link has the "
            "address or a route's key is taken."
        ),
        undo=(
            "Deletes exactly the routes and addresses it added (addresses proven by the "
            "link's recorded identity and their kernel creation stamps), then deletes each "
            "IPAllocation by name and UID. An address someone re-added keeps its allocation "
            "and the effect is quarantined; after a crash the owner's allocations are found "
            "by owner and effect and released."
        ),
        parameters=IpPoolAddressesParameters,
        link_types=_ANY_LINK,
        precondition="pool-owner-verified",
        postcondition="pool-addresses-present",
    ),
    # the allocations live in the API server, not in the running kernel: a reboot keeps them
    boot_volatile=False,
)

SPECS: tuple[OpcodeSpec, ...] = (
    IP_ADDRESSES,
    IP_ROUTES,
    IP_NEIGHBOURS,
    IP_RULES,
    IP_POOL_ADDRESSES,
)
