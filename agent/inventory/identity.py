"""Stable inventory identity: node UID + hardware identity + verified incarnation.

A BDF is a locator, not an identity: a replaced card may come back at the same address,
and a function may move. The hardware key is the strongest fact available — the PCIe
Device Serial Number (plus function number, since multi-port cards share one serial), else
the permanent MAC of the function's own netdev, else (for a VF) its parent's key and VF
index, else only the locator. The incarnation is *verified*: a key backed by a serial or
permanent MAC keeps its incarnation across absence; a locator-only key that disappeared
and came back gets a new incarnation, because nothing proves it is the same hardware.

The registry is a plain JSON-able mapping so the node journal can persist it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

STRONG = frozenset({"serial", "permanent-mac", "parent"})


def inventory_id(node_uid: str, hardware_key: str, incarnation: int) -> str:
    """``inv-`` + 12 hex digits: a DNS-label-safe, deterministic identity."""
    digest = hashlib.sha256(f"{node_uid}\0{hardware_key}\0{incarnation}".encode()).hexdigest()
    return f"inv-{digest[:12]}"


@dataclass
class IdentityRegistry:
    """Hardware key → (incarnation, present in the last scan)."""

    entries: dict[str, tuple[int, bool]] = field(default_factory=dict)

    def assign(self, seen: Mapping[str, str]) -> dict[str, int]:
        """Assign incarnations for the keys of one scan (``key -> strength``) and
        record presence; returns ``key -> incarnation``."""
        out: dict[str, int] = {}
        for key, strength in seen.items():
            previous = self.entries.get(key)
            if previous is None:
                incarnation = 1
            else:
                number, was_present = previous
                incarnation = number if (was_present or strength in STRONG) else number + 1
            out[key] = incarnation
        for key, (number, _) in list(self.entries.items()):
            if key not in seen:
                self.entries[key] = (number, False)
        for key, incarnation in out.items():
            self.entries[key] = (incarnation, True)
        return out

    def to_json(self) -> dict[str, Any]:
        return {k: {"incarnation": n, "present": p} for k, (n, p) in sorted(self.entries.items())}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> IdentityRegistry:
        return cls({k: (int(v["incarnation"]), bool(v["present"])) for k, v in data.items()})
