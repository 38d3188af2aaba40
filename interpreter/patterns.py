"""``configSchema`` ``pattern``: RE2 semantics, matched in linear time, never backtracking.

Why: a pattern comes from an administrator's NetworkPlugin and a value from any tenant's
claim or topology. Python's ``re`` backtracks, so a pattern such as ``(a+)+$`` makes a
40-character value take hours — in ``dmn compile`` and in the controller, where it stalls
every other topology. Kubernetes checks CRD ``pattern`` values with RE2 for the same
reason. Here a pattern is compiled by RE2 (the ``google-re2`` bindings, a linear-time
automaton engine); a pattern RE2 does not accept (back-references, look-around,
possessive quantifiers, a program too large) is refused when the plugin is read, with
reason code ``E_PATTERN``. Values are only ever matched by the compiled RE2 program.

Contract: :func:`pattern_problem` returns None for a usable pattern or the reason text;
:func:`full_match` matches the whole value (JSON-Schema-subset semantics of this project:
``pattern`` must match the entire string) and must only be called with a pattern for
which :func:`pattern_problem` returned None.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import re2

#: RE2 program memory bound (bytes): a pattern whose automaton needs more is refused. 1 MiB
#: (RE2's default is 8): 100 distinct ``\pL{300}`` patterns, each accepted under 8 MiB, cost
#: lint 20 s and 395 MB and the webhook 13.5 s and 560 MB a review; under 1 MiB each is
#: refused at once, while a name, MAC or VLAN-list pattern needs a few KiB.
MAX_PROGRAM_MEMORY = 1 << 20
#: Compiled patterns kept: with the bound above, at most this many MiB.
CACHED_PATTERNS = 128


def _options() -> Any:
    options = re2.Options()
    options.max_mem = MAX_PROGRAM_MEMORY
    options.log_errors = False
    return options


@lru_cache(maxsize=CACHED_PATTERNS)
def _compiled(pattern: str) -> Any:
    return re2.compile(pattern, options=_options())


def pattern_problem(pattern: str) -> str | None:
    """None when RE2 accepts ``pattern``; otherwise why it is refused."""
    try:
        _compiled(pattern)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else "refused"
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", errors="replace")
        return f"pattern {pattern!r} is not an RE2 (linear-time) regular expression: {reason}"
    return None


def search(pattern: str, value: str) -> bool:
    """True when ``pattern`` matches somewhere in ``value`` (OpenAPI/CRD ``pattern`` semantics)."""
    return _compiled(pattern).search(value) is not None


def full_match(pattern: str, value: str) -> bool:
    """True when all of ``value`` matches ``pattern`` (RE2; linear in ``len(value)``)."""
    return _compiled(pattern).fullmatch(value) is not None
