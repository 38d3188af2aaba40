"""The expression parser: ``grammar/effects.lark`` to a typed AST with source spans.

Every ``from:``, ``forEach.in:`` and ``when:`` value of a document is parsed here. The
grammar (package data, LALR) is compiled once per process and parse trees are cached
per expression text; the AST is rebuilt per use so that every node carries the
absolute :class:`SourceSpan` of *its own* first character — the YAML position of the
scalar plus the column inside the expression.

References are classified syntactically into typed nodes (``ConfigRef``, ``InputRef``,
``PreparedRef``, ``AllocationRef``, ``SandboxRef``, ``EffectRef``, ``VarRef``); whether
a reference is *available* in a hook, points backwards or has the right type is the
checker's concern. Entry points return ``(ast | None, diagnostics)`` and never raise.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

from lark import Lark, Token, Tree
from lark.exceptions import LarkError, UnexpectedInput

from dmn.interpreter.diagnostics import Code, Diagnostic, SourceSpan
from dmn.interpreter.source import ExpressionSpans

#: Longest expression accepted (expressions are bounded, design §3.3).
MAX_EXPRESSION_LENGTH = 1024
#: Deepest parenthesis / operator nesting accepted.
MAX_DEPTH = 32

SpanFn = Callable[[int, int], SourceSpan | None]
"""Maps (line, column) inside an expression (1-based) to an absolute position."""


# --------------------------------------------------------------------------- AST


@dataclass(frozen=True, slots=True)
class Node:
    span: SourceSpan | None


@dataclass(frozen=True, slots=True)
class ConfigRef(Node):
    """``call.config.<field>``, or ``call.config.<field>.<member>``: a property of a
    top-level object field (a parameter binding may read one; a guard may not)."""

    field: str
    member: str | None = None

    def text(self) -> str:
        return f"call.config.{self.path}"

    @property
    def path(self) -> str:
        """The field's path below ``config`` (``sysctls.ipv4RpFilter``)."""
        return self.field if self.member is None else f"{self.field}.{self.member}"


@dataclass(frozen=True, slots=True)
class InputRef(Node):
    port: str
    index: int | None = None

    def text(self) -> str:
        return f"call.inputs.{self.port}" + _index_text(self.index)


@dataclass(frozen=True, slots=True)
class PreparedRef(Node):
    port: str
    index: int | None = None

    def text(self) -> str:
        return f"call.prepared.{self.port}" + _index_text(self.index)


@dataclass(frozen=True, slots=True)
class AllocationRef(Node):
    port: str | None = None
    index: int | None = None

    def text(self) -> str:
        tail = f".{self.port}" if self.port is not None else ""
        return f"call.allocation{tail}" + _index_text(self.index)


@dataclass(frozen=True, slots=True)
class SandboxRef(Node):
    def text(self) -> str:
        return "call.sandbox"


@dataclass(frozen=True, slots=True)
class EffectRef(Node):
    effect: str
    port: str
    index: int | None = None

    def text(self) -> str:
        return f"effects.{self.effect}.{self.port}" + _index_text(self.index)


@dataclass(frozen=True, slots=True)
class VarRef(Node):
    name: str

    def text(self) -> str:
        return self.name


Reference = ConfigRef | InputRef | PreparedRef | AllocationRef | SandboxRef | EffectRef | VarRef

LiteralValue = str | int | bool | None


@dataclass(frozen=True, slots=True)
class Literal(Node):
    value: LiteralValue


@dataclass(frozen=True, slots=True)
class ListLiteral(Node):
    items: tuple[Literal, ...]


@dataclass(frozen=True, slots=True)
class Compare(Node):
    op: str  # == != < <= > >= in notin
    left: Expr
    right: Expr


@dataclass(frozen=True, slots=True)
class BoolOp(Node):
    op: str  # and | or
    left: Expr
    right: Expr


@dataclass(frozen=True, slots=True)
class Not(Node):
    operand: Expr


Expr = Reference | Literal | ListLiteral | Compare | BoolOp | Not

REFERENCE_TYPES = (ConfigRef, InputRef, PreparedRef, AllocationRef, SandboxRef, EffectRef, VarRef)


def _index_text(index: int | None) -> str:
    return f"[{index}]" if index is not None else ""


# --------------------------------------------------------------------------- parsing


