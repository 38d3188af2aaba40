"""Linux interface-name rules (``E_IFNAME``).

The kernel (``dev_valid_name``) accepts 1..15 bytes (IFNAMSIZ - 1), rejects ``.`` and
``..``, and rejects ``/``, ``:`` and whitespace anywhere. Opcode parameter models may
narrow this further (seed 000 §8.1: ``[A-Za-z0-9_.-]``, not ``lo``/``eth0``); this
module is the floor every interface name in a program, config schema or bound payload
must clear, so the reason code is the same wherever the name came from.
"""

from __future__ import annotations

IFNAME_MAX_BYTES = 15


def is_ifname_field(name: str) -> bool:
    """Parameters and config fields that carry interface names, by naming convention."""
    return name == "ifName" or name.endswith("IfName")


def ifname_problem(value: object) -> str | None:
    """Why ``value`` is not a valid Linux interface name, or None if it is."""
    if not isinstance(value, str):
        return "an interface name must be a string"
    if not value:
        return "an interface name must not be empty"
    if len(value.encode("utf-8")) > IFNAME_MAX_BYTES:
        return f"interface name {value!r} is longer than {IFNAME_MAX_BYTES} bytes"
    if value in (".", ".."):
        return f"interface name {value!r} is not allowed"
    for ch in value:
        if ch in "/:" or ch.isspace():
            return f"interface name {value!r} contains {ch!r}"
    return None
