"""``x-kubernetes-validations`` (CEL) for custom resources — placeholder until wired to ``cel``."""

from __future__ import annotations

from . import schema


def rule_evaluator() -> schema.CustomRule | None:
    return None
