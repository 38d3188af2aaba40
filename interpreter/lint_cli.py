"""``dmn lint PATH... [--plugins DIR]... [--format human|json]``.

Exit status: 0 no errors, 1 errors found, 2 usage errors or unreadable input (reported
as diagnostics ``E_USAGE`` / ``E_IO``, never as a traceback). ``--format json`` prints
one JSON array of objects with exactly the keys code, severity, file, line, column,
path, message (line and column 1-based).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from typing import NoReturn

from dmn.interpreter.diagnostics import Code, Diagnostic
from dmn.interpreter.lint import LintResult, lint_paths, render_human


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _UsageError(message)


def _parser() -> _Parser:
    parser = _Parser(
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
    parser.add_argument("--format", choices=("human", "json"), default="human")
    parser.add_argument(
        "--no-builtins", action="store_true", help="do not resolve against the builtin plugins"
    )
    return parser


def _emit(result: LintResult, fmt: str) -> None:
    if fmt == "json":
        sys.stdout.write(json.dumps([d.to_json() for d in result.diagnostics], indent=2) + "\n")
    else:
        sys.stdout.write(render_human(result) + "\n")


def run(argv: list[str]) -> int:
    fmt = "json" if "--format=json" in argv or _follows(argv, "--format", "json") else "human"
    try:
        args = _parser().parse_args(argv)
        if not args.paths:
            raise _UsageError("at least one PATH is required")
    except _UsageError as exc:
        usage = Diagnostic(code=Code.E_USAGE, message=f"{exc} ({_parser().format_usage().strip()})")
        _emit(LintResult([usage], [], {}), fmt)
        return 2
    result = lint_paths(args.paths, plugin_dirs=args.plugins, include_builtins=not args.no_builtins)
    _emit(result, args.format)
    return result.exit_code


def _follows(argv: list[str], flag: str, value: str) -> bool:
    return any(a == flag and b == value for a, b in itertools.pairwise(argv))


def main() -> int:  # pragma: no cover - convenience for `python -m`
    return run(sys.argv[1:])


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