@lru_cache(maxsize=1)
def grammar_text() -> str:
    return resources.files("dmn.grammar").joinpath("effects.lark").read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def _parser() -> Lark:
    return Lark(
        grammar_text(),
        parser="lalr",
        start=["guard", "ref"],
        propagate_positions=True,
        maybe_placeholders=False,
    )


class _ExprError(Exception):
    def __init__(self, code: Code, message: str, line: int, column: int) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.line = line
        self.column = column


@lru_cache(maxsize=4096)
def _parse_tree(text: str, start: str) -> Tree[Token] | _ExprError:
    if len(text) > MAX_EXPRESSION_LENGTH:
        return _ExprError(
            Code.E_SYNTAX, f"expression longer than {MAX_EXPRESSION_LENGTH} characters", 1, 1
        )
    if not text.strip():
        return _ExprError(Code.E_SYNTAX, "empty expression", 1, 1)
    try:
        return _parser().parse(text, start=start)
    except UnexpectedInput as exc:
        line = exc.line if isinstance(exc.line, int) and exc.line > 0 else 1
        column = exc.column if isinstance(exc.column, int) and exc.column > 0 else len(text) + 1
        what = "a reference" if start == "ref" else "an expression"
        token = getattr(exc, "token", None)
        if token is not None and getattr(token, "type", "") == "$END":
            message = f"unexpected end of {what}"
        elif token is not None:
            message = f"unexpected {str(token)!r} in {what}"
        else:
            char = getattr(exc, "char", "")
            message = f"unexpected character {char!r} in {what}"
        return _ExprError(Code.E_SYNTAX, message, line, column)
    except (LarkError, RecursionError) as exc:
        return _ExprError(Code.E_SYNTAX, f"invalid expression: {exc}", 1, 1)


