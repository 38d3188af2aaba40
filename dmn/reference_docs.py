"""Generated reference pages under ``docs/`` (run by ``dmn generate``, drift-checked by CI).

Each page is rendered from the code it documents — the opcode specs, the registry of
reason codes — so the docs cannot drift from what the program enforces. Some hand-written
pages carry generated sections: the table of opcodes and the substrates they were proven on
in ``docs/substrates.md`` (:mod:`dmn.opcodes.substrates`), the README's list of the pages in
``docs/`` and the testing guide's table of pytest markers (:mod:`dmn.doc_sections`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from dmn import doc_sections, reason_codes
from dmn.opcodes import substrates
from dmn.opcodes.reference import describe, render_document
from dmn.opcodes.registry import default_registry


def opcodes_page() -> str:
    registry = default_registry()
    specs = [s for n in registry.names() if (s := registry.get(n)) is not None]
    return render_document(describe(s) for s in specs)


PAGES: dict[str, Callable[[], str]] = {
    "docs/opcodes.md": opcodes_page,
    "docs/reason-codes.md": reason_codes.render_markdown,
}


def _substrates(root: Path, text: str) -> str:
    return substrates.render_section(text)


SECTIONS: dict[str, tuple[Callable[[Path, str], str], ...]] = {
    "README.md": (doc_sections.render_documentation_index,),
    "docs/substrates.md": (_substrates,),
    "docs/testing.md": (doc_sections.render_pytest_markers,),
}
"""Files of which only marked sections are generated: each renderer takes the root and the
current text."""


def _rendered(root: Path) -> Iterator[tuple[str, str]]:
    for relative, render in PAGES.items():
        yield relative, render()
    for relative, renderers in SECTIONS.items():
        if (root / relative).is_file():  # a section needs its file (a bare docs tree has none)
            text = (root / relative).read_text()
            for render_section in renderers:
                text = render_section(root, text)
            yield relative, text


def generate(root: Path, check: bool) -> list[str]:
    """``dmn generate`` entry: returns the pages that differ; writes them unless ``check``."""
    drift: list[str] = []
    for relative, text in _rendered(root):
        path = root / relative
        if path.is_file() and path.read_text() == text:
            continue
        drift.append(relative)
        if not check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    return drift
