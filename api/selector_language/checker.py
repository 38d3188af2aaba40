"""Type-check a device selector and estimate its worst-case cost, without running it.

What Kubernetes does when a DeviceClass or ResourceClaim is written (the API server
compiles each selector against the DRA ``device`` declaration and refuses it when its
estimated cost exceeds ``CELSelectorExpressionMaxCost``), done here from the syntax tree:
an unknown variable, field or function, an ill-typed operation or a non-bool result is a
type problem; a worst case above :data:`MAX_COST` is a cost problem. The estimate counts
what cel-go's estimator counts — one unit per variable, field and call, a tenth per string
character, and for a comprehension the size bound of what it iterates times the cost of
one iteration — with every size bounded by the ResourceSlice limits (:mod:`.types`).
Because the bound holds for every device, an expression that passes cannot do more than
about a million units of work at evaluation (≈0.1 s in cel-go; measured for the ``cel``
binding in tests/adversarial/test_selector_bounds.py).

Pure and recursion-bounded: :mod:`.syntax` refuses trees deeper than its limit.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from .functions import GLOBAL, MEMBER, NAMESPACES, Outcome, Value, cap
from .syntax import (
    Call,
    Expr,
    Ident,
    ListLiteral,
    Literal,
    MapLiteral,
    Select,
    SyntaxProblem,
    parse,
)
from .types import (
    BOOL,
    BYTES,
    DEVICE,
    DEVICE_FIELDS,
    DOUBLE,
    DURATION,
    DYN,
    INT,
    NULL,
    NUMERIC,
    SCALAR,
    STRING,
    TIMESTAMP,
    UINT,
    UNBOUNDED,
    UNKNOWN,
    CelType,
    Shape,
    assignable,
    elem_type,
    is_list,
    is_map,
    join,
    list_of,
    map_of,
)

#: Kubernetes' CELSelectorExpressionMaxCost (k8s.io/api/resource/v1), the same number as
#: the apiserver's PerCallLimit for CEL validation rules.
MAX_COST = 1_000_000

SYNTAX = "E_SYNTAX"
TYPE_ERROR = "E_CEL_TYPE"
TOO_COSTLY = "E_CEL_COST"

_LITERAL_TYPES = {
    "int": INT,
    "uint": UINT,
    "double": DOUBLE,
    "string": STRING,
    "bytes": BYTES,
    "bool": BOOL,
    "null": NULL,
}
_MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
_ORDERED = frozenset({INT, UINT, DOUBLE, STRING, BYTES, BOOL, TIMESTAMP, DURATION})


@dataclass(frozen=True, slots=True)
class Problem:
    """Why a selector is refused: a reason code, a message, the 1-based column in it."""

    code: str
    message: str
    column: int


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of :func:`check_selector`: problems (empty when usable) and the
    estimated worst-case cost (None when the expression did not parse)."""

    problems: tuple[Problem, ...]
    cost: int | None

    @property
    def ok(self) -> bool:
        return not self.problems


def _union(a: Shape | None, b: Shape | None) -> Shape | None:
    if a is None or b is None:
        return None
    return Shape(max(a.size, b.size), _union(a.elem, b.elem), _union(a.key, b.key))


def _string_cost(a: Shape, b: Shape) -> int:
    return max(1, cap(min(a.size, b.size) * 0.1))


