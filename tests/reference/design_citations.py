"""Rewrite citations of the project's old design notes into ``design §N`` references.

Why a script: docstrings, comments, YAML and TOML across the repository cited design notes
that were never part of it. Their content now lives in ``docs/design.md`` under its own
numbering, and this module carries the one translation table from the old numbers to the
new sections. It is re-runnable and idempotent, so it can be applied again after other
branches moved or edited the citing files:

    .venv/bin/python -m tests.reference.design_citations          # rewrite in place
    .venv/bin/python -m tests.reference.design_citations --check  # list, change nothing

Contract: only a citation head (the old notes' names) directly followed by ``§`` is
rewritten, together with the bare ``§`` numbers that continue it (``§4.1, §12.2``, ranges
``§7.3–7.5``); the head becomes ``design`` (``Design`` at the start of a sentence) and each
number its new section. Text already citing ``design §…`` or a ``*.md §…`` page is left
alone. Lines of Python files that grow past 100 characters are reported, not rewrapped.
``tests/reference/test_section_references.py`` checks the result.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".lark", ".tpl", ".json", ".txt", ".cfg"}
NAMES = {"Makefile", "Dockerfile"}
SKIP_DIRS = {".git", ".venv", ".kernel-lab", "node_modules", "__pycache__", ".mypy_cache"}
SKIP_PARTS = {"dra_multi_network.egg-info", ".ruff_cache", ".pytest_cache", ".hypothesis"}

# old document -> {old section: section of docs/design.md}
_OLD_DESIGN = "DESIGN"
_SEED_000 = "seed 000"
_SEED_002 = "seed 002"
TABLE: dict[str, dict[str, str]] = {
    _OLD_DESIGN: {
        "1": "1",
        "2": "2",
        "3": "3",
        "3.1": "3.1",
        "3.2": "3.2",
        "3.3": "3.3",
        "3.4": "3.4",
        "3.5": "3.5",
        "3.6": "3.6",
        "3.7": "3.7",
        "4": "4",
        "5": "5",
        "6": "10",
        "7": "11",
    },
    _SEED_000: {
        "4.1": "4.1",
        "4.3": "4.2",
        "5.1": "4.3",
        "5.2": "3.1",
        "5.3": "4.4",
        "5.4": "4.5",
        "5.5": "4.6",
        "6.1": "3.2",
        "7": "5",
        "7.1": "5.1",
        "7.2": "5.2",
        "7.3": "5.3",
        "7.4": "5.4",
        "7.5": "5.5",
        "7.6": "5.6",
        "8": "6",
        "8.1": "6.1",
        "8.2": "6.2",
        "8.3": "6.3",
        "8.4": "6.4",
        "8.5": "6.5",
        "8.6": "6.6",
        "8.7": "6.7",
        "9.1": "4.7",
        "9.2": "7.1",
        "10.1": "7.2",
        "10.2": "7.3",
        "10.3": "7.4",
        "10.4": "7.5",
        "11.1": "8.1",
        "11.2": "8.2",
        "11.3": "8.3",
        "11.4": "8.4",
        "11.5": "8.5",
        "12.1": "9.1",
        "12.2": "9.2",
        "15.2": "11.1",
    },
    _SEED_002: {
        "5.3": "3.8",
        "5.4": "3.9",
        "6": "6.2",
        "7": "6.3",
        "8.3": "6.4",
        "8.4": "6.4",
    },
}

# Sentences the old notes were quoted with, said in the project's own words (each pair:
# the text after its citation is rewritten, its replacement).
QUOTES: tuple[tuple[str, str], ...] = (
    (
        '("a moved\n  interface absent from the host can belong to a live sandbox", design §8.5)',
        "(a moved\n  interface missing from the host may be in a live sandbox, design §8.5)",
    ),
    (
        '(design §6.2: "Kernel connect moves the allocated netdevice and applies its\n'
        'sandbox config")',
        "(design §6.2: kernel connect moves the allocated netdev into the sandbox and\n"
        "configures it there)",
    ),
    (
        '(design §3.2: "Preconditions and postconditions also use registered\n'
        'versioned predicate contracts")',
        "(design §3.2: preconditions and postconditions name registered,\nversioned predicates)",
    ),
    (
        '(the\n"recheck identity/ownership/protected scope" step of design §3.5)',
        "(the\nidentity, ownership and protected-scope re-check of design §3.5)",
    ),
    (
        '(design §6.4: "NodePrepare holds one\nvalidated DRA share/capacity entitlement and '
        'records the parent baseline")',
        "(design §6.4: NodePrepare holds one\nvalidated share of the parent and records the "
        "parent's baseline)",
    ),
    (
        'VFIO connect "verifies device-access readiness without expecting a\nnetdevice" (§6.2)',
        "VFIO connect verifies device access without expecting a\nnetdev (§6.2)",
    ),
)

SECTION = r"\d+(?:\.\d+)*"
# a citation head: an old document's name, this repository's design page, or a docs page
HEAD = re.compile(
    r"(?P<old>\bDESIGN\b|\b[Ss]eed(?:(?P<between>\s+(?:(?:#|//)\s*)?)(?P<num>0\d\d))?\b)"
    r"|(?P<new>\b[\w./-]+\.md\b|\b[Dd]esign\b)"
)
# the text between a head and its first §: the end of a Markdown link, spaces, or a line
# break with a comment marker
GAP = re.compile(r"\)?[ \t]*(?:\n[ \t]*(?:(?:#|//)[ \t]*)?)?(?=§)")
# how far a bare § may follow the head it continues
REACH = 600
REFERENCE = re.compile(rf"§(?P<start>{SECTION})(?:(?P<dash>[–-])(?P<mark>§?)(?P<end>{SECTION}))?")


def _old_document(match: re.Match[str]) -> str:
    if match.group("old").startswith("DESIGN"):
        return _OLD_DESIGN
    return f"seed {match.group('num') or '000'}"


def _new_section(document: str, old: str, where: str) -> str:
    try:
        return TABLE[document][old]
    except KeyError:
        raise ValueError(f"{where}: no design section for {document} §{old}") from None


def rewrite(text: str, where: str = "<text>") -> str:
    """``text`` with every old citation rewritten; unchanged when there is none."""
    edits: list[tuple[int, int, str]] = []
    heads = [m for m in HEAD.finditer(text) if GAP.match(text, m.end())]
    for head in heads:
        if head.group("old"):
            word = "Design" if head.group("old")[0] == "S" else "design"
            gap = GAP.match(text, head.end())
            assert gap is not None
            between = head.group("between") or ""
            # keep a line break that sat inside the head ("seed\n  000 §…") or after it
            edits.append((head.start(), gap.end(), word + (between if "\n" in between else gap[0])))
    for ref in REFERENCE.finditer(text):
        owner = None
        for head in heads:
            if head.start() >= ref.start():
                break
            owner = head
        if owner is None or not owner.group("old") or ref.start() - owner.end() > REACH:
            continue
        document = _old_document(owner)
        start = _new_section(document, ref.group("start"), where)
        new = f"§{start}"
        if ref.group("end"):
            end = _new_section(document, ref.group("end"), where)
            if end != start:
                new += f"{ref.group('dash')}{ref.group('mark')}{end}"
        edits.append((ref.start(), ref.end(), new))
    if not edits:
        return text
    for begin, finish, replacement in sorted(edits, reverse=True):
        text = text[:begin] + replacement + text[finish:]
    text = LIST.sub(_one_list, text)
    for quoted, own_words in QUOTES:
        text = text.replace(quoted, own_words)
    return text


# ``design §a, design §b and §a`` on one line: one head, each section once
LIST = re.compile(rf"\b([Dd]esign) §{SECTION}(?:(?:, | and )(?:design )?§{SECTION}\b(?![–-]))+")
LIST_ITEM = re.compile(rf"(, | and )?(?:design )?§({SECTION})")


def _one_list(match: re.Match[str]) -> str:
    sections: list[str] = []
    last_joiner = ", "
    for item in LIST_ITEM.finditer(match[0]):
        if item[1]:
            last_joiner = item[1]
        if item[2] not in sections:
            sections.append(item[2])
    refs = [f"§{s}" for s in sections]
    joined = refs[0] if len(refs) == 1 else ", ".join(refs[:-1]) + last_joiner + refs[-1]
    return f"{match[1]} {joined}"


def repository_files(root: Path = ROOT) -> Iterator[Path]:
    """The text files whose citations count: sources, docs, data, the chart."""
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        dirs[:] = sorted(
            d
            for d in dirs
            if d not in SKIP_DIRS
            and d not in SKIP_PARTS
            and not (here == root / "dmn" and (here / d).is_symlink())  # links to top folders
        )
        for name in sorted(files):
            path = here / name
            if path.suffix in SUFFIXES or name in NAMES:
                yield path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="list files to rewrite, write none")
    parser.add_argument("--root", type=Path, default=ROOT)
    args = parser.parse_args(argv)
    root: Path = args.root
    changed: list[str] = []
    for path in repository_files(root):
        if path.resolve() == Path(__file__).resolve():
            continue
        try:
            text = path.read_text()
        except (UnicodeDecodeError, OSError):
            continue
        relative = str(path.relative_to(root))
        new = rewrite(text, relative)
        if new == text:
            continue
        changed.append(relative)
        if not args.check:
            path.write_text(new)
        if path.suffix == ".py":
            for number, line in enumerate(new.splitlines(), 1):
                if len(line) > 100 and "§" in line:
                    sys.stderr.write(f"{relative}:{number}: longer than 100 characters\n")
    for relative in changed:
        sys.stdout.write(f"{'would rewrite' if args.check else 'rewrote'} {relative}\n")
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
