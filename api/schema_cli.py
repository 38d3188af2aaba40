"""``dmn schema KIND``: print the JSON Schema of a document kind for editors.

KIND is ``HookProgram``, ``NetworkPlugin`` or ``NetworkTopology`` (case-insensitive).
Exit 0 and the schema as JSON on stdout; 2 with ``E_USAGE`` for an unknown kind.
"""

from __future__ import annotations

import argparse
import json
import sys

from dmn.api.editor_schema import KINDS, editor_schema


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="dmn schema",
        description="JSON Schema of HookProgram, NetworkPlugin or NetworkTopology documents "
        "(for YAML language servers: '# yaml-language-server: $schema=FILE').",
    )
    parser.add_argument("kind", metavar="KIND", help=", ".join(KINDS))
    args = parser.parse_args(argv)
    by_lower = {k.lower(): k for k in KINDS}
    kind = by_lower.get(str(args.kind).lower())
    if kind is None:
        sys.stderr.write(
            f"dmn schema: error[E_USAGE]: unknown kind {args.kind!r} "
            f"(expected one of {', '.join(KINDS)})\n"
        )
        return 2
    sys.stdout.write(json.dumps(editor_schema(kind), indent=2) + "\n")
    return 0
