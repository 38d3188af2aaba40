"""The opcode/substrate table (``opcodes/substrates.py``) against the code.

Every registered builtin opcode is in exactly one row, and a row names executor packages
exactly when each of its opcodes has a native executor in ``default_executors()`` — so an
executor added (or an opcode registered) without updating the claim fails here; its section
of ``docs/substrates.md`` is drift-checked by ``dmn generate --check``.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from dmn.opcodes.executor_table import default_executors
from dmn.opcodes.registry import default_registry
from dmn.opcodes.substrates import SUBSTRATES, render_section

ROOT = Path(__file__).resolve().parents[2]


def _unversioned(name: str) -> str:
    return name.rsplit("/", 1)[0]


def test_every_opcode_is_in_exactly_one_row() -> None:
    listed = Counter(name for row in SUBSTRATES for name in row.opcodes)
    registered = {_unversioned(n) for n in default_registry().names()}
    assert set(listed) == registered
    assert [n for n, c in listed.items() if c > 1] == []


def test_rows_claim_an_executor_exactly_when_one_exists() -> None:
    have = {_unversioned(n) for n in default_executors()}
    for row in SUBSTRATES:
        built = [name in have for name in row.opcodes]
        assert all(built) or not any(built), row.opcodes
        assert bool(row.executors) == all(built), row.opcodes
        for package in row.executors:
            assert (ROOT / package).is_dir(), package


def test_substrates_page_section_is_the_rendered_table() -> None:
    page = (ROOT / "docs" / "substrates.md").read_text()
    assert render_section(page) == page
