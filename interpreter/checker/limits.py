"""Bounds the checker enforces or works within (seed 000 §5.1)."""

from __future__ import annotations

#: Effects per hook program after ``forEach`` expansion (seed 000 §5.1).
MAX_EFFECTS = 256
#: Config scenarios enumerated for conditional checks when no config is given.
MAX_SCENARIOS = 256
