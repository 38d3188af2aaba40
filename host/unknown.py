"""A fact whose query failed, as a value: kernel readers return it, the inventory keeps it.

Never a default that reads as "absent" or "free" (an empty IOMMU group, no default route):
protection and exposure treat an :class:`Unknown` as "cannot prove safe".
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Unknown:
    """A fact whose query failed. ``reason`` says which query and why."""

    reason: str

    def __bool__(self) -> bool:  # an Unknown must never pass as a truthy fact
        return False