class _Builder:
    def __init__(self, span_of: SpanFn) -> None:
        self.span_of = span_of

    def span(self, item: Tree[Token] | Token) -> SourceSpan | None:
        if isinstance(item, Token):
            return self.span_of(item.line or 1, item.column or 1)
        meta = item.meta
        if getattr(meta, "empty", True):
            return self.span_of(1, 1)
        return self.span_of(meta.line, meta.column)

    def pos(self, item: Tree[Token] | Token) -> tuple[int, int]:
        if isinstance(item, Token):
            return item.line or 1, item.column or 1
        meta = item.meta
        if getattr(meta, "empty", True):
            return 1, 1
        return meta.line, meta.column

    def build(self, tree: Tree[Token] | Token, depth: int = 0) -> Expr:
        if depth > MAX_DEPTH:
            line, column = self.pos(tree)
            raise _ExprError(
                Code.E_SYNTAX, f"expression nests deeper than {MAX_DEPTH}", line, column
            )
        if isinstance(tree, Token):  # pragma: no cover - grammar wraps every token
            line, column = self.pos(tree)
            raise _ExprError(Code.E_SYNTAX, f"unexpected {tree!s}", line, column)
        rule = str(tree.data)
        span = self.span(tree)
        kids = tree.children
        if rule == "ref":
            return self.reference(tree)
        if rule in ("string", "single_string", "integer", "true", "false", "null"):
            return self.literal(tree)
        if rule == "list":
            items = tuple(self.literal(k) for k in kids if isinstance(k, Tree))
            return ListLiteral(span, items)
        if rule in ("or_op", "and_op"):
            left, right = (k for k in kids if isinstance(k, Tree))
            return BoolOp(
                span, rule[:-3], self.build(left, depth + 1), self.build(right, depth + 1)
            )
        if rule == "not_op":
            (operand,) = (k for k in kids if isinstance(k, Tree))
            return Not(span, self.build(operand, depth + 1))
        if rule == "compare":
            left_t, op, right_t = kids
            assert isinstance(left_t, Tree) and isinstance(right_t, Tree)
            return Compare(
                span, str(op), self.build(left_t, depth + 1), self.build(right_t, depth + 1)
            )
        if rule in ("in_op", "not_in_op"):
            left_t, right_t = (k for k in kids if isinstance(k, Tree))
            in_op = "in" if rule == "in_op" else "not in"
            return Compare(
                span, in_op, self.build(left_t, depth + 1), self.build(right_t, depth + 1)
            )
        line, column = self.pos(tree)  # pragma: no cover - every rule handled above
        raise _ExprError(Code.E_SYNTAX, f"unsupported construct {rule}", line, column)

    def literal(self, tree: Tree[Token]) -> Literal:
        rule = str(tree.data)
        span = self.span(tree)
        if rule == "true":
            return Literal(span, True)
        if rule == "false":
            return Literal(span, False)
        if rule == "null":
            return Literal(span, None)
        token = tree.children[0]
        raw = str(token)
        if rule == "integer":
            value = int(raw)
            if abs(value) >= 2**63:
                line, column = self.pos(tree)
                raise _ExprError(Code.E_SYNTAX, "integer literal out of range", line, column)
            return Literal(span, value)
        # Quoted strings: only \" \' and \\ escapes exist in the grammar.
        body = raw[1:-1]
        return Literal(span, _unescape(body))

    def reference(self, tree: Tree[Token]) -> Reference:
        names = [k for k in tree.children if isinstance(k, Token)]
        index_trees = [k for k in tree.children if isinstance(k, Tree)]
        index: int | None = None
        if index_trees:
            raw_index = str(index_trees[0].children[0])
            if len(raw_index) > 4:
                line, column = self.pos(index_trees[0])
                raise _ExprError(Code.E_SYNTAX, "index out of range", line, column)
            index = int(raw_index)
        parts = [str(n) for n in names]
        span = self.span(tree)
        line, column = self.pos(tree)
        text = ".".join(parts) + _index_text(index)

        def unresolved(why: str) -> _ExprError:
            return _ExprError(Code.E_REF_UNRESOLVED, f"{text!r}: {why}", line, column)

        root = parts[0]
        if root == "call":
            if len(parts) < 2:
                raise unresolved(
                    "expected call.config, call.inputs, call.prepared, call.allocation "
                    "or call.sandbox"
                )
            area = parts[1]
            rest = parts[2:]
            if area == "config":
                if len(rest) not in (1, 2) or index is not None:
                    raise unresolved("expected call.config.<field> or call.config.<field>.<member>")
                return ConfigRef(span, rest[0], rest[1] if len(rest) == 2 else None)
            if area == "inputs":
                if len(rest) != 1:
                    raise unresolved("expected call.inputs.<port>")
                return InputRef(span, rest[0], index)
            if area == "prepared":
                if len(rest) != 1:
                    raise unresolved("expected call.prepared.<port>")
                return PreparedRef(span, rest[0], index)
            if area == "allocation":
                if len(rest) > 1:
                    raise unresolved("expected call.allocation or call.allocation.<port>")
                return AllocationRef(span, rest[0] if rest else None, index)
            if area == "sandbox":
                if rest or index is not None:
                    raise unresolved("call.sandbox has no fields")
                return SandboxRef(span)
            raise unresolved(f"unknown call field {area!r}")
        if root == "effects":
            if len(parts) != 3:
                raise unresolved("expected effects.<id>.<port>")
            return EffectRef(span, parts[1], parts[2], index)
        if len(parts) == 1 and index is None:
            return VarRef(span, root)
        raise unresolved("unknown reference root (expected call, effects or a forEach variable)")


