"""Every file under examples/negative/ fails with exactly the code its first line names.

The first line of each example is ``# expect: E_CODE``. Topology negatives
(``examples/negative/topologies/``) are picked up too once their kind is registered.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dmn.interpreter.diagnostics import Code
from dmn.interpreter.documents import DOCUMENT_MODELS
from dmn.interpreter.lint import lint_paths, registered_kinds
from dmn.interpreter.source import load_yaml_documents

ROOT = Path(__file__).resolve().parents[2]
NEGATIVE = ROOT / "examples" / "negative"
EXAMPLES = sorted(p for p in NEGATIVE.rglob("*") if p.suffix in (".yaml", ".yml"))
EXPECT = re.compile(r"^#\s*expect:\s*(E_[A-Z_]+)\s*$")


def expected_code(path: Path) -> str:
    first = path.read_text().splitlines()[0]
    match = EXPECT.match(first)
    assert match, f"{path}: first line must be '# expect: E_CODE'"
    return match.group(1)


@pytest.mark.parametrize("path", EXAMPLES, ids=[str(p.relative_to(NEGATIVE)) for p in EXAMPLES])
def test_negative_example_fails_with_exactly_its_code(path: Path) -> None:
    code = expected_code(path)
    assert code in Code.__members__, f"{code} is not a reason code"
    docs, _ = load_yaml_documents(path.read_bytes(), str(path))
    kinds = {d.data.get("kind") for d in docs if isinstance(d.data, dict)}
    unregistered = kinds - set(DOCUMENT_MODELS) - set(registered_kinds())
    if unregistered:
        pytest.skip(f"kind {sorted(map(str, unregistered))} is not registered with dmn lint yet")
    result = lint_paths([str(path)])
    got = {d.code.value for d in result.diagnostics}
    assert got == {code}, [d.render() for d in result.diagnostics]
    assert result.exit_code == 1
    assert all(d.file == str(path) for d in result.diagnostics)


#: The reason codes the language core (loader, documents, expressions, checker) reports.
LANGUAGE_CODES = {
    "E_SCHEMA",
    "E_DUPLICATE_KEY",
    "E_UNKNOWN_FIELD",
    "E_SYNTAX",
    "E_UNKNOWN_OPCODE",
    "E_EFFECT_DENIED",
    "E_WRONG_HOOK",
    "E_REF_UNRESOLVED",
    "E_REF_FORWARD",
    "E_PORT_TYPE",
    "E_CARDINALITY",
    "E_ACCESS",
    "E_PARAM_TYPE",
    "E_PARAM_CONFLICT",
    "E_DUPLICATE_ID",
    "E_EXPORT_MISSING",
    "E_EXPORT_TYPE",
    "E_EXPORT_UNDECLARED",
    "E_NO_RECOVERY",
    "E_BUDGET",
    "E_SHARED_PARENT_MUTATION",
    "E_IFNAME",
    "E_PREDICATE",
    "E_GUARD_TYPE",
}


def test_every_language_code_has_a_negative_example() -> None:
    assert set(Code.__members__) >= LANGUAGE_CODES
    covered = {expected_code(p) for p in EXAMPLES if p.parent == NEGATIVE}
    assert LANGUAGE_CODES - covered == set()
