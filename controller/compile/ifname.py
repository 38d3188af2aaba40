"""Interface-name rules (seed 000 §8.1): 1–15 ASCII chars of [A-Za-z0-9_.-], excluding
``.``, ``..``, ``lo`` and ``eth0`` (the Pod's primary interface), and unique across the
whole topology — two steps can never create the same name in one sandbox."""

from __future__ import annotations

import re

_IFNAME = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")
RESERVED = frozenset({".", "..", "lo", "eth0"})


def ifname_problem(name: object) -> str | None:
    """Why ``name`` is not a legal sandbox interface name, or None if it is."""
    if not isinstance(name, str):
        return "interface name must be a string"
    if not _IFNAME.fullmatch(name):
        return f"interface name {name!r} must be 1-15 characters of [A-Za-z0-9_.-]"
    if name in RESERVED:
        return f"interface name {name!r} is reserved"
    return None