def _unescape(body: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            out.append(body[i + 1])
            i += 2
            continue
        out.append(ch)
        i += 1
    return "".join(out)


def _parse(
    text: str, start: str, span_of: SpanFn, path: str
) -> tuple[Expr | None, list[Diagnostic]]:
    if not isinstance(text, str):
        return None, [
            Diagnostic.at(Code.E_SYNTAX, "expression must be a string", span_of(1, 1), path)
        ]
    if span_of is _no_span or isinstance(span_of, ExpressionSpans):
        expr, diags = _parse_positioned(text, start, span_of, path)
        return expr, list(diags)
    return _build(text, start, span_of, path)


@lru_cache(maxsize=16384)
def _parse_positioned(
    text: str, start: str, span_of: SpanFn, path: str
) -> tuple[Expr | None, tuple[Diagnostic, ...]]:
    """:func:`_build` for a span function that names its position by value: the same text
    at the same position gives the same AST (immutable nodes), built once (issue 15: the
    checker parses every expression of a plugin again for each step that uses it)."""
    expr, diags = _build(text, start, span_of, path)
    return expr, tuple(diags)


def _build(
    text: str, start: str, span_of: SpanFn, path: str
) -> tuple[Expr | None, list[Diagnostic]]:
    tree = _parse_tree(text, start)
    try:
        if isinstance(tree, _ExprError):
            raise tree
        return _Builder(span_of).build(tree), []
    except _ExprError as exc:
        return None, [Diagnostic.at(exc.code, exc.message, span_of(exc.line, exc.column), path)]
    except RecursionError:
        return None, [
            Diagnostic.at(Code.E_SYNTAX, "expression nests too deeply", span_of(1, 1), path)
        ]


def _no_span(line: int, column: int) -> SourceSpan | None:
    return SourceSpan("<expression>", line, column)


def parse_reference(
    text: str, span_of: SpanFn = _no_span, path: str = ""
) -> tuple[Reference | None, list[Diagnostic]]:
    """Parse a ``from:`` value: exactly one reference, nothing else."""
    expr, diags = _parse(text, "ref", span_of, path)
    if expr is None:
        return None, diags
    assert isinstance(expr, REFERENCE_TYPES)
    return expr, diags


def parse_guard(
    text: str, span_of: SpanFn = _no_span, path: str = ""
) -> tuple[Expr | None, list[Diagnostic]]:
    """Parse a ``when:`` guard."""
    return _parse(text, "guard", span_of, path)


# --------------------------------------------------------------------------- walking


def references(expr: Expr) -> list[Reference]:
    """Every reference in ``expr``, in source order."""
    if isinstance(expr, REFERENCE_TYPES):
        return [expr]
    if isinstance(expr, Compare | BoolOp):
        return references(expr.left) + references(expr.right)
    if isinstance(expr, Not):
        return references(expr.operand)
    return []


class GuardError(Exception):
    """A guard could not be evaluated (wrong operand types); carries its node."""

    def __init__(self, message: str, node: Node) -> None:
        super().__init__(message)
        self.node = node


def _ordered(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def evaluate(expr: Expr, config: Mapping[str, Any]) -> Any:
    """Evaluate a guard over validated config. Absent fields are ``null``.

    Only ``call.config`` references can be evaluated; the checker rejects guards that
    use anything else. Raises :class:`GuardError` on ill-typed operands.
    """
    if isinstance(expr, Literal):
        return expr.value
    if isinstance(expr, ListLiteral):
        return [item.value for item in expr.items]
    if isinstance(expr, ConfigRef) and expr.member is None:
        return config.get(expr.field)
    if isinstance(expr, REFERENCE_TYPES):
        raise GuardError(f"{expr.text()} cannot be read in a guard", expr)
    if isinstance(expr, Not):
        value = _truth(evaluate(expr.operand, config))
        if not isinstance(value, bool):
            raise GuardError("'not' needs a boolean", expr)
        return not value
    if isinstance(expr, BoolOp):
        left = _truth(evaluate(expr.left, config))
        if not isinstance(left, bool):
            raise GuardError(f"'{expr.op}' needs booleans", expr.left)
        if expr.op == "and" and not left:
            return False
        if expr.op == "or" and left:
            return True
        right = _truth(evaluate(expr.right, config))
        if not isinstance(right, bool):
            raise GuardError(f"'{expr.op}' needs booleans", expr.right)
        return right
    assert isinstance(expr, Compare)
    left = evaluate(expr.left, config)
    right = evaluate(expr.right, config)
    if expr.op in ("in", "not in"):
        if not isinstance(right, list):
            raise GuardError(f"'{expr.op}' needs a list on its right", expr.right)
        found = any(_same(left, item) for item in right)
        return found if expr.op == "in" else not found
    if expr.op == "==":
        return _same(left, right)
    if expr.op == "!=":
        return not _same(left, right)
    if not (_ordered(left) and _ordered(right)):
        raise GuardError(f"'{expr.op}' compares integers only", expr)
    result: bool = _ORDERING[expr.op](left, right)
    return result


_ORDERING: dict[str, Callable[[int, int], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def _truth(value: Any) -> Any:
    """An absent (null) optional boolean reads as false in boolean context."""
    return False if value is None else value


def _same(a: Any, b: Any) -> bool:
    """Equality without Python's ``True == 1``."""
    return type(a) is type(b) and a == b
