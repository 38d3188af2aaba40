"""Every ``§`` reference in the repository resolves to a section of a page in ``docs/``.

A reference is ``design §N.M`` (``docs/design.md``), ``<page>.md §N`` (a page of ``docs/``),
or a bare ``§N`` continuing the nearest such head before it (``design §4.1, §9.2``, a range
``§5.3–5.5``); inside a docs page a bare ``§N`` with no head before it means that page. A
section exists when the page has a heading numbered ``N``. Citations of design notes that are
not in the repository fail too: ``tests/reference/design_citations.py`` rewrites them.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.reference import design_citations
from tests.reference.design_citations import REACH, ROOT, SECTION, repository_files

DOCS = ROOT / "docs"
HEADING = re.compile(rf"^#{{2,4}} ({SECTION})\.? ", re.M)
HEAD = re.compile(r"\b(?P<page>[\w./-]+\.md)\b|\b(?P<design>[Dd]esign)\b")
GAP = re.compile(r"\)?[ \t]*(?:\n[ \t]*(?:(?:#|//)[ \t]*)?)?")
REFERENCE = re.compile(rf"§(?P<start>{SECTION})(?:[–-]§?(?P<end>{SECTION}))?")
# an old note cited by name (the words are split so that this file does not match itself)
OLD_CITATION = re.compile(
    "|".join(
        (
            r"\b" + "DES" + r"IGN\b",
            r"\b[Ss]eeds?\b[\s#/]*(?:0\d\d\b|§)",
            r"\b" + "se" + r"eds/0\d\d",
        )
    )
)
EXEMPT = {Path(design_citations.__file__).resolve(), Path(__file__).resolve()}


def _sections(page: Path) -> set[str]:
    return set(HEADING.findall(page.read_text())) if page.is_file() else set()


def _page_of(head: re.Match[str], source: Path) -> Path:
    if head.group("design"):
        return DOCS / "design.md"
    name = head.group("page")
    candidates = [(source.parent / name).resolve(), (ROOT / name).resolve(), DOCS / Path(name).name]
    return next((c for c in candidates if c.is_file()), candidates[-1])


def _problems(path: Path, text: str) -> list[str]:
    where = str(path.relative_to(ROOT))
    problems = [
        f"{where}:{text.count(chr(10), 0, m.start()) + 1}: cites a note outside the repository: "
        f"{m[0]!r}"
        for m in OLD_CITATION.finditer(text)
    ]
    heads = [h for h in HEAD.finditer(text) if _cites(text, h)]
    in_docs = path.parent == DOCS
    for ref in REFERENCE.finditer(text):
        line = text.count("\n", 0, ref.start()) + 1
        before = [h for h in heads if h.end() <= ref.start() and ref.start() - h.end() <= REACH]
        if before:
            page = _page_of(before[-1], path)
        elif in_docs:
            page = path
        else:
            problems.append(f"{where}:{line}: {ref[0]} names no page (write `design {ref[0]}`)")
            continue
        sections = _sections(page)
        for number in filter(None, (ref.group("start"), ref.group("end"))):
            if number not in sections:
                problems.append(f"{where}:{line}: {page.name} has no section {number}")
    return problems


def _cites(text: str, head: re.Match[str]) -> bool:
    """The head is directly followed by ``§`` (spaces or a line break between)."""
    mark = text.find("§", head.end())
    return mark >= 0 and GAP.fullmatch(text, head.end(), mark) is not None


def test_every_section_reference_resolves() -> None:
    problems: list[str] = []
    for path in repository_files():
        if path.resolve() in EXEMPT:
            continue
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        problems += _problems(path, text)
    assert problems == []


def test_the_checker_catches_what_it_must(tmp_path: Path) -> None:
    source = ROOT / "engine" / "example.py"
    cases = {
        "see design §3.5 and §8.3": [],
        "see design §3.5–5.5, §9.2": [],
        "see architecture.md §1": ["has no section 1"],
        "see [design.md](design.md) §11.1, and §6.7": [],
        "see [operator-guide.md](operator-guide.md) §2": ["has no section 2"],
        "see design §99.1": ["has no section 99.1"],
        "a bare §3.5": ["names no page"],
        "see " + "DES" + "IGN §2": ["cites a note", "names no page"],
        "see se" + "ed 000 §8.7": ["cites a note", "names no page"],
    }
    for text, expected in cases.items():
        found = _problems(source, text)
        assert len(found) == len(expected), (text, found)
        for problem, fragment in zip(found, expected, strict=True):
            assert fragment in problem, (text, problem)


def test_design_sections_are_numbered_and_unique() -> None:
    numbers = HEADING.findall((DOCS / "design.md").read_text())
    assert len(numbers) == len(set(numbers)) and len(numbers) > 40
    assert set(design_citations.TABLE["DESIGN"].values()) <= set(numbers)
    for table in design_citations.TABLE.values():
        assert set(table.values()) <= set(numbers)


def test_the_rewrite_is_idempotent() -> None:
    once = design_citations.rewrite("x (se" + "ed 000 §8.2, se" + "ed 002 §6), DES" + "IGN §2.")
    assert once == "x (design §6.2), design §2."
    assert design_citations.rewrite(once) == once
