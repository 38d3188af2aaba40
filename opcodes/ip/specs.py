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
from collections.abc import Callable
from typing import Annotated, Literal

from pydantic import AfterValidator, ConfigDict, Field, model_validator

from dmn.opcodes.link_settings_contract import link_settings_spec
from dmn.opcodes.parameter_types import ParameterModel
from dmn.opcodes.spec import OpcodeSpec
from dmn.vocabulary.ip_values import (
    DESTINATION_LENGTH,
    HOST_ADDRESS_LENGTH,
    INTERFACE_ADDRESS_LENGTH,
    MAX_TABLE,
    RESERVED_TABLES,
    IpAddress,
    IpInterface,
    IpNetwork,
    address_of,
    destination_problem,
    host_address_problem,
    interface_address_problem,
    interface_of,
    route_key,
    route_network,
    route_problem,
    route_version,
    unicast_mac_problem,
)
from dmn.vocabulary.terms import LinkType

MAX_ADDRESSES = 16
MAX_ROUTES = 32


def _raising(problem_of: Callable[[object], str | None]) -> Callable[[str], str]:
    """A pydantic after-validator from a :mod:`dmn.vocabulary.ip_values` rule."""

    def check(value: str) -> str:
        problem = problem_of(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    return check


_check_host_address = _raising(host_address_problem)
_check_interface_address = _raising(interface_address_problem)
_check_destination = _raising(destination_problem)


InterfaceAddress = Annotated[
    str,
    Field(min_length=INTERFACE_ADDRESS_LENGTH[0], max_length=INTERFACE_ADDRESS_LENGTH[1]),
    AfterValidator(_check_interface_address),
]
"""A host address with its prefix length (``10.0.0.2/24``, ``fd00::2/64``)."""

HostAddress = Annotated[
    str,
    Field(min_length=HOST_ADDRESS_LENGTH[0], max_length=HOST_ADDRESS_LENGTH[1]),
    AfterValidator(_check_host_address),
]
"""One IPv4 or IPv6 host address without a prefix (a gateway, a preferred source)."""

RouteDestination = Annotated[
    str,
    Field(min_length=DESTINATION_LENGTH[0], max_length=DESTINATION_LENGTH[1]),
    AfterValidator(_check_destination),
]
"""``default``, or a network prefix with no host bits set (``10.2.0.0/16``)."""

RouteTable = Annotated[int, Field(ge=1, le=MAX_TABLE)]
"""A routing table id; ``main`` (254) by default; 253 (``default``) and 255 (``local``) are
the kernel's own and refused."""

RouteMetric = Annotated[int, Field(ge=0, le=2**32 - 1)]


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
        problem = route_problem(self.destination, self.gateway, self.source, self.table, self.scope)
        if problem is not None:
            raise ValueError(problem)
        return self

    @property
    def version(self) -> int:
        return route_version(self.destination, self.gateway)

    def network(self) -> IpNetwork:
        return route_network(self.destination, self.gateway)

    def key(self) -> tuple[IpNetwork, int, int]:
        """The kernel's key of the route: destination, table and metric."""
        return route_key(self.destination, self.gateway, self.table, self.metric)

    def resolved_metric(self) -> int:
        return self.key()[2]

    def resolved_table(self) -> int:
        return self.key()[1]

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
            key = route.key()
            if key in seen:
                raise ValueError(f"two routes to {key[0]} in table {key[1]} with metric {key[2]}")
            seen.add(key)
        return self


_check_mac = _raising(unicast_mac_problem)


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
        "destination, table and metric exists; a route through a gateway the Pod already "
        "has identically through another of its links (a second interface of the same "
        "template) is left to that link, not added and never adopted."
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
            "address or a route's key is taken by another route; a pool route the Pod "
            "already has identically through another of its links (a second interface of "
            "the same pool) is left to that link, not added and never adopted."
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


class IpCarriedHostConfigParameters(ParameterModel):
    """No parameters: what is re-created is what the link's move recorded on the host
    (``linux/link-move/v1`` with ``carryHostConfig``), which the interface handle carries."""


IP_CARRIED_HOST_CONFIG = link_settings_spec(
    name="ip/carried-host-config/v1",
    summary="Re-create in the sandbox the host addresses and routes a moved link carried.",
    changes=(
        "Adds to the granted link inside the Pod's namespace the host addresses and routes "
        "its move recorded before the link left the host (`linux/link-move/v1` with "
        "`carryHostConfig`): the permanent global addresses with their prefix, writable "
        "flags and IPv4 broadcast, then the routes that went through the link (gateway, "
        "preferred source, metric, table, scope, protocol, onlink). Refused, with nothing "
        "changed, when the handle comes from a move that recorded nothing "
        "(`E_NOT_CARRIED`), the link has one of the addresses or a route's key is taken."
    ),
    undo=(
        "Deletes exactly the routes (matched by every recorded attribute) and addresses "
        "(proven by the link's recorded identity and their kernel creation stamps) it "
        "added; an entry someone removed is left removed, one re-added or changed by "
        "someone else is left in place and the effect quarantined. The move's own undo "
        "puts the recorded addresses and routes back on the host when the link returns."
    ),
    parameters=IpCarriedHostConfigParameters,
    link_types=_ANY_LINK,
    precondition="carried-config-absent",
    postcondition="carried-config-present",
)

SPECS: tuple[OpcodeSpec, ...] = (
    IP_ADDRESSES,
    IP_ROUTES,
    IP_NEIGHBOURS,
    IP_RULES,
    IP_POOL_ADDRESSES,
    IP_CARRIED_HOST_CONFIG,
)
