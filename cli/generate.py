"""``dmn generate``: regenerate every checked-in generated file, or check for drift.

Each generator is ``module:function`` taking ``(root: Path, check: bool) -> list[str]``
and returning the repository-relative paths that differ from what it would write (with
``check=True`` it writes nothing). CI runs ``dmn generate --check`` and fails on drift.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from dmn.cli.command_line import CommandParser, UsageError, run_command

GENERATORS: list[str] = [
    "dmn.api.crdgen:generate",
    "dmn.api.builtin_plugins:generate",
    "dmn.agent.protos.generate:generate",
    "dmn.reference_docs:generate",
]


def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


def run(argv: list[str]) -> int:
    parser = CommandParser(prog="dmn generate", description=__doc__)
    parser.add_argument("--check", action="store_true", help="report drift, write nothing")
    parser.add_argument("--root", type=Path, default=repo_root(), help="repository root")
    return run_command(parser, argv, _generate)


def _generate(args: argparse.Namespace) -> int:
    root: Path = args.root
    if not (root / "pyproject.toml").is_file() or not (root / "dmn").is_dir():
        raise UsageError(f"{root} is not the repository root")
    drift: list[str] = []
    for entry in GENERATORS:
        module_name, func_name = entry.split(":")
        func = getattr(importlib.import_module(module_name), func_name)
        try:
            drift += func(root, args.check)
        except (OSError, ValueError) as exc:
            sys.stderr.write(f"dmn generate: error[E_IO]: {module_name}: {exc}\n")
            return 1
    if args.check and drift:
        for path in drift:
            sys.stderr.write(f"dmn generate: {path} is out of date; run `dmn generate`\n")
        return 1
    for path in drift:
        sys.stdout.write(f"wrote {path}\n")
    return 0
