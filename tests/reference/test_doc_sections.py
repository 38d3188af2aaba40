"""Generated sections of hand-written pages: the README's list of docs pages, the testing
guide's table of pytest markers — rendered from their sources and drift-checked."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest

from dmn.cli.generate import repo_root
from dmn.doc_sections import (
    documentation_index,
    page_summary,
    pytest_markers,
    render_documentation_index,
    replace_section,
)
from dmn.reference_docs import generate

ROOT = repo_root()


def test_summary_is_the_title_and_first_sentence_after_a_generated_note() -> None:
    text = "<!-- Generated. Do not edit. -->\n# Guide\n\nFirst `x` sentence. Second one.\n\n## A\n"
    assert page_summary(text) == ("Guide", "First `x` sentence.")


def test_index_lists_every_page_of_docs(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "b.md").write_text("# Bee\n\nAbout bees.\n")
    (tmp_path / "docs" / "a.md").write_text("# Ant\n\nAbout ants. More.\n")
    assert documentation_index(tmp_path) == (
        "- [Ant](docs/a.md) — About ants.\n- [Bee](docs/b.md) — About bees.\n"
    )


def test_a_page_without_markers_is_an_error() -> None:
    with pytest.raises(ValueError, match="docs-index markers"):
        render_documentation_index(ROOT, "# README without markers\n")
    with pytest.raises(ValueError):
        replace_section("<!-- x:end -->", "x", "somewhere", "body\n")


def test_markers_table_has_every_registered_marker() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    names = [m.split(":")[0] for m in config["tool"]["pytest"]["ini_options"]["markers"]]
    table = pytest_markers(ROOT)
    assert [f"| `{n}` |" in table for n in names] == [True] * len(names)


def test_a_new_docs_page_makes_the_readme_drift(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    assert "README.md" not in generate(tmp_path, check=True)
    (tmp_path / "docs" / "new-page.md").write_text("# New page\n\nSomething new.\n")
    assert "README.md" in generate(tmp_path, check=True)
    generate(tmp_path, check=False)
    assert "- [New page](docs/new-page.md) — Something new." in (tmp_path / "README.md").read_text()
