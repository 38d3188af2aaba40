"""``dmn lint PATH... [--plugins DIR]... [--format human|json]``.

Exit status: 0 no errors, 1 errors found, 2 usage errors or unreadable input (reported
as diagnostics ``E_USAGE`` / ``E_IO``, never as a traceback; bad arguments are reported
by :mod:`dmn.cli.command_line` like every command's). ``--format json`` prints
one JSON array of objects with exactly the keys code, severity, file, line, column,
path, message (line and column 1-based).
"""

from __future__ import annotations

import argparse
import json
import sys

from dmn.cli.command_line import CommandParser, UsageError, add_format_option, run_command
from dmn.interpreter.lint import LintResult, lint_paths, render_human


def _parser() -> CommandParser:
    parser = CommandParser(
        prog="dmn lint",
        description="Check hook programs, NetworkPlugin CRs and registered document kinds.",
    )
    parser.add_argument("paths", nargs="*", metavar="PATH", help="files or folders to lint")
    parser.add_argument(
        "--plugins",
        action="append",
        default=[],
        metavar="DIR",
        help="extra plugins (plugin directories or NetworkPlugin CRs) to resolve programs",
    )
    add_format_option(parser)
    parser.add_argument(
        "--no-builtins", action="store_true", help="do not resolve against the builtin plugins"
    )
    return parser


def _emit(result: LintResult, fmt: str) -> None:
    if fmt == "json":
        sys.stdout.write(json.dumps([d.to_json() for d in result.diagnostics], indent=2) + "\n")
    else:
        sys.stdout.write(render_human(result) + "\n")


def _lint(args: argparse.Namespace) -> int:
    if not args.paths:
        raise UsageError("at least one PATH is required")
    result = lint_paths(args.paths, plugin_dirs=args.plugins, include_builtins=not args.no_builtins)
    _emit(result, args.format)
    return result.exit_code


def run(argv: list[str]) -> int:
    return run_command(_parser(), argv, _lint)


def main() -> int:  # pragma: no cover - convenience for `python -m`
    return run(sys.argv[1:])


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
