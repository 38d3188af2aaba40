"""The one argument-parsing and usage-error plumbing shared by every ``dmn`` command.

Why one module: each command used to build its own ``argparse`` parser and handle bad
arguments its own way (a diagnostic on stdout, argparse's text on stderr, a one-line
``error[E_ARGS]``), and guessed ``--format json`` from ``argv`` with different rules, so
``--format=json`` behaved differently from ``--format json``. Here:

* :class:`CommandParser` never exits the process on bad arguments; it raises
  :class:`UsageError` (``argparse`` accepts ``--format json`` and ``--format=json`` alike).
* :func:`requested_format` reads the wanted output format from ``argv`` before parsing
  (both spellings), so a usage error is printed in the format the caller asked for.
* :func:`run_command` parses, runs the command body, and reports every usage error —
  from the parser or raised by the body — the same way: exit status 2, code ``E_USAGE``;
  with ``--format json`` one JSON array holding one diagnostic object (the keys of ``dmn
  lint --format json``) on stdout, otherwise one line
  ``<prog>: error[E_USAGE]: <message> (usage: ...)`` on stderr. ``--help`` exits 0.

Contract: a command module builds its parser with :class:`CommandParser`, declares its
output format with :func:`add_format_option` (if it has one) and implements
``run(argv) -> int`` as ``return run_command(parser, argv, body)``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

USAGE_EXIT = 2
USAGE_CODE = "E_USAGE"
FORMAT_FLAG = "--format"


class UsageError(Exception):
    """Bad arguments or an argument combination the command refuses (exit 2, E_USAGE)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class HelpShown(Exception):
    """``--help`` (or ``--version``) printed its text; the command exits with ``status``."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class CommandParser(argparse.ArgumentParser):
    """``argparse`` that raises instead of printing to stderr and exiting.

    Sub-command parsers made with ``add_subparsers`` are of the same class, so their
    errors are raised too. ``intermixed=True`` lets options sit between positionals
    (``get KIND -n NS NAME``, as kubectl accepts).
    """

    def __init__(self, *args: Any, intermixed: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.intermixed = intermixed
        self._mixing = False

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if self.intermixed and not self._mixing:
            self._mixing = True  # parse_known_intermixed_args calls back into this method
            try:
                return self.parse_known_intermixed_args(args, namespace)
            finally:
                self._mixing = False
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        usage = " ".join(self.format_usage().split())  # one line, however long
        raise UsageError(f"{message} ({usage})")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            sys.stderr.write(message)
        if status != 0:
            raise UsageError((message or "").strip() or "bad arguments")
        raise HelpShown(status)


def add_format_option(
    parser: argparse.ArgumentParser, choices: Sequence[str] = ("human", "json")
) -> None:
    """``--format CHOICE`` (also ``--format=CHOICE``); the first choice is the default."""
    parser.add_argument(FORMAT_FLAG, choices=tuple(choices), default=choices[0])


def requested_format(argv: Sequence[str]) -> str | None:
    """The value of the last ``--format X`` / ``--format=X`` in ``argv``, else None.

    Read before parsing so that a usage error can still be reported in that format.
    """
    found: str | None = None
    for index, arg in enumerate(argv):
        if arg == "--":
            break
        if arg == FORMAT_FLAG and index + 1 < len(argv):
            found = argv[index + 1]
        elif arg.startswith(FORMAT_FLAG + "="):
            found = arg.split("=", 1)[1]
    return found


def error_diagnostic(code: str, message: str) -> dict[str, str | int]:
    """The JSON object of an error that has no place in a document: the keys (and
    place-less values) of every ``--format json`` diagnostic (``Diagnostic.to_json`` of a
    diagnostic without a span)."""
    return {
        "code": code,
        "severity": "error",
        "file": "",
        "line": 1,
        "column": 1,
        "path": "",
        "message": message,
    }


def usage_diagnostic(message: str) -> dict[str, str | int]:
    """The JSON object of a usage error (see :func:`error_diagnostic`)."""
    return error_diagnostic(USAGE_CODE, message)


def report_error(prog: str, code: str, message: str, fmt: str | None, status: int) -> int:
    """Print one reason-coded error as the command's callers expect it — a JSON array with
    one diagnostic on stdout when JSON was asked for, else one line on stderr — and return
    ``status``."""
    if fmt == "json":
        sys.stdout.write(json.dumps([error_diagnostic(code, message)], indent=2) + "\n")
    else:
        sys.stderr.write(f"{prog}: error[{code}]: {message}\n")
    return status


def report_usage_error(prog: str, message: str, fmt: str | None) -> int:
    """Print one usage error as the command's callers expect it; returns exit status 2."""
    return report_error(prog, USAGE_CODE, message, fmt, USAGE_EXIT)


def run_command(
    parser: CommandParser,
    argv: Sequence[str],
    body: Callable[[argparse.Namespace], int],
) -> int:
    """Parse ``argv`` and run ``body``; every :class:`UsageError` becomes exit 2 (see above)."""
    fmt = requested_format(argv)
    try:
        args = parser.parse_args(list(argv))
        return body(args)
    except HelpShown as shown:
        return shown.status
    except UsageError as exc:
        return report_usage_error(parser.prog, exc.message, fmt)
