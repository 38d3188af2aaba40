"""Address arithmetic for IPv4 and IPv6, and the deterministic names of allocation objects.

Addresses are handled as integers inside one family: ranges are inclusive ``(first, last)``
pairs, interval sets are sorted and disjoint. Parsing never raises: a malformed text is
``None`` and the caller turns that into a reason-coded diagnostic.

:func:`allocation_name` is the arbiter's key: the same (pool, address) always gives the same
object name, and two different pairs never do, so the API server's create refuses a second
owner with 409 AlreadyExists. IPv4 is written as four decimal groups (``10-56-0-5``), IPv6 in
its exploded form as eight four-digit hex groups (``fd00-0000-...-0005``); the last group's
width tells the family apart and the fixed group count separates the pool name, so the
encoding is injective, and the name always ends in an alphanumeric character (DNS-1123).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from typing import Literal

Family = Literal[4, 6]
Interval = tuple[int, int]

#: Longest pool name: a DNS label, so that it also fits a label value and leaves room in the
#: 253 characters of an allocation name for the longest encoded address (39 characters).
MAX_POOL_NAME = 63


def parse_address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """``text`` as an address (no prefix, no zone), or None."""
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def parse_network(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    """``text`` as a prefix with no host bits set (``10.56.0.0/24``), or None."""
    if "/" not in text:
        return None
    try:
        return ipaddress.ip_network(text, strict=True)
    except ValueError:
        return None


def family_of(text: str) -> Family | None:
    parsed = parse_address(text)
    if parsed is None:
        network = parse_network(text)
        return None if network is None else _family(network.version)
    return _family(parsed.version)


def _family(version: int) -> Family:
    return 4 if version == 4 else 6


def to_int(text: str) -> int | None:
    parsed = parse_address(text)
    return None if parsed is None else int(parsed)


def to_text(value: int, family: Family) -> str:
    """The canonical text (RFC 5952 for IPv6) of ``value`` in ``family``."""
    if family == 4:
        return str(ipaddress.IPv4Address(value))
    return str(ipaddress.IPv6Address(value))


def network_interval(network: ipaddress.IPv4Network | ipaddress.IPv6Network) -> Interval:
    return int(network.network_address), int(network.broadcast_address)


def host_interval(network: ipaddress.IPv4Network | ipaddress.IPv6Network) -> Interval:
    """The usable host addresses: IPv4 leaves out the network and broadcast addresses (not
    for /31 and /32), IPv6 the subnet-router anycast address (not for /127 and /128)."""
    first, last = network_interval(network)
    if network.version == 4 and network.prefixlen <= 30:
        return first + 1, last - 1
    if network.version == 6 and network.prefixlen <= 126:
        return first + 1, last
    return first, last


def size(intervals: Iterable[Interval]) -> int:
    return sum(last - first + 1 for first, last in intervals)


def normalize(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint, adjacent intervals merged."""
    out: list[Interval] = []
    for first, last in sorted(i for i in intervals if i[0] <= i[1]):
        if out and first <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], last))
        else:
            out.append((first, last))
    return out


def subtract(intervals: Sequence[Interval], removed: Sequence[Interval]) -> list[Interval]:
    """``intervals`` without any address of ``removed`` (both normalized on the way)."""
    out: list[Interval] = []
    cuts = normalize(removed)
    for first, last in normalize(intervals):
        start = first
        for cut_first, cut_last in cuts:
            if cut_last < start or cut_first > last:
                continue
            if cut_first > start:
                out.append((start, cut_first - 1))
            start = max(start, cut_last + 1)
            if start > last:
                break
        if start <= last:
            out.append((start, last))
    return out


def overlaps(a: Interval, b: Interval) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def within(inner: Interval, outer: Interval) -> bool:
    return outer[0] <= inner[0] and inner[1] <= outer[1]


def contains(intervals: Sequence[Interval], value: int) -> bool:
    return any(first <= value <= last for first, last in intervals)


def encode_address(value: int, family: Family) -> str:
    """The DNS-safe spelling of an address used in allocation names."""
    if family == 4:
        return "-".join(str(b) for b in value.to_bytes(4, "big"))
    return "-".join(f"{(value >> shift) & 0xFFFF:04x}" for shift in range(112, -16, -16))


def allocation_name(pool: str, address: str) -> str:
    """``<pool>-<encoded address>``: the one IPAllocation name for this pool and address.

    ``address`` must parse (the allocator only asks for addresses it made); the result is a
    DNS-1123 subdomain of at most 63 + 1 + 39 characters."""
    parsed = parse_address(address)
    if parsed is None:
        raise ValueError(f"not an address: {address!r}")
    return f"{pool}-{encode_address(int(parsed), _family(parsed.version))}"
