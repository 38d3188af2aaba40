"""Generated reference pages under ``docs/`` (run by ``dmn generate``, drift-checked by CI).

Each page is rendered from the code it documents — the opcode specs, the registry of
reason codes — so the docs cannot drift from what the program enforces.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from dmn import reason_codes
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


def generate(root: Path, check: bool) -> list[str]:
    """``dmn generate`` entry: returns the pages that differ; writes them unless ``check``."""
    drift: list[str] = []
    for relative, render in PAGES.items():
        text = render()
        path = root / relative
        if path.is_file() and path.read_text() == text:
            continue
        drift.append(relative)
        if not check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    return drift
