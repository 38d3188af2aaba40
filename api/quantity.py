"""Kubernetes resource quantities as exact fractions (enough of the grammar for DRA).

Supports plain decimals, decimal SI suffixes (m, k, M, G, T, P, E), binary suffixes
(Ki … Ei) and decimal exponents (``1e3``). A malformed quantity raises ``ValueError``.
"""

from __future__ import annotations

import re
from fractions import Fraction

_QUANTITY_RE = re.compile(r"^([+-]?[0-9]+(?:\.[0-9]*)?|[+-]?\.[0-9]+)([eE][+-]?[0-9]+|[a-zA-Z]*)$")
_SUFFIX = {
    "": Fraction(1),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}


def parse_quantity(text: str | int) -> Fraction:
    if isinstance(text, int):
        return Fraction(text)
    m = _QUANTITY_RE.match(text.strip())
    if not m:
        raise ValueError(f"invalid quantity {text!r}")
    number, suffix = m.groups()
    if suffix[:1] in ("e", "E") and suffix[1:].lstrip("+-").isdigit():
        return Fraction(number) * Fraction(10) ** int(suffix[1:])
    if suffix not in _SUFFIX:
        raise ValueError(f"invalid quantity suffix in {text!r}")
    return Fraction(number) * _SUFFIX[suffix]


def format_quantity(value: Fraction) -> str:
    """Canonical plain form: an integer when whole, else milli units."""
    if value.denominator == 1:
        return str(value.numerator)
    milli = value * 1000
    if milli.denominator == 1:
        return f"{milli.numerator}m"
    return str(float(value))
