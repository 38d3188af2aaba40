"""Bounds the checker enforces or works within (design §4.3)."""

from __future__ import annotations

#: Effects per hook program after ``forEach`` expansion (design §4.3).
MAX_EFFECTS = 256
#: Config scenarios enumerated for conditional checks when no config is given.
MAX_SCENARIOS = 256
