"""Generated reference pages under ``docs/`` (run by ``dmn generate``, drift-checked by CI).

Each page is rendered from the code it documents — the opcode specs, the registry of
reason codes — so the docs cannot drift from what the program enforces. The README's table of
opcodes and the substrates they were proven on is a generated section
(:mod:`dmn.opcodes.substrates`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from dmn import reason_codes
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


SECTIONS: dict[str, Callable[[str], str]] = {
    "README.md": substrates.render_section,
}
"""Files of which only a marked section is generated: the renderer takes the current text."""


def _rendered(root: Path) -> Iterator[tuple[str, str]]:
    for relative, render in PAGES.items():
        yield relative, render()
    for relative, section in SECTIONS.items():
        if (root / relative).is_file():  # a section needs its file (a bare docs tree has none)
            yield relative, section((root / relative).read_text())


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
