"""``format:`` in a ``configSchema``: typed network values a plugin's config can carry.

Why: a string property said only "a string of this length matching this pattern", so a
config field bound to an ``ip/*`` opcode parameter could never check — the checker tries the
schema's boundary values against the parameter's type and ``'a'`` is no address — and an
administrator's typo in an address was found only when the Pod started. A ``format`` names
one rule of :mod:`dmn.vocabulary.ip_values` — the rule the opcodes themselves apply — so
validation refuses a bad value at its field and the checker knows which values to try.

String formats (:data:`STRING_FORMATS`): ``ip-address`` (a host address, no prefix),
``ip-interface`` (a host address with its prefix length), ``ip-prefix`` (a network, no host
bits), ``ip-route-destination`` (a prefix or ``default``) and ``mac-address`` (a lower-case
unicast MAC). Object format (:data:`OBJECT_FORMATS`): ``ip-route``, an object whose
``destination``/``gateway``/``source``/``table``/``scope`` keep the route rules.

Each format also gives

* an *identity* (:func:`identity`): what ``uniqueItems`` compares for items of that format —
  the address, not its spelling, for ``ip-interface`` (``10.0.0.2/24`` and ``10.0.0.2/16``
  are the same address twice, as the opcode says); the kernel's key (destination, table,
  metric) for ``ip-route``;
* valid, distinct *samples* (:func:`sample`), of either family, for the checker.

Pure.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping
from typing import Any, Literal

from dmn.vocabulary.ip_values import (
    destination_problem,
    host_address_problem,
    interface_address_problem,
    interface_of,
    prefix_problem,
    route_key,
    route_problem,
    unicast_mac_problem,
)

StringFormat = Literal[
    "ip-address", "ip-interface", "ip-prefix", "ip-route-destination", "mac-address"
]
ObjectFormat = Literal["ip-route"]

STRING_FORMATS: Mapping[str, Callable[[object], str | None]] = {
    "ip-address": host_address_problem,
    "ip-interface": interface_address_problem,
    "ip-prefix": prefix_problem,
    "ip-route-destination": destination_problem,
    "mac-address": unicast_mac_problem,
}
OBJECT_FORMATS = ("ip-route",)

_ROUTE_FIELDS = {
    "destination": str,
    "gateway": str,
    "source": str,
    "table": int,
    "metric": int,
    "scope": str,
}


def string_problem(fmt: str, value: str) -> str | None:
    """Why ``value`` is not of string format ``fmt``, or None."""
    return STRING_FORMATS[fmt](value)


def _route_fields(value: Mapping[str, Any]) -> dict[str, Any] | None:
    """The route fields of an object, or None when one is missing or of another type (the
    object's own properties then report it)."""
    fields: dict[str, Any] = {}
    for name, kind in _ROUTE_FIELDS.items():
        item = value.get(name)
        if item is None:
            continue
        if type(item) is not kind:
            return None
        fields[name] = item
    if "destination" not in fields:
        return None
    return fields


def object_problem(fmt: str, value: Mapping[str, Any]) -> str | None:
    """Why an object whose properties each validated breaks format ``fmt``, or None."""
    assert fmt == "ip-route"
    fields = _route_fields(value)
    if fields is None:
        return "a route needs a destination (a prefix or 'default')"
    for name, check in (
        ("destination", destination_problem),
        ("gateway", host_address_problem),
        ("source", host_address_problem),
    ):
        if name in fields:
            problem = check(fields[name])
            if problem is not None:
                return f"{name}: {problem}"
    return route_problem(
        fields["destination"],
        fields.get("gateway"),
        fields.get("source"),
        fields.get("table"),
        fields.get("scope"),
    )


def identity(fmt: str | None, value: Any) -> Any:
    """What ``uniqueItems`` compares for an item of format ``fmt`` (valid values only)."""
    if fmt == "ip-interface" and isinstance(value, str):
        return ("address", interface_of(value).ip)
    if fmt in ("ip-address", "ip-prefix", "ip-route-destination") and isinstance(value, str):
        if value == "default":
            return value
        return (fmt, ipaddress.ip_network(value, strict=False))
    if fmt == "ip-route" and isinstance(value, Mapping):
        fields = _route_fields(value)
        if fields is not None and object_problem(fmt, value) is None:
            return (
                "route",
                route_key(
                    fields["destination"],
                    fields.get("gateway"),
                    fields.get("table"),
                    fields.get("metric"),
                ),
            )
    return None


def sample(fmt: str, index: int, family: int) -> str:
    """The ``index``-th valid value of string format ``fmt`` in IPv``family``: distinct for
    distinct indices below 65536, and of one subnet for ``ip-interface``/``ip-address`` so
    that a sampled route's gateway and source agree with its destination's family."""
    if fmt == "mac-address":
        return f"02:00:00:00:{index >> 8 & 255:02x}:{index & 255:02x}"
    four = family == 4
    if fmt == "ip-interface":
        if four:
            return f"{ipaddress.IPv4Address(0x0A000000 + index + 1)}/8"
        return f"{ipaddress.IPv6Address((0xFD << 120) + index + 1)}/64"
    if fmt == "ip-address":
        if four:
            return str(ipaddress.IPv4Address(0x0A000000 + index + 1))
        return str(ipaddress.IPv6Address((0xFD << 120) + index + 1))
    # ip-prefix, ip-route-destination: distinct networks, never containing the samples above
    if four:
        return f"{ipaddress.IPv4Address(0x0B000000 + (index << 8))}/24"
    return f"{ipaddress.IPv6Address((0xFD01 << 112) + (index << 64))}/64"
