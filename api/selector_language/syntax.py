"""The syntax of CEL device selectors: a linear-time parser to a small AST.

The ``cel`` binding compiles and runs expressions but exposes no syntax tree, so nothing
could be known about an expression before running it. This parser (LALR, callbacks at
reduce time, so no recursion over the input) gives the type checker and the cost estimator
a tree to work on. It follows the CEL grammar (github.com/google/cel-spec, langdef.md);
the forms Kubernetes device selectors cannot use (message construction, optional syntax
``?.`` and ``[?``) are syntax errors here.

Contract: :func:`parse` returns an :class:`Expr` or raises :class:`SyntaxProblem` with the
1-based column of the first offending character. Inputs longer than
:data:`MAX_EXPRESSION_LENGTH` or nested deeper than :data:`MAX_NESTING` are refused before
any tree is built (their cost is bounded by the length).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from lark import Lark, Token
from lark.exceptions import LarkError, UnexpectedInput

#: Kubernetes' CELSelectorExpressionMaxLength (k8s.io/api/resource/v1).
MAX_EXPRESSION_LENGTH = 10 * 1024
#: Bound on syntactic nesting; the checker and the estimator recurse over the tree.
MAX_NESTING = 100


class SyntaxProblem(Exception):
    """The expression is not CEL this parser accepts; ``column`` is 1-based."""

    def __init__(self, message: str, column: int) -> None:
        super().__init__(message)
        self.column = column


@dataclass(frozen=True, slots=True)
class Expr:
    """One node: ``column`` is where it starts (1-based), ``depth`` its nesting height."""

    column: int
    depth: int = field(compare=False)


@dataclass(frozen=True, slots=True)
class Literal(Expr):
    kind: str  # int | uint | double | string | bytes | bool | null
    #: a string's or bytes' length in the source (an upper bound on its value's length)
    length: int
    value: object = None


@dataclass(frozen=True, slots=True)
class Ident(Expr):
    name: str


@dataclass(frozen=True, slots=True)
class Select(Expr):
    operand: Expr
    name: str


@dataclass(frozen=True, slots=True)
class Call(Expr):
    """A function or operator (``_+_``, ``!_``, ``_[_]``...) or a member call (``target``)."""

    function: str
    args: tuple[Expr, ...]
    target: Expr | None = None


@dataclass(frozen=True, slots=True)
class ListLiteral(Expr):
    elements: tuple[Expr, ...]


@dataclass(frozen=True, slots=True)
class MapLiteral(Expr):
    entries: tuple[tuple[Expr, Expr], ...]


def _depth(*children: object) -> int:
    return 1 + max((c.depth for c in children if isinstance(c, Expr)), default=0)


def _column(item: Any) -> int:
    if isinstance(item, Token):
        return int(item.column or 1)
    if isinstance(item, Expr):
        return item.column
    return 1


def _literal(token: Token) -> Literal:
    text = str(token)
    col = int(token.column or 1)
    kind = token.type
    if kind == "INT":
        return Literal(col, 1, "int", 1, int(text, 16 if text.startswith("0x") else 10))
    if kind == "UINT":
        body = text[:-1]
        return Literal(col, 1, "uint", 1, int(body, 16 if body.startswith("0x") else 10))
    if kind == "FLOAT":
        return Literal(col, 1, "double", 1, float(text))
    if kind in ("TRUE", "FALSE"):
        return Literal(col, 1, "bool", 1, kind == "TRUE")
    if kind == "NULL":
        return Literal(col, 1, "null", 1, None)
    quote = text.lstrip("rRbB")
    delim = 3 if quote[:3] in ('"""', "'''") else 1
    body = quote[delim:-delim]
    return Literal(col, 1, "bytes" if kind == "BYTES" else "string", len(body), body)


