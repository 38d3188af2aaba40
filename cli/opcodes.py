"""``dmn opcodes [NAME] [--format markdown|json]``: the opcode reference from the specs.

``NAME`` is an opcode (``linux/link-move/v1``) or a family (``linux``); without it every
opcode is listed. Exit 0 on success, 2 when ``NAME`` matches no opcode (``E_UNKNOWN_OPCODE``:
a bad argument, the exit status of every usage error and of ``dmn schema UNKNOWN``; a JSON
diagnostic on stdout with ``--format json``), 2 on usage errors (:mod:`dmn.cli.command_line`).
"""

from __future__ import annotations

import argparse
import json
import sys

from dmn.cli.command_line import CommandParser, add_format_option, report_error, run_command
from dmn.opcodes.reference import describe, render_document, render_markdown
from dmn.opcodes.registry import default_registry
from dmn.opcodes.spec import OpcodeSpec


def select(name: str | None) -> list[OpcodeSpec]:
    """The specs ``NAME`` denotes: one opcode, a whole family, or everything."""
    registry = default_registry()
    specs = [s for n in registry.names() if (s := registry.get(n)) is not None]
    if name is None:
        return specs
    exact = registry.get(name)
    if exact is not None:
        return [exact]
    prefix = name.rstrip("/") + "/"
    return [s for s in specs if s.name.startswith(prefix)]


def run(argv: list[str]) -> int:
    parser = CommandParser(
        prog="dmn opcodes", description="Describe the opcodes a HookProgram may use."
    )
    parser.add_argument("name", nargs="?", metavar="NAME", help="an opcode or a family")
    add_format_option(parser, ("markdown", "json"))
    return run_command(parser, argv, _describe)


def _describe(args: argparse.Namespace) -> int:
    specs = select(args.name)
    if not specs:
        known = ", ".join(default_registry().names())
        message = f"no opcode or family {args.name!r} (known: {known})"
        fmt = "json" if args.format == "json" else None
        return report_error("dmn opcodes", "E_UNKNOWN_OPCODE", message, fmt, 2)
    entries = [describe(s) for s in specs]
    if args.format == "json":
        payload = entries[0] if args.name is not None and len(entries) == 1 else entries
        sys.stdout.write(json.dumps(payload, indent=2) + "\n")
    elif args.name is None:
        sys.stdout.write(render_document(entries))
    else:
        sys.stdout.write("\n".join(render_markdown(e) for e in entries))
    return 0
