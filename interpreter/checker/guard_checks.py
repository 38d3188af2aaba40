"""Guard (`when`) parsing and static typing over the config schema — ``E_GUARD_TYPE``."""

from __future__ import annotations

from typing import Any

from dmn.interpreter.checker.context import _PluginContext
from dmn.interpreter.config_schema import enumerable_values
from dmn.interpreter.diagnostics import Code
from dmn.interpreter.expressions import (
    REFERENCE_TYPES,
    BoolOp,
    Compare,
    ConfigRef,
    Expr,
    ListLiteral,
    Literal,
    Not,
    SpanFn,
    parse_guard,
    references,
)
from dmn.interpreter.source import Path, path_text


def _literal_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    return "string"


def _operand_text(expr: Expr) -> str:
    return expr.text() if isinstance(expr, ConfigRef) else "the operand"


class _GuardTyper:
    """Static typing of a guard over the config schema (``E_GUARD_TYPE``)."""

    def __init__(self, ctx: _PluginContext, path: Path) -> None:
        self.ctx = ctx
        self.path = path

    def error(self, message: str, node: Any) -> None:
        self.ctx.error(Code.E_GUARD_TYPE, message, node.span, self.path)

    def types(self, expr: Expr) -> set[str]:
        if isinstance(expr, Literal):
            return {_literal_type(expr.value)}
        if isinstance(expr, ListLiteral):
            return {"array"}
        if isinstance(expr, ConfigRef):
            prop = self.ctx.prop(expr.field)
            if prop is None:
                return {"any"}
            out: set[str] = {prop.type}
            if self.ctx.optional(expr.field):
                out.add("null")
            return out
        if isinstance(expr, REFERENCE_TYPES):
            return {"any"}
        if isinstance(expr, Not):
            self.boolean(expr.operand, "'not'")
            return {"boolean"}
        if isinstance(expr, BoolOp):
            self.boolean(expr.left, f"'{expr.op}'")
            self.boolean(expr.right, f"'{expr.op}'")
            return {"boolean"}
        assert isinstance(expr, Compare)
        left = self.types(expr.left)
        right = self.types(expr.right)
        if expr.op in ("==", "!="):
            if (
                "any" not in left | right
                and not ((left & right) - {"null"})
                and not ("null" in left and "null" in right)
            ):
                self.error(
                    f"'{expr.op}' compares {'/'.join(sorted(left))} with "
                    f"{'/'.join(sorted(right))}; the result never changes",
                    expr,
                )
            else:
                self.enum_member(expr.left, expr.right)
                self.enum_member(expr.right, expr.left)
        elif expr.op in ("in", "not in"):
            if not isinstance(expr.right, ListLiteral):
                self.error(f"'{expr.op}' needs a list literal on its right", expr.right)
            else:
                for item in expr.right.items:
                    self.enum_member(expr.left, item)
        else:
            for side, kinds in ((expr.left, left), (expr.right, right)):
                if "any" not in kinds and kinds - {"null"} != {"integer"}:
                    self.error(f"'{expr.op}' compares integers only", side)
                elif "null" in kinds:
                    # evaluation has no answer for an absent operand: rejecting it here
                    # keeps the typing sound (a guard that checks never raises)
                    self.error(
                        f"'{expr.op}' compares integers only, and "
                        f"{_operand_text(side)} may be absent (give it a default or make it "
                        "required)",
                        side,
                    )
        return {"boolean"}

    def enum_member(self, ref: Expr, lit: Expr) -> None:
        if not isinstance(ref, ConfigRef) or not isinstance(lit, Literal):
            return
        prop = self.ctx.prop(ref.field)
        if prop is None or lit.value is None:
            return
        values = enumerable_values(prop)
        if values is not None and not any(
            type(v) is type(lit.value) and v == lit.value for v in values
        ):
            self.error(
                f"{lit.value!r} is never a value of call.config.{ref.field} (one of {values})",
                lit,
            )

    def boolean(self, expr: Expr, what: str) -> None:
        kinds = self.types(expr)
        if "any" not in kinds and kinds - {"null"} != {"boolean"}:
            self.error(f"{what} needs a boolean, not {'/'.join(sorted(kinds))}", expr)


def _check_guard(ctx: _PluginContext, text: str, span_of: SpanFn, path: Path) -> Expr | None:
    expr, diags = parse_guard(text, span_of, path_text(path))
    ctx.diagnostics.extend(diags)
    if expr is None:
        return None
    ok = True
    for ref in references(expr):
        if not isinstance(ref, ConfigRef):
            ctx.error(
                Code.E_REF_UNRESOLVED,
                f"{ref.text()}: a guard may only read call.config fields",
                ref.span,
                path,
            )
            ok = False
        elif ref.member is not None:
            ctx.error(
                Code.E_REF_UNRESOLVED,
                f"{ref.text()}: a guard reads top-level config fields only",
                ref.span,
                path,
            )
            ok = False
        elif ctx.prop(ref.field) is None:
            ctx.error(
                Code.E_REF_UNRESOLVED,
                f"{ref.text()}: configSchema has no field {ref.field!r}",
                ref.span,
                path,
            )
            ok = False
    if not ok:
        return None
    typer = _GuardTyper(ctx, path)
    typer.boolean(expr, "a guard")
    return expr
