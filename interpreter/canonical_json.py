"""Canonical JSON and its digest: the one byte form every content digest hashes.

Plugin contract digests (``loader``), bound-program digests (``dmn.engine.bound``),
topology revisions and opcode-contract digests (``controller/compile``), the webhook's
descriptor check and the journal's stored values all hash or store this form, so two
parts that digest the same value always agree. Pure and dependency-free.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

JSONValue = Any  # None | bool | int | float | str | list[JSONValue] | dict[str, JSONValue]


def canonical_json(value: JSONValue) -> bytes:
    """Deterministic JSON bytes: sorted keys, no insignificant whitespace, UTF-8."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def sha256_digest(value: JSONValue) -> str:
    return "sha256:" + hashlib.sha256(canonical_json(value)).hexdigest()
