"""One hook program's checking state, effect facts and diagnostic helpers."""

from __future__ import annotations

from dataclasses import dataclass, field

from dmn.interpreter.checker.context import _PluginContext
from dmn.interpreter.checker.values import ValueType
from dmn.interpreter.diagnostics import Code, SourceSpan
from dmn.interpreter.documents import Effect, Ref
from dmn.interpreter.expressions import Expr, SpanFn
from dmn.interpreter.loader import ProgramSource
from dmn.interpreter.source import ExpressionSpans, Path
from dmn.opcodes.spec import OpcodeSpec


@dataclass(frozen=True, slots=True)
class _Obligation:
    """effects[index] binds required parameter ``parameter`` to optional ``field``."""

    index: int
    parameter: str
    field: str
    span: SourceSpan | None
    path: Path


@dataclass(slots=True)
class _EffectInfo:
    index: int
    effect: Effect
    spec: OpcodeSpec | None
    guard: Expr | None
    bound: int  # items of its forEach list (1 without forEach)
    min_bound: int
    outputs: dict[str, ValueType] = field(default_factory=dict)


class _ProgramBase:
    """State and diagnostic helpers of one hook program's checks."""

    def __init__(self, ctx: _PluginContext, prog: ProgramSource) -> None:
        self.ctx = ctx
        self.prog = prog
        self.hook = prog.hook
        self.infos: dict[str, _EffectInfo] = {}
        self.order: list[str] = []
        self.exports: dict[str, ValueType] = {}
        self.obligations: list[_Obligation] = []
        self.guard_at: dict[int, Expr | None] = {}  # effects[i] -> its parsed guard

    # ---- helpers
    def path(self, *parts: str | int) -> Path:
        return (*self.prog.base, *parts)

    def error(self, code: Code, message: str, *parts: str | int, key: bool = False) -> None:
        span = self.prog.key_span(*parts) if key else self.prog.span(*parts)
        self.ctx.error(code, message, span, self.path(*parts))

    def span_of(self, *parts: str | int) -> SpanFn:
        return ExpressionSpans(self.prog.source, (*self.prog.base, *parts))

    def _refs(self, port: str, value: Ref | list[Ref]) -> list[tuple[tuple[str | int, ...], Ref]]:
        if isinstance(value, list):
            return [(("inputs", port, j, "from"), ref) for j, ref in enumerate(value)]
        return [(("inputs", port, "from"), value)]
