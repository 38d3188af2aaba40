"""Bounds the checker enforces or works within (design §4.3)."""

from __future__ import annotations

#: Effects per hook program after ``forEach`` expansion (design §4.3).
MAX_EFFECTS = 256
#: Config scenarios enumerated for conditional checks when no config is given: at most this
#: many that a valid config can be, out of at most ``MAX_SCENARIO_CANDIDATES`` combinations
#: (most combinations of a mode-dependent schema are impossible: vfio forbids the kernel
#: fields, so only the possible ones are decided).
MAX_SCENARIOS = 256
MAX_SCENARIO_CANDIDATES = 8192
