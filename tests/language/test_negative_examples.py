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


def test_every_language_code_has_a_negative_example() -> None:
    covered = {expected_code(p) for p in EXAMPLES}
    language = {c.value for c in Code} - {
        # topology compiler / node codes (examples under topologies/ by their owners)
        "E_CYCLE",
        "E_ROOT_COVERAGE",
        "E_FAMILY_CONFLICT",
        "E_RESET_DOMAIN_BUSY",
        # not expressible as a file
        "E_IO",
        "E_USAGE",
    }
    assert language - covered == set()
