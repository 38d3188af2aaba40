"""An IPPool compiled to integer intervals, and every check of it that needs arithmetic.

:func:`plan_pool` validates the document against the strict model and then the address
rules, each refusal a :class:`Diagnostic` with a reason code at the field (and at its line
and column when a source map is given):

* ``E_IPPOOL_SUBNET`` — a subnet that is no prefix, has host bits set, or repeats a family;
* ``E_IPPOOL_RANGE_OUTSIDE_SUBNET`` — an allocatable, reserved or excluded range (or one of
  its ends) outside its subnet, or a range whose start is after its end;
* ``E_IPPOOL_RANGE_OVERLAP`` — a reserved range overlapping an allocatable one (an address
  would be both static-only and dynamic);
* ``E_IPPOOL_RESERVED_EXCLUDED`` — a reserved range overlapping an exclusion;
* ``E_IPPOOL_GATEWAY`` — a gateway outside its subnet or inside an allocatable or reserved
  range (it would be handed to a Pod);
* ``E_IPPOOL_ROUTE`` — a route whose destination is no prefix of the subnet's family, or whose
  gateway is outside the subnet;
* ``E_IPPOOL_TOO_LARGE`` — more than :data:`MAX_POOL_ADDRESSES` addresses: every address
  handed out is one object in etcd, and a pool that could never be filled only hides a typo
  (an IPv6 /64 with no ``ranges``).

:func:`overlap_diagnostics` adds ``E_IPPOOL_OVERLAP`` for subnets another pool also covers
(two pools handing out one address would each believe they own it).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from dmn.api.ipam.addresses import (
    Family,
    Interval,
    host_interval,
    network_interval,
    normalize,
    overlaps,
    parse_address,
    parse_network,
    size,
    subtract,
    within,
)
from dmn.api.ipam.ippool import AddressRange, IPPool, IPPoolSubnet
from dmn.interpreter.diagnostics import Code, Diagnostic
from dmn.interpreter.source import Path, SourceMap, path_text

#: The most addresses (allocatable plus reserved, both families) one pool may hold.
MAX_POOL_ADDRESSES = 65536


@dataclass(frozen=True)
class RoutePlan:
    destination: str
    gateway: str | None


@dataclass(frozen=True)
class SubnetPlan:
    family: Family
    cidr: str
    prefix_length: int
    network: Interval
    gateway: str | None
    #: Handed out to dynamic requests: the ranges minus exclusions, reserved and gateway.
    dynamic: tuple[Interval, ...]
    #: Handed out only to static requests naming the address.
    static: tuple[Interval, ...]
    routes: tuple[RoutePlan, ...]

    @property
    def size(self) -> int:
        return size(self.dynamic) + size(self.static)


@dataclass(frozen=True)
class PoolPlan:
    name: str
    subnets: Mapping[Family, SubnetPlan]

    @property
    def size(self) -> int:
        return sum(s.size for s in self.subnets.values())

    def subnet_of(self, value: int, family: Family) -> SubnetPlan | None:
        subnet = self.subnets.get(family)
        if subnet is None or not within((value, value), subnet.network):
            return None
        return subnet


class _Checker:
    def __init__(self, source: SourceMap | None) -> None:
        self.source = source
        self.out: list[Diagnostic] = []

    def add(self, code: Code, message: str, path: Path) -> None:
        span = self.source.span(path) if self.source is not None else None
        self.out.append(Diagnostic.at(code, message, span, path_text(path)))


def _schema_diagnostics(exc: ValidationError, source: SourceMap | None) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    for err in exc.errors():
        loc = tuple(p for p in err["loc"] if isinstance(p, str | int))
        unknown = err["type"] == "extra_forbidden"
        span = None
        if source is not None:
            span = source.key_span(loc) if unknown else source.span(loc)
        code = Code.E_UNKNOWN_FIELD if unknown else Code.E_SCHEMA
        out.append(Diagnostic.at(code, err["msg"], span, path_text(loc)))
    return out


def _member(text: str, family: Family, network: Interval) -> int | None:
    """``text`` as an address of ``family`` inside ``network``, or None."""
    parsed = parse_address(text)
    if parsed is None or parsed.version != family or not within((int(parsed),) * 2, network):
        return None
    return int(parsed)


def _range(
    checker: _Checker,
    item: AddressRange,
    family: Family,
    network: Interval,
    cidr: str,
    path: Path,
) -> Interval | None:
    ends: list[int] = []
    for key, text in (("start", item.start), ("end", item.end or item.start)):
        parsed = parse_address(text)
        if parsed is None or parsed.version != family:
            checker.add(
                Code.E_IPPOOL_RANGE_OUTSIDE_SUBNET,
                f"{text!r} is not an IPv{family} address of subnet {cidr}",
                (*path, key),
            )
            return None
        if not within((int(parsed), int(parsed)), network):
            checker.add(
                Code.E_IPPOOL_RANGE_OUTSIDE_SUBNET, f"{text} is outside subnet {cidr}", (*path, key)
            )
            return None
        ends.append(int(parsed))
    if ends[0] > ends[1]:
        checker.add(
            Code.E_IPPOOL_RANGE_OUTSIDE_SUBNET,
            f"range start {item.start} is after its end {item.end}",
            (*path, "end"),
        )
        return None
    return ends[0], ends[1]


def _ranges(
    checker: _Checker,
    items: list[AddressRange] | None,
    field: str,
    family: Family,
    network: Interval,
    cidr: str,
    path: Path,
) -> list[tuple[int, Interval]]:
    out: list[tuple[int, Interval]] = []
    for j, item in enumerate(items or []):
        interval = _range(checker, item, family, network, cidr, (*path, field, j))
        if interval is not None:
            out.append((j, interval))
    return out


def _subnet(
    checker: _Checker, subnet: IPPoolSubnet, path: Path, seen: set[Family]
) -> SubnetPlan | None:
    net = parse_network(subnet.cidr)
    if net is None:
        checker.add(
            Code.E_IPPOOL_SUBNET,
            f"{subnet.cidr!r} is not a prefix with no host bits set (e.g. 10.56.0.0/24)",
            (*path, "cidr"),
        )
        return None
    family: Family = 4 if net.version == 4 else 6
    if family in seen:
        checker.add(
            Code.E_IPPOOL_SUBNET,
            f"a second IPv{family} subnet: a pool holds one subnet per family",
            (*path, "cidr"),
        )
        return None
    seen.add(family)
    network = network_interval(net)
    cidr = str(net)
    ranges = _ranges(checker, subnet.ranges, "ranges", family, network, cidr, path)
    reserved = _ranges(checker, subnet.reserved, "reserved", family, network, cidr, path)
    excluded = _ranges(checker, subnet.exclude, "exclude", family, network, cidr, path)
    clashes = (
        (ranges, Code.E_IPPOOL_RANGE_OVERLAP, "overlaps an allocatable range"),
        (excluded, Code.E_IPPOOL_RESERVED_EXCLUDED, "overlaps an exclusion: never usable"),
    )
    for j, res in reserved:
        for others, code, what in clashes:
            if any(overlaps(res, other) for _, other in others):
                checker.add(code, f"a reserved (static-only) range {what}", (*path, "reserved", j))
    gateway_value: int | None = None
    if subnet.gateway is not None:
        gateway_value = _member(subnet.gateway, family, network)
        if gateway_value is None:
            checker.add(
                Code.E_IPPOOL_GATEWAY,
                f"gateway {subnet.gateway!r} is not an address of subnet {cidr}",
                (*path, "gateway"),
            )
        else:
            for field, rs in (("ranges", ranges), ("reserved", reserved)):
                if any(lo <= gateway_value <= hi for _, (lo, hi) in rs):
                    checker.add(
                        Code.E_IPPOOL_GATEWAY,
                        f"gateway {subnet.gateway} is inside an allocatable or reserved range "
                        f"({field}): it would be handed to a Pod",
                        (*path, "gateway"),
                    )
                    break
    routes = []
    for j, route in enumerate(subnet.routes or []):
        dest = parse_network(route.destination)
        if dest is None or dest.version != net.version:
            checker.add(
                Code.E_IPPOOL_ROUTE,
                f"route destination {route.destination!r} is not an IPv{family} prefix with no "
                "host bits set",
                (*path, "routes", j, "destination"),
            )
            continue
        if route.gateway is not None and _member(route.gateway, family, network) is None:
            checker.add(
                Code.E_IPPOOL_ROUTE,
                f"route gateway {route.gateway!r} is not an address of subnet {cidr}",
                (*path, "routes", j, "gateway"),
            )
            continue
        routes.append(RoutePlan(str(dest), route.gateway))
    holes = [i for _, i in excluded]
    static = subtract([i for _, i in reserved], holes)
    base = [i for _, i in ranges] if subnet.ranges else [host_interval(net)]
    taken = [*holes, *static]
    if gateway_value is not None:
        taken.append((gateway_value, gateway_value))
    dynamic = subtract(base, taken)
    return SubnetPlan(
        family,
        cidr,
        net.prefixlen,
        network,
        subnet.gateway,
        tuple(dynamic),
        tuple(normalize(static)),
        tuple(routes),
    )


def plan_pool(
    obj: Mapping[str, Any], source: SourceMap | None = None
) -> tuple[PoolPlan | None, list[Diagnostic]]:
    """The pool's plan, or None and why not (``status`` is ignored)."""
    try:
        pool = IPPool.model_validate({k: v for k, v in obj.items() if k != "status"})
    except ValidationError as exc:
        return None, _schema_diagnostics(exc, source)
    checker = _Checker(source)
    name = str(pool.metadata.get("name") or "")
    subnets: dict[Family, SubnetPlan] = {}
    seen: set[Family] = set()
    for i, subnet in enumerate(pool.spec.subnets):
        plan = _subnet(checker, subnet, ("spec", "subnets", i), seen)
        if plan is not None:
            subnets[plan.family] = plan
    result = PoolPlan(name, subnets)
    if result.size > MAX_POOL_ADDRESSES:
        checker.add(
            Code.E_IPPOOL_TOO_LARGE,
            f"the pool holds {result.size} addresses, more than {MAX_POOL_ADDRESSES}: give "
            "smaller ranges (an IPv6 subnet needs explicit ranges)",
            ("spec", "subnets"),
        )
    if checker.out:
        return None, checker.out
    return result, []


