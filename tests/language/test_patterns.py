"""configSchema patterns: RE2 (linear time) or refused with E_PATTERN; never backtracking."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from dmn.interpreter.config_schema import PATTERN_ERROR_TYPE, ObjectSchema, validate_config
from dmn.interpreter.diagnostics import Code
from dmn.interpreter.lint import lint_paths
from dmn.interpreter.patterns import full_match, pattern_problem

NEGATIVE = Path(__file__).resolve().parents[2] / "examples" / "negative"


def _schema(pattern: str) -> ObjectSchema:
    return ObjectSchema.model_validate(
        {
            "type": "object",
            "additionalProperties": False,
            "properties": {"name": {"type": "string", "pattern": pattern}},
        }
    )


@pytest.mark.adversarial
def test_catastrophic_pattern_is_matched_in_linear_time() -> None:
    """``(a+)+$`` is RE2: accepted, and a long non-matching value is refused at once.

    Python's ``re`` needs ~2**n steps for ``"a" * n + "b"``; n = 5,000 would never end.
    (No wall-clock assertion: the test's timeout is the bound.)
    """
    schema = _schema("(a+)+$")
    for n in (29, 40, 5_000):
        _, diags = validate_config(schema, {"name": "a" * n + "b"})
        assert [d.code for d in diags] == [Code.E_SCHEMA]
        assert "does not match the pattern" in diags[0].message
    _, diags = validate_config(schema, {"name": "a" * 5_000})
    assert diags == []


@pytest.mark.parametrize(
    "pattern",
    [r"(a)\1", r"(?=a)a", r"(?!a)b", r"(?<=a)b", r"a++", r"\d{1,1000}{1,1000}"],
)
def test_patterns_re2_does_not_accept_are_refused(pattern: str) -> None:
    assert pattern_problem(pattern) is not None
    with pytest.raises(ValidationError) as info:
        _schema(pattern)
    assert [e["type"] for e in info.value.errors()] == [PATTERN_ERROR_TYPE]


def test_lint_refuses_a_backtracking_pattern_with_e_pattern_at_the_pattern() -> None:
    result = lint_paths([str(NEGATIVE / "pattern.yaml")], include_builtins=False)
    (diag,) = result.diagnostics
    assert diag.code is Code.E_PATTERN
    assert (diag.line, diag.column) == (15, 68)
    assert diag.path.endswith("ifName.pattern")
    assert result.exit_code == 1


def test_full_match_is_anchored_at_both_ends() -> None:
    assert full_match("[a-z]+", "abc")
    assert not full_match("[a-z]+", "abc1")
    assert not full_match("b", "abc")
    assert full_match("é+", "éé")  # str values, UTF-8 inside RE2
