"""``dmn schema KIND``: print the JSON Schema of a document kind for editors.

KIND is ``HookProgram``, ``NetworkPlugin`` or ``NetworkTopology`` (case-insensitive).
Exit 0 and the schema as JSON on stdout; 2 with ``E_USAGE`` for an unknown kind.
"""

from __future__ import annotations

import argparse
import json
import sys

from dmn.api.editor_schema import KINDS, editor_schema
from dmn.cli.command_line import CommandParser, UsageError, run_command


def run(argv: list[str]) -> int:
    parser = CommandParser(
        prog="dmn schema",
        description="JSON Schema of HookProgram, NetworkPlugin or NetworkTopology documents "
        "(for YAML language servers: '# yaml-language-server: $schema=FILE').",
    )
    parser.add_argument("kind", metavar="KIND", help=", ".join(KINDS))
    return run_command(parser, argv, _schema)


def _schema(args: argparse.Namespace) -> int:
    by_lower = {k.lower(): k for k in KINDS}
    kind = by_lower.get(str(args.kind).lower())
    if kind is None:
        raise UsageError(f"unknown kind {args.kind!r} (expected one of {', '.join(KINDS)})")
    sys.stdout.write(json.dumps(editor_schema(kind), indent=2) + "\n")
    return 0