def overlap_diagnostics(
    obj: Mapping[str, Any],
    others: Iterable[Mapping[str, Any]],
    source: SourceMap | None = None,
) -> list[Diagnostic]:
    """``E_IPPOOL_OVERLAP`` for each subnet of ``obj`` that another pool's subnet overlaps
    (a pool of the same name is the same pool)."""
    checker = _Checker(source)
    name = (obj.get("metadata") or {}).get("name")
    mine = _cidrs(obj)
    for other in others:
        other_name = (other.get("metadata") or {}).get("name")
        if other_name == name:
            continue
        for i, net in mine:
            for _, theirs in _cidrs(other):
                if net.version == theirs.version and net.overlaps(theirs):
                    checker.add(
                        Code.E_IPPOOL_OVERLAP,
                        f"subnet {net} overlaps subnet {theirs} of IPPool {other_name}",
                        ("spec", "subnets", i, "cidr"),
                    )
    return checker.out


def _cidrs(
    obj: Mapping[str, Any],
) -> list[tuple[int, ipaddress.IPv4Network | ipaddress.IPv6Network]]:
    out = []
    subnets = (obj.get("spec") or {}).get("subnets")
    for i, subnet in enumerate(subnets if isinstance(subnets, list) else []):
        cidr = subnet.get("cidr") if isinstance(subnet, Mapping) else None
        net = parse_network(cidr) if isinstance(cidr, str) else None
        if net is not None:
            out.append((i, net))
    return out
