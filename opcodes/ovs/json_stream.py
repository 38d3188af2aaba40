"""The OVSDB session's JSON-RPC message parser, on the standard library's C decoder.

Why: ``ovs.jsonrpc.Connection`` reads every message through ``ovs.json.Parser``. Without the
``ovs._json`` C extension (the PyPI wheel of ``ovs`` has none) that is a per-character Python
lexer: profiling ``ovs/port-attach`` in the kernel lab, lexing the ``get_schema`` reply and the
first monitor snapshot was about 40 % of every effect's time, each session paying seconds
before its first row. :class:`JsonStreamParser` keeps the incremental contract the connection
relies on and hands the complete message to :mod:`json` in one call.

Contract, the one ``ovs.jsonrpc.Connection.recv`` uses (pure-Python mode: counts are
characters): ``feed(text)`` consumes characters up to the end of one top-level value and
returns how many it consumed; ``is_done()`` says a value ended (or an error was found);
``finish()`` returns the value, or an error message string. Values are the ones ``ovs.json``
gives: a JSON number that is an exact integer in the signed 64-bit range is an ``int`` (also
``1.0`` or ``1e2``), other numbers are ``float`` (0 for an underflow, an error for an
overflow); ``NaN``/``Infinity`` and NUL characters in strings are refused, as are nesting
deeper than ``ovs.json.Parser.MAX_HEIGHT`` and trailing garbage inside the value.
Only objects and arrays are JSON-RPC messages: any other top-level value is an error here
(``ovs.json`` would parse it and the connection would then refuse it; both end in EPROTO).
``ovs.json``'s own class cannot be instantiated while this one is installed (its methods
look ``Parser`` up in their module). :func:`use_for_ovsdb` installs it (idempotent);
``tests/opcodes`` compares it with ``ovs.json``'s own parser on generated documents cut into
random chunks.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal, InvalidOperation
from typing import Any

import ovs.json

_ORIGINAL_PARSER: Any = ovs.json.Parser
_WHITESPACE = " \t\n\r"
# the characters that change nesting, and whole strings (so brackets inside them are skipped);
# a string still open at the end of the buffer matches to the end and is scanned again later
_STRUCTURE = re.compile(r'[\[\]{}]|"(?:[^"\\]|\\.)*(?:"|\\?\Z)', re.DOTALL)
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _number(text: str) -> int | float:
    try:
        exact = Decimal(text)
    except InvalidOperation:  # pragma: no cover - json only passes valid number text
        return float(text)
    if exact == exact.to_integral_value() and _INT64_MIN <= exact <= _INT64_MAX:
        return int(exact)
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise ValueError("number outside valid range")
    return value if value != 0 else 0


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class JsonStreamParser:
    """One top-level JSON value, fed in pieces; see the module docstring for the contract."""

    MAX_HEIGHT = 1000

    def __init__(self, check_trailer: bool = False) -> None:
        self._text = ""
        self._start = -1  # index of the value's first character, once seen
        self._scan = 0  # where the structure scan resumes
        self._depth = 0
        self._done = False
        self._value: Any = None
        self._error: str | None = None

    def feed(self, s: str) -> int:
        if self._done:
            return 0
        base = len(self._text)
        self._text += s
        if self._start < 0:
            stripped = self._text.lstrip(_WHITESPACE)
            if not stripped:
                return len(s)
            self._start = self._scan = len(self._text) - len(stripped)
            if stripped[0] not in "{[":
                self._fail("a JSON-RPC message is an object or an array")
                return self._start + 1 - base
        end = self._find_end()
        if end is None:
            return len(s)
        self._complete(self._text[self._start : end])
        return end - base

    def _find_end(self) -> int | None:
        for match in _STRUCTURE.finditer(self._text, self._scan):
            token = match.group()
            if token[0] == '"':
                if not _closed(token):  # still open: scan it again with more text
                    self._scan = match.start()
                    return None
                continue
            if token in "[{":
                self._depth += 1
                if self._depth > self.MAX_HEIGHT:
                    self._fail("input exceeds maximum nesting depth")
                    return match.end()
            else:
                self._depth -= 1
                if self._depth == 0:
                    return match.end()
        self._scan = len(self._text)
        return None

    def _complete(self, document: str) -> None:
        self._done = True
        try:
            self._value = json.loads(
                document, parse_float=_number, parse_int=_number, parse_constant=_no_constant
            )
        except (ValueError, RecursionError) as exc:
            self._error = f"syntax error: {exc}"
            return
        if "\\u0000" in document and _has_null(self._value):
            self._error = "null bytes not supported in quoted strings"

    def _fail(self, message: str) -> None:
        self._done = True
        self._error = message

    def is_done(self) -> bool:
        return self._done

    def finish(self) -> Any:
        if self._error is not None:
            return self._error
        if not self._done:
            return "unexpected end of input" if self._start >= 0 else "empty input stream"
        return self._value


def _has_null(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, list):
        return any(_has_null(v) for v in value)
    if isinstance(value, dict):
        return any(_has_null(k) or _has_null(v) for k, v in value.items())
    return False


def _closed(token: str) -> bool:
    """A string token ends with an unescaped quote (an even run of backslashes before it)."""
    if len(token) < 2 or token[-1] != '"':
        return False
    backslashes = len(token) - 1 - len(token[:-1].rstrip("\\"))
    return backslashes % 2 == 0


def use_for_ovsdb() -> None:
    """Make every ``ovs.jsonrpc.Connection`` of this process parse with
    :class:`JsonStreamParser` (the connection looks ``ovs.json.Parser`` up per message)."""
    if ovs.json.PARSER == ovs.json.PARSER_PY:
        ovs.json.Parser = JsonStreamParser