class _Build:
    """Reduce-time callbacks building :class:`Expr` nodes (no tree recursion)."""

    def ident(self, items: list[Any]) -> Expr:
        name = items[-1]
        return Ident(_column(name), 1, str(name))

    def literal(self, items: list[Any]) -> Expr:
        return _literal(items[0])

    def args(self, items: list[Any]) -> list[Expr]:
        if len(items) == 1:
            return [items[0]]
        items[0].append(items[1])
        return list(items[0])

    def entry(self, items: list[Any]) -> tuple[Expr, Expr]:
        return (items[0], items[1])

    def entries(self, items: list[Any]) -> list[tuple[Expr, Expr]]:
        if len(items) == 1:
            return [items[0]]
        items[0].append(items[1])
        return list(items[0])

    def call(self, items: list[Any]) -> Expr:
        name, args = items[0], tuple(items[1] or ())
        return Call(_column(name), _depth(*args), str(name), args)

    def method(self, items: list[Any]) -> Expr:
        target, name, args = items[0], items[1], tuple(items[2] or ())
        return Call(_column(target), _depth(target, *args), str(name), args, target)

    def select(self, items: list[Any]) -> Expr:
        operand, name = items
        return Select(_column(operand), _depth(operand), operand, str(name))

    def index(self, items: list[Any]) -> Expr:
        operand, key = items
        return Call(_column(operand), _depth(operand, key), "_[_]", (operand, key))

    def list_literal(self, items: list[Any]) -> Expr:
        elements = tuple(items[0] or ())
        return ListLiteral(1, _depth(*elements), elements)

    def map_literal(self, items: list[Any]) -> Expr:
        entries = tuple(items[0] or ())
        flat = [e for pair in entries for e in pair]
        return MapLiteral(1, _depth(*flat), entries)

    def binary(self, items: list[Any]) -> Expr:
        lhs, op, rhs = items
        return Call(_column(lhs), _depth(lhs, rhs), f"_{op}_", (lhs, rhs))

    def logical_or(self, items: list[Any]) -> Expr:
        return Call(_column(items[0]), _depth(*items), "_||_", tuple(items))

    def logical_and(self, items: list[Any]) -> Expr:
        return Call(_column(items[0]), _depth(*items), "_&&_", tuple(items))

    def ternary(self, items: list[Any]) -> Expr:
        return Call(_column(items[0]), _depth(*items), "_?_:_", tuple(items))

    def unary(self, items: list[Any]) -> Expr:
        op, operand = items
        return Call(_column(op), _depth(operand), f"{op}_", (operand,))


class _Callbacks:
    """Wraps :class:`_Build` so each node's nesting is checked as it is reduced."""

    def __init__(self) -> None:
        self._build = _Build()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._build, name)

        def checked(items: list[Any]) -> Any:
            node = method(items)
            if isinstance(node, Expr) and node.depth > MAX_NESTING:
                raise SyntaxProblem(f"nested deeper than {MAX_NESTING} levels", node.column)
            return node

        return checked


@functools.cache
def _parser() -> Lark:
    grammar = resources.files(__package__).joinpath("cel.lark").read_text(encoding="utf-8")
    return Lark(grammar, parser="lalr", lexer="contextual", transformer=_Callbacks())


def parse(expression: str) -> Expr:
    """The syntax tree of ``expression``, or :class:`SyntaxProblem`."""
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise SyntaxProblem(
            f"expression is {len(expression)} characters long;"
            f" Kubernetes allows at most {MAX_EXPRESSION_LENGTH}",
            1,
        )
    try:
        tree = _parser().parse(expression)
    except SyntaxProblem:
        raise
    except UnexpectedInput as exc:
        token = getattr(exc, "token", None)
        shown = f" near {str(token)[:20]!r}" if token else ""
        raise SyntaxProblem(f"syntax error{shown}", int(exc.column or 1)) from None
    except LarkError as exc:
        inner = getattr(exc, "orig_exc", None)
        if isinstance(inner, SyntaxProblem):
            raise inner from None
        raise SyntaxProblem("syntax error", 1) from None
    if not isinstance(tree, Expr):
        raise SyntaxProblem("syntax error", 1)
    return tree