class _Walk:
    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self.scope: list[tuple[str, Value]] = []

    def problem(self, node: Expr, message: str) -> Value:
        self.problems.append(Problem(TYPE_ERROR, message, node.column))
        return Value(DYN, UNKNOWN)

    def lookup(self, name: str) -> Value | None:
        for bound, value in reversed(self.scope):
            if bound == name:
                return value
        if name == "device":
            return Value(DEVICE, UNKNOWN)
        return None

    def visit(self, e: Expr) -> tuple[Value, int]:
        if isinstance(e, Literal):
            shape = Shape(e.length) if e.kind in ("string", "bytes") else SCALAR
            return Value(_LITERAL_TYPES[e.kind], shape), 0
        if isinstance(e, Ident):
            value = self.lookup(e.name)
            if value is None:
                return self.problem(e, f"undeclared reference to {e.name!r}"), 1
            return value, 1
        if isinstance(e, Select):
            return self.select(e)
        if isinstance(e, ListLiteral):
            return self.list_literal(e)
        if isinstance(e, MapLiteral):
            return self.map_literal(e)
        if isinstance(e, Call):
            return self.call(e)
        return self.problem(e, "unsupported expression"), UNBOUNDED

    def select(self, e: Select) -> tuple[Value, int]:
        operand, cost = self.visit(e.operand)
        t = operand.type
        if t == DEVICE:
            field = DEVICE_FIELDS.get(e.name)
            if field is None:
                return self.problem(e, f"undefined field {e.name!r} of device"), cost + 1
            return Value(*field), cost + 1
        if is_map(t):
            if not assignable(t.params[0], STRING):
                return self.problem(e, f"cannot select {e.name!r} from {t}"), cost + 1
            return Value(t.params[1], operand.shape.element()), cost + 1
        if t == DYN:
            return Value(DYN, UNKNOWN), cost + 1
        return self.problem(e, f"type {t} does not support field selection"), cost

    def list_literal(self, e: ListLiteral) -> tuple[Value, int]:
        cost = 10
        elem: CelType | None = None
        shape: Shape | None = SCALAR
        for i, item in enumerate(e.elements):
            value, c = self.visit(item)
            cost = cap(cost + c)
            shape = value.shape if i == 0 else _union(shape, value.shape)
            joined = value.type if elem is None else join(elem, value.type)
            if joined is None:
                self.problem(item, f"list elements must have one type: {elem} and {value.type}")
                joined = DYN
            elem = joined
        return Value(list_of(elem or DYN), Shape(len(e.elements), shape)), cost

    def map_literal(self, e: MapLiteral) -> tuple[Value, int]:
        cost = 30
        key_t: CelType | None = None
        val_t: CelType | None = None
        key_s: Shape | None = SCALAR
        val_s: Shape | None = SCALAR
        for i, (k, v) in enumerate(e.entries):
            kv, kc = self.visit(k)
            vv, vc = self.visit(v)
            cost = cap(cost + kc + vc)
            key_s = kv.shape if i == 0 else _union(key_s, kv.shape)
            val_s = vv.shape if i == 0 else _union(val_s, vv.shape)
            kj = kv.type if key_t is None else join(key_t, kv.type)
            vj = vv.type if val_t is None else join(val_t, vv.type)
            if kj is None or vj is None:
                self.problem(k, "map keys and values must each have one type")
            key_t, val_t = kj or DYN, vj or DYN
        return Value(map_of(key_t or DYN, val_t or DYN), Shape(len(e.entries), val_s, key_s)), cost

    def call(self, e: Call) -> tuple[Value, int]:
        name = e.function
        if e.target is None and name == "has":
            return self.has(e)
        if e.target is not None and name in _MACROS:
            return self.comprehension(e)
        if (
            e.target is not None
            and name == "bind"
            and isinstance(e.target, Ident)
            and e.target.name == "cel"
            and self.lookup("cel") is None
        ):
            return self.bind(e)
        if name.startswith(("_", "!", "-")) and e.target is None:
            args = [self.visit(a) for a in e.args]
            return self.operator(e, [v for v, _ in args], [c for _, c in args])
        return self.function(e)

    def has(self, e: Call) -> tuple[Value, int]:
        if len(e.args) != 1 or not isinstance(e.args[0], Select):
            return self.problem(e, "has() needs one field selection, e.g. has(a.b)"), 1
        inner = e.args[0]
        operand, cost = self.visit(inner.operand)
        if operand.type == DEVICE and inner.name not in DEVICE_FIELDS:
            self.problem(inner, f"undefined field {inner.name!r} of device")
        elif not (operand.type in (DEVICE, DYN) or is_map(operand.type)):
            self.problem(inner, f"type {operand.type} does not support field selection")
        return Value(BOOL, SCALAR), cost

    def bind(self, e: Call) -> tuple[Value, int]:
        if len(e.args) != 3 or not isinstance(e.args[0], Ident):
            return self.problem(e, "cel.bind(name, init, expr) needs a variable name"), 1
        init, init_cost = self.visit(e.args[1])
        self.scope.append((e.args[0].name, init))
        body, body_cost = self.visit(e.args[2])
        self.scope.pop()
        return body, cap(init_cost + body_cost)

    def comprehension(self, e: Call) -> tuple[Value, int]:
        assert e.target is not None
        name = e.function
        two_vars = name in ("all", "exists", "exists_one") and len(e.args) == 3
        n_vars = 2 if two_vars else 1
        arity_ok = len(e.args) in ((2, 3) if name == "map" else (2,)) or two_vars
        variables = e.args[:n_vars]
        if not arity_ok or not all(isinstance(v, Ident) for v in variables):
            return self.problem(e, f"{name}() needs a variable name and an expression"), 1
        names = [v.name for v in variables if isinstance(v, Ident)]
        rng, rng_cost = self.visit(e.target)
        t = rng.type
        if not (is_list(t) or is_map(t) or t == DYN):
            return self.problem(e, f"{name}() cannot iterate over {t}"), rng_cost
        count = rng.shape.size
        if is_map(t):
            first = Value(elem_type(t), rng.shape.keys())
            second = Value(t.params[1], rng.shape.element())
        else:
            first = Value(elem_type(t), rng.shape.element())
            second = first
            if two_vars:
                first, second = Value(INT, SCALAR), first
        bound = [first, second] if two_vars else [first]
        for var, value in zip(names, bound, strict=True):
            self.scope.append((var, value))
        body = e.args[n_vars:]
        results = [self.visit(b) for b in body]
        for _ in names:
            self.scope.pop()
        body_cost = sum(c for _, c in results)
        if name in ("all", "exists", "exists_one", "filter"):
            predicate = results[0][0]
            if not assignable(predicate.type, BOOL):
                self.problem(body[0], f"{name}() predicate must be bool, not {predicate.type}")
        if name == "all":
            per, fixed, out = 3, 1, Value(BOOL, SCALAR)
        elif name == "exists":
            per, fixed, out = 4, 1, Value(BOOL, SCALAR)
        elif name == "exists_one":
            per, fixed, out = 2, 2, Value(BOOL, SCALAR)
        elif name == "filter":
            per, fixed, out = 13, 11, Value(list_of(first.type), Shape(count, first.shape))
        else:
            mapped = results[-1][0]
            per, fixed = 12, 11
            out = Value(list_of(mapped.type), Shape(count, mapped.shape))
            if len(results) == 2 and not assignable(results[0][0].type, BOOL):
                self.problem(body[0], f"map() filter must be bool, not {results[0][0].type}")
        return out, cap(rng_cost + fixed + count * (per + body_cost))

    def operator(self, e: Call, args: Sequence[Value], costs: Sequence[int]) -> tuple[Value, int]:
        op = e.function
        total = cap(sum(costs))
        if op in ("_&&_", "_||_", "!_"):
            for arg, node in zip(args, e.args, strict=True):
                if not assignable(arg.type, BOOL):
                    self.problem(node, f"operator {op.strip('_')} needs bool, not {arg.type}")
            return Value(BOOL, SCALAR), total
        if op == "_?_:_":
            if not assignable(args[0].type, BOOL):
                self.problem(e.args[0], f"condition must be bool, not {args[0].type}")
            joined = join(args[1].type, args[2].type)
            if joined is None:
                self.problem(e, f"branches have different types: {args[1].type}, {args[2].type}")
            shape = _union(args[1].shape, args[2].shape) or UNKNOWN
            return Value(joined or DYN, shape), cap(costs[0] + max(costs[1], costs[2]))
        if op == "-_":
            if args[0].type not in (INT, DOUBLE, DURATION, DYN):
                self.problem(e, f"cannot negate {args[0].type}")
            return Value(args[0].type, SCALAR), cap(total + 1)
        lhs, rhs = args
        if op in ("_==_", "_!=_"):
            if join(lhs.type, rhs.type) is None:
                self.problem(e, f"cannot compare {lhs.type} with {rhs.type}")
            return Value(BOOL, SCALAR), cap(total + _string_cost(lhs.shape, rhs.shape))
        if op in ("_<_", "_<=_", "_>_", "_>=_"):
            numeric = lhs.type in NUMERIC and rhs.type in NUMERIC
            same = join(lhs.type, rhs.type) is not None
            ordered = {lhs.type, rhs.type} - {DYN} <= _ORDERED
            if not (numeric or (same and ordered)):
                self.problem(e, f"cannot order {lhs.type} and {rhs.type}")
            return Value(BOOL, SCALAR), cap(total + _string_cost(lhs.shape, rhs.shape))
        if op == "_in_":
            if is_list(rhs.type):
                if join(lhs.type, elem_type(rhs.type)) is None:
                    self.problem(e, f"{lhs.type} cannot be in {rhs.type}")
                return Value(BOOL, SCALAR), cap(total + rhs.shape.size)
            if is_map(rhs.type):
                if join(lhs.type, elem_type(rhs.type)) is None:
                    self.problem(e, f"{lhs.type} cannot be a key of {rhs.type}")
                return Value(BOOL, SCALAR), cap(total + 1)
            if rhs.type != DYN:
                self.problem(e, f"'in' needs a list or map, not {rhs.type}")
            return Value(BOOL, SCALAR), cap(total + rhs.shape.size)
        if op == "_[_]":
            return self.index(e, lhs, rhs, total)
        return self.arithmetic(e, lhs, rhs, total)

    def index(self, e: Call, lhs: Value, rhs: Value, total: int) -> tuple[Value, int]:
        if is_list(lhs.type):
            if not assignable(rhs.type, INT) and rhs.type not in NUMERIC:
                self.problem(e, f"list index must be int, not {rhs.type}")
            return Value(elem_type(lhs.type), lhs.shape.element()), cap(total + 1)
        if is_map(lhs.type):
            if join(rhs.type, lhs.type.params[0]) is None:
                self.problem(e, f"map key must be {lhs.type.params[0]}, not {rhs.type}")
            return Value(lhs.type.params[1], lhs.shape.element()), cap(total + 1)
        if lhs.type != DYN:
            self.problem(e, f"type {lhs.type} cannot be indexed")
        return Value(DYN, lhs.shape.element()), cap(total + 1)

    def arithmetic(self, e: Call, lhs: Value, rhs: Value, total: int) -> tuple[Value, int]:
        op = e.function
        joined = join(lhs.type, rhs.type)
        if op == "_+_" and joined is not None:
            if joined in (STRING, BYTES):
                size = cap(lhs.shape.size + rhs.shape.size)
                return Value(joined, Shape(size)), cap(total + cap(size * 0.1))
            if is_list(joined) or joined == DYN:
                size = cap(lhs.shape.size + rhs.shape.size)
                elem = _union(lhs.shape.elem, rhs.shape.elem)
                return Value(joined, Shape(size, elem)), cap(total + 1)
        allowed = {"_%_": {INT, UINT}}.get(op, {INT, UINT, DOUBLE})
        if joined is not None and (joined in allowed or joined == DYN):
            return Value(joined, SCALAR), cap(total + 1)
        if {lhs.type, rhs.type} <= {TIMESTAMP, DURATION} and op in ("_+_", "_-_"):
            result = DURATION if lhs.type == rhs.type else TIMESTAMP
            return Value(result, SCALAR), cap(total + 1)
        self.problem(e, f"no operator {op.strip('_')} for {lhs.type} and {rhs.type}")
        return Value(DYN, SCALAR), cap(total + 1)

    def function(self, e: Call) -> tuple[Value, int]:
        name = e.function
        target_node = e.target
        qualified = None
        if (
            isinstance(target_node, Ident)
            and target_node.name in NAMESPACES
            and self.lookup(target_node.name) is None
        ):
            qualified = f"{target_node.name}.{name}"
            target_node = None
        target: Value | None = None
        cost = 0
        if target_node is not None:
            target, cost = self.visit(target_node)
        args: list[Value] = []
        for a in e.args:
            value, c = self.visit(a)
            args.append(value)
            cost = cap(cost + c)
        if qualified is not None:
            rule = GLOBAL.get(qualified)
            shown = qualified
        else:
            rule = (MEMBER if target is not None else GLOBAL).get(name)
            shown = name
        if rule is None:
            return self.problem(e, f"undeclared reference to function {shown!r}"), cap(cost + 1)
        if target is not None and target.type == DYN:
            outcome = rule(target, args)
            if isinstance(outcome, str):
                return Value(DYN, UNKNOWN), cap(cost + 1)
        else:
            outcome = rule(target, args)
        if isinstance(outcome, str):
            return self.problem(e, f"{shown}: {outcome}"), cap(cost + 1)
        assert isinstance(outcome, Outcome)
        return Value(outcome.type, outcome.shape), cap(cost + outcome.cost)


def _check(tree: Expr) -> Verdict:
    walk = _Walk()
    value, cost = walk.visit(tree)
    problems = list(walk.problems)
    if not problems and not assignable(value.type, BOOL):
        problems.append(Problem(TYPE_ERROR, f"must evaluate to bool, not {value.type}", 1))
    if cost > MAX_COST:
        shown = "unbounded" if cost >= UNBOUNDED else f"{cost}"
        problems.append(
            Problem(
                TOO_COSTLY,
                f"too complex: estimated worst-case cost {shown} exceeds the limit"
                f" {MAX_COST} Kubernetes sets for a device selector",
                1,
            )
        )
    return Verdict(tuple(problems), cost)


@functools.lru_cache(maxsize=1024)
def check_selector(expression: str) -> Verdict:
    """Type problems, cost problems and the estimated cost of one selector (cached:
    the same selectors are checked on every reconcile and every review)."""
    try:
        tree = parse(expression)
    except SyntaxProblem as exc:
        return Verdict((Problem(SYNTAX, str(exc), exc.column),), None)
    return _check(tree)
