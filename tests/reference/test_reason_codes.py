"""The registry of reason codes is complete: every code literal in the source is registered,
every registered code is still emitted, and the docs table is generated from it."""

from __future__ import annotations

import ast
import re

from dmn.cli.generate import repo_root
from dmn.reason_codes import PATTERNS, REGISTRY, lookup, render_markdown

ROOT = repo_root()
#: every package of the distribution (the folders dmn/ links to, and dmn's own subpackages)
PACKAGES = sorted(p.resolve() for p in (ROOT / "dmn").iterdir() if (p / "__init__.py").is_file())
CODE = re.compile(r"\b[EW]_[A-Z][A-Z0-9_]*[A-Z0-9]\b")


def _docstrings(tree: ast.AST) -> set[int]:
    ids: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = body[0] if body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def emitted_codes() -> dict[str, str]:
    """Every code-shaped string constant (outside docstrings) -> one file that has it."""
    found: dict[str, str] = {}
    files = [p for pkg in PACKAGES for p in pkg.rglob("*.py")]
    files += list((ROOT / "dmn").glob("*.py"))
    for path in files:
        if path.name.endswith(("_pb2.py", "_pb2_grpc.py")) or path.name == "reason_codes.py":
            continue
        tree = ast.parse(path.read_text())
        skip = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if id(node) in skip:
                    continue
                for code in CODE.findall(node.value):
                    found.setdefault(code, str(path.relative_to(ROOT)))
    return found


def test_every_emitted_code_is_registered() -> None:
    missing = {c: f for c, f in emitted_codes().items() if lookup(c) is None}
    assert not missing, f"add these to dmn/reason_codes.py: {missing}"


def test_every_registered_code_is_still_emitted() -> None:
    emitted = emitted_codes()
    stale = [e.code for e in REGISTRY if e.code not in emitted]
    assert not stale, f"no longer emitted anywhere; remove from the registry: {stale}"


def test_entries_are_unique_and_say_what_to_do() -> None:
    codes = [e.code for e in REGISTRY]
    assert len(codes) == len(set(codes))
    for entry in REGISTRY:
        assert entry.meaning.endswith(".") and entry.action.endswith((".", ")")), entry.code


def test_netlink_errno_codes_are_a_registered_pattern() -> None:
    assert lookup("E_NETLINK_95") is PATTERNS[0][1]
    assert lookup("E_NETLINK_") is None and lookup("E_NO_SUCH_CODE") is None


def test_docs_table_is_generated_from_the_registry() -> None:
    page = (ROOT / "docs" / "reason-codes.md").read_text()
    assert page == render_markdown()
    assert all(f"| `{e.code}` |" in page for e in REGISTRY)
