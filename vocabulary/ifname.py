"""Linux interface names a workload may choose (design §6.1) — ``E_IFNAME``.

The one rule, wherever a name comes from (a config field, a config schema's enum or
default, a literal opcode parameter, a bound payload, a topology step): 1–15 ASCII
characters from ``[A-Za-z0-9_.-]`` (IFNAMSIZ - 1 bytes, which also keeps clear of the
kernel's ``dev_valid_name`` refusals of ``/``, ``:`` and whitespace), and none of ``.``,
``..`` (the kernel refuses them), ``lo`` (loopback) or ``eth0`` (the Pod's primary
interface). The config validator, the checker, the binder, the opcode parameter models
and the topology compiler all call :func:`ifname_problem`, so the same name is refused
with the same reason everywhere. Uniqueness across a topology is the compiler's.
"""

from __future__ import annotations

import re

IFNAME_MAX_BYTES = 15
IFNAME_PATTERN = r"^[A-Za-z0-9_.-]{1,15}$"
RESERVED_IFNAMES = frozenset({".", "..", "lo", "eth0"})
"""Names a workload may never ask for: the two the kernel refuses, the loopback device and
the primary network's interface inside a Pod (design §6.1)."""

_IFNAME = re.compile(IFNAME_PATTERN)


def is_ifname_field(name: str) -> bool:
    """Parameters and config fields that carry interface names, by naming convention."""
    return name == "ifName" or name.endswith("IfName")


def ifname_problem(value: object) -> str | None:
    """Why ``value`` is not an interface name a workload may choose, or None if it is."""
    if not isinstance(value, str):
        return "an interface name must be a string"
    if not _IFNAME.fullmatch(value):
        return (
            f"interface name {value!r} must be 1-{IFNAME_MAX_BYTES} characters from [A-Za-z0-9_.-]"
        )
    if value in RESERVED_IFNAMES:
        return f"interface name {value!r} is reserved"
    return None
