"""Descriptor port conditions (``when:`` on a port) evaluated against validated config.

A descriptor declares mode-dependent ports, e.g. ``interface`` only when
``call.config.mode == 'kernel'``. The compiler resolves them once, against the
strictly validated config, and records the resolved contract in the revision.

The accepted guard language is the grammar's guard subset restricted to config
references and literals: ``call.config.<field>``, string/integer/boolean literals,
``== != < <= > >= in``, ``and or not`` and parentheses.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_TOKEN = re.compile(
    r"\s*(?:(?P<num>-?\d+)|(?P<str>'[^']*'|\"[^\"]*\")|(?P<op>==|!=|<=|>=|<|>|\(|\)|\[|\]|,)"
    r"|(?P<word>[A-Za-z_][A-Za-z0-9_.]*))"
)


class GuardError(ValueError):
    """The guard is not in the accepted subset or references an unknown field."""


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise GuardError(f"unexpected character at column {pos + 1}")
        kind = m.lastgroup or ""
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, text: str, config: Mapping[str, Any]) -> None:
        self.toks = _tokens(text)
        self.i = 0
        self.config = config

    def peek(self) -> tuple[str, str] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> tuple[str, str]:
        tok = self.peek()
        if tok is None:
            raise GuardError("unexpected end of guard")
        self.i += 1
        return tok

    def expect(self, value: str) -> None:
        if self.take()[1] != value:
            raise GuardError(f"expected {value!r}")

    def parse(self) -> bool:
        value = self.or_()
        if self.peek() is not None:
            raise GuardError(f"unexpected {self.peek()[1]!r}")  # type: ignore[index]
        return bool(value)

    def or_(self) -> Any:
        left = self.and_()
        while self.peek() == ("word", "or"):
            self.take()
            right = self.and_()
            left = bool(left) or bool(right)
        return left

    def and_(self) -> Any:
        left = self.not_()
        while self.peek() == ("word", "and"):
            self.take()
            right = self.not_()
            left = bool(left) and bool(right)
        return left

    def not_(self) -> Any:
        if self.peek() == ("word", "not"):
            self.take()
            return not bool(self.not_())
        return self.compare()

    def compare(self) -> Any:
        left = self.atom()
        tok = self.peek()
        if tok is not None and (tok[0] == "op" and tok[1] in {"==", "!=", "<", "<=", ">", ">="}):
            op = self.take()[1]
            right = self.atom()
            if op == "==":
                return left == right and type(left) is type(right)
            if op == "!=":
                return not (left == right and type(left) is type(right))
            if not (isinstance(left, int) and isinstance(right, int)):
                raise GuardError("ordering comparisons need integers")
            return {"<": left < right, "<=": left <= right, ">": left > right, ">=": left >= right}[
                op
            ]
        if tok == ("word", "in"):
            self.take()
            right = self.atom()
            if not isinstance(right, list):
                raise GuardError("'in' needs a list")
            return left in right
        return left

    def atom(self) -> Any:
        kind, text = self.take()
        if kind == "num":
            return int(text)
        if kind == "str":
            return text[1:-1]
        if text == "(":
            value = self.or_()
            self.expect(")")
            return value
        if text == "[":
            items: list[Any] = []
            while self.peek() != ("op", "]"):
                items.append(self.atom())
                if self.peek() == ("op", ","):
                    self.take()
            self.expect("]")
            return items
        if kind == "word":
            if text in ("true", "false"):
                return text == "true"
            if text.startswith("call.config."):
                field = text.removeprefix("call.config.")
                if field not in self.config:
                    raise GuardError(f"guard references unknown config field {field!r}")
                return self.config[field]
        raise GuardError(f"unsupported term {text!r} in a port condition")


def evaluate_guard(text: str, config: Mapping[str, Any]) -> bool:
    """Evaluate ``text`` over ``config``; raises :class:`GuardError` for bad guards."""
    return _Parser(text, config).parse()
