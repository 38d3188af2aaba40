"""The functions a Kubernetes device selector may call: their types and estimated cost.

The table covers the CEL standard functions and the libraries Kubernetes' base CEL
environment adds (k8s.io/apiserver/pkg/cel/environment: strings v2, lists, sets, regex,
URLs, IP/CIDR, quantity, semver, format). A name not in the table is an unknown function,
which the API server refuses too. Costs follow cel-go's estimator
(github.com/google/cel-go/checker/cost.go) and Kubernetes' library estimator
(k8s.io/apiserver/pkg/cel/library/cost.go): a plain call costs 1; string work costs a
tenth of a unit per character; regex matching multiplies string and pattern lengths.
The numbers need not match Kubernetes' to the unit, but they must never be lower for the
same expression's worst case by more than the constant terms: they bound the work.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .types import (
    BOOL,
    BYTES,
    CIDR,
    DOUBLE,
    DURATION,
    DYN,
    INT,
    IP,
    NUMERIC,
    QUANTITY,
    SCALAR,
    SEMVER,
    STRING,
    TIMESTAMP,
    TYPE,
    UINT,
    UNBOUNDED,
    URL,
    CelType,
    Shape,
    assignable,
    elem_type,
    is_list,
    is_map,
    list_of,
    map_of,
)


@dataclass(frozen=True, slots=True)
class Value:
    """What the checker knows of a subexpression: its type and size bound."""

    type: CelType
    shape: Shape


@dataclass(frozen=True, slots=True)
class Outcome:
    """A call's result type and shape, and the cost of the call itself (not its args)."""

    type: CelType
    cost: int
    shape: Shape = SCALAR


#: a function rule: (target or None, arguments) → outcome, or why the call is ill-typed
Rule = Callable[[Value | None, Sequence[Value]], "Outcome | str"]

STRING_TRAVERSAL = 0.1
REGEX_LENGTH = 0.25


def cap(n: float) -> int:
    return UNBOUNDED if n >= UNBOUNDED else max(0, math.ceil(n))


def traversal(shape: Shape, factor: float = STRING_TRAVERSAL) -> int:
    return cap(shape.size * factor)


def _fits(values: Sequence[Value], wanted: Sequence[CelType]) -> bool:
    return len(values) == len(wanted) and all(
        assignable(v.type, w) for v, w in zip(values, wanted, strict=True)
    )


def _signature(target: Value | None, args: Sequence[Value]) -> str:
    shown = ", ".join(str(a.type) for a in args)
    return f"{target.type}.({shown})" if target is not None else f"({shown})"


def fixed(
    overloads: Sequence[tuple[CelType | None, tuple[CelType, ...], CelType]],
    cost: Callable[[Value | None, Sequence[Value]], int] | None = None,
    shape: Callable[[Value | None, Sequence[Value]], Shape] | None = None,
) -> Rule:
    """A rule from explicit overloads ``(target type or None, arg types, result)``."""

    def rule(target: Value | None, args: Sequence[Value]) -> Outcome | str:
        for want_target, want_args, result in overloads:
            if (want_target is None) != (target is None):
                continue
            if (
                target is not None
                and want_target is not None
                and not assignable(target.type, want_target)
            ):
                continue
            if _fits(args, want_args):
                return Outcome(
                    result,
                    cost(target, args) if cost else 1,
                    shape(target, args) if shape else SCALAR,
                )
        return f"no matching overload for {_signature(target, args)}"

    return rule


def _target_traversal(target: Value | None, args: Sequence[Value]) -> int:
    return traversal(target.shape) if target is not None else 1


def _same_shape(target: Value | None, args: Sequence[Value]) -> Shape:
    return target.shape if target is not None else SCALAR


def _size(target: Value | None, args: Sequence[Value]) -> Outcome | str:
    subject = target if target is not None else (args[0] if len(args) == 1 else None)
    if subject is None or (target is not None and args):
        return f"no matching overload for size{_signature(target, args)}"
    t = subject.type
    if t in (STRING, BYTES, DYN) or is_list(t) or is_map(t):
        return Outcome(INT, 1)
    return f"no matching overload for size{_signature(target, args)}"


def _conversion(result: CelType, accepts: frozenset[CelType]) -> Rule:
    def rule(target: Value | None, args: Sequence[Value]) -> Outcome | str:
        if target is not None or len(args) != 1:
            return f"no matching overload for {result}{_signature(target, args)}"
        if args[0].type == DYN or args[0].type in accepts:
            cost = traversal(args[0].shape) if args[0].type in (STRING, BYTES) else 1
            return Outcome(result, max(cost, 1), args[0].shape)
        return f"no matching overload for {result}{_signature(target, args)}"

    return rule


def _contains(target: Value | None, args: Sequence[Value]) -> Outcome | str:
    if target is None or not _fits(args, (STRING,)) or not assignable(target.type, STRING):
        return f"no matching overload for contains{_signature(target, args)}"
    return Outcome(BOOL, cap(traversal(target.shape) * traversal(args[0].shape)))


def _affix(target: Value | None, args: Sequence[Value]) -> Outcome | str:
    if target is None or not _fits(args, (STRING,)) or not assignable(target.type, STRING):
        return f"no matching overload{_signature(target, args)}"
    return Outcome(BOOL, traversal(args[0].shape))


def _regex_cost(subject: Shape, pattern: Shape) -> int:
    return cap(
        cap((subject.size + 1) * STRING_TRAVERSAL) * cap(pattern.size * REGEX_LENGTH)
        if subject.size < UNBOUNDED
        else UNBOUNDED
    )


def _matches(target: Value | None, args: Sequence[Value]) -> Outcome | str:
    if target is not None and _fits(args, (STRING,)) and assignable(target.type, STRING):
        return Outcome(BOOL, _regex_cost(target.shape, args[0].shape))
    if target is None and _fits(args, (STRING, STRING)):
        return Outcome(BOOL, _regex_cost(args[0].shape, args[1].shape))
    return f"no matching overload for matches{_signature(target, args)}"


def _find(many: bool) -> Rule:
    def rule(target: Value | None, args: Sequence[Value]) -> Outcome | str:
        ok = target is not None and assignable(target.type, STRING)
        wanted = ((STRING,), (STRING, INT)) if many else ((STRING,),)
        if not ok or not any(_fits(args, w) for w in wanted) or target is None:
            return f"no matching overload{_signature(target, args)}"
        cost = _regex_cost(target.shape, args[0].shape)
        if many:
            return Outcome(list_of(STRING), cost, Shape(target.shape.size, target.shape))
        return Outcome(STRING, cost, target.shape)

    return rule


def _list_walk(result: Callable[[CelType], CelType], extra: int = 0) -> Rule:
    """A list function that visits each element once (sum, min, max, isSorted...)."""

    def rule(target: Value | None, args: Sequence[Value]) -> Outcome | str:
        if target is None or (not is_list(target.type) and target.type != DYN):
            return f"no matching overload{_signature(target, args)}"
        if len(args) > extra or (extra and not args):
            return f"no matching overload{_signature(target, args)}"
        elem = elem_type(target.type)
        if args and not assignable(args[0].type, elem):
            return f"no matching overload{_signature(target, args)}"
        per = max(1, traversal(target.shape.element())) if elem in (STRING, DYN) else 1
        return Outcome(result(elem), cap(target.shape.size * per) + 1, target.shape.element())

    return rule


def _list_reshape(result_size: Callable[[Shape], Shape], arity: int = 0) -> Rule:
    def rule(target: Value | None, args: Sequence[Value]) -> Outcome | str:
        if target is None or not (is_list(target.type) or target.type == DYN):
            return f"no matching overload{_signature(target, args)}"
        if len(args) != arity or not all(assignable(a.type, INT) for a in args):
            return f"no matching overload{_signature(target, args)}"
        t = target.type if is_list(target.type) else list_of(DYN)
        size = target.shape.size
        return Outcome(t, cap(size * max(1, math.log2(size + 1))) + 1, result_size(target.shape))

    return rule


def _flatten(target: Value | None, args: Sequence[Value]) -> Outcome | str:
    if target is None or not (is_list(target.type) or target.type == DYN) or len(args) > 1:
        return f"no matching overload{_signature(target, args)}"
    inner = target.shape.element()
    size = cap(target.shape.size * inner.size)
    elem = elem_type(elem_type(target.type)) if is_list(elem_type(target.type)) else DYN
    return Outcome(list_of(elem), size + 1, Shape(size, inner.element()))


def _join(target: Value | None, args: Sequence[Value]) -> Outcome | str:
    if target is None or not assignable(target.type, list_of(STRING)) or len(args) > 1:
        return f"no matching overload for join{_signature(target, args)}"
    if args and not assignable(args[0].type, STRING):
        return f"no matching overload for join{_signature(target, args)}"
    per = target.shape.element().size + (args[0].shape.size if args else 0)
    length = cap(target.shape.size * per)
    return Outcome(STRING, traversal(Shape(length)), Shape(length))


def _split(target: Value | None, args: Sequence[Value]) -> Outcome | str:
    if target is None or not assignable(target.type, STRING):
        return f"no matching overload for split{_signature(target, args)}"
    if not (_fits(args, (STRING,)) or _fits(args, (STRING, INT))):
        return f"no matching overload for split{_signature(target, args)}"
    return Outcome(list_of(STRING), traversal(target.shape), Shape(target.shape.size, target.shape))


def _replace(target: Value | None, args: Sequence[Value]) -> Outcome | str:
    if target is None or not assignable(target.type, STRING):
        return f"no matching overload for replace{_signature(target, args)}"
    if not (_fits(args, (STRING, STRING)) or _fits(args, (STRING, STRING, INT))):
        return f"no matching overload for replace{_signature(target, args)}"
    grows = max(1, args[1].shape.size)
    length = cap(target.shape.size * grows)
    return Outcome(STRING, traversal(Shape(length)) + 1, Shape(length))


def _format(target: Value | None, args: Sequence[Value]) -> Outcome | str:
    if target is None or not assignable(target.type, STRING) or len(args) != 1:
        return f"no matching overload for format{_signature(target, args)}"
    if not (is_list(args[0].type) or args[0].type == DYN):
        return f"no matching overload for format{_signature(target, args)}"
    length = cap(target.shape.size + args[0].shape.size * args[0].shape.element().size)
    return Outcome(STRING, traversal(Shape(length)) + 1, Shape(length))


def _sets(target: Value | None, args: Sequence[Value]) -> Outcome | str:
    if target is not None or len(args) != 2:
        return f"no matching overload{_signature(target, args)}"
    if not all(is_list(a.type) or a.type == DYN for a in args):
        return f"no matching overload{_signature(target, args)}"
    return Outcome(BOOL, cap(args[0].shape.size * args[1].shape.size) + 1)


def _range(target: Value | None, args: Sequence[Value]) -> Outcome | str:
    if target is not None or not _fits(args, (INT,)):
        return f"no matching overload for lists.range{_signature(target, args)}"
    return "lists.range builds a list of unbounded size"


def _index_of(target: Value | None, args: Sequence[Value]) -> Outcome | str:
    """``indexOf``/``lastIndexOf`` of a substring in a string, or of an element in a list."""
    if target is not None and target.type == STRING:
        string_search = fixed(
            [(STRING, (STRING,), INT), (STRING, (STRING, INT), INT)],
            cost=lambda t, a: cap(traversal(t.shape if t else SCALAR) * traversal(a[0].shape)),
        )
        return string_search(target, args)
    return _list_walk(lambda e: INT, extra=1)(target, args)


def _member_of(kind: CelType, result: CelType, args: tuple[CelType, ...] = ()) -> Rule:
    return fixed([(kind, args, result)])


_Q_OR_INT = (QUANTITY,)


def _compare(kinds: Sequence[CelType], result: CelType) -> Rule:
    return fixed([(k, (k,), result) for k in kinds])


def _ops() -> dict[str, Rule]:
    return {
        "isGreaterThan": _compare((QUANTITY, SEMVER), BOOL),
        "isLessThan": _compare((QUANTITY, SEMVER), BOOL),
        "compareTo": _compare((QUANTITY, SEMVER), INT),
        "add": fixed([(QUANTITY, _Q_OR_INT, QUANTITY), (QUANTITY, (INT,), QUANTITY)]),
        "sub": fixed([(QUANTITY, _Q_OR_INT, QUANTITY), (QUANTITY, (INT,), QUANTITY)]),
    }


#: functions called as ``f(x)`` (and qualified ones such as ``sets.contains``)
GLOBAL: dict[str, Rule] = {
    "size": _size,
    "int": _conversion(INT, frozenset({INT, UINT, DOUBLE, STRING, TIMESTAMP, DURATION})),
    "uint": _conversion(UINT, frozenset({INT, UINT, DOUBLE, STRING})),
    "double": _conversion(DOUBLE, frozenset({INT, UINT, DOUBLE, STRING})),
    "string": _conversion(
        STRING,
        frozenset({INT, UINT, DOUBLE, STRING, BYTES, BOOL, DURATION, TIMESTAMP, IP, CIDR}),
    ),
    "bytes": _conversion(BYTES, frozenset({BYTES, STRING})),
    "bool": _conversion(BOOL, frozenset({BOOL, STRING})),
    "dyn": lambda t, a: Outcome(DYN, 1, a[0].shape) if t is None and len(a) == 1 else "dyn(x)",
    "type": lambda t, a: Outcome(TYPE, 1) if t is None and len(a) == 1 else "type(x)",
    "duration": _conversion(DURATION, frozenset({STRING})),
    "timestamp": _conversion(TIMESTAMP, frozenset({STRING})),
    "matches": _matches,
    "quantity": fixed([(None, (STRING,), QUANTITY)]),
    "isQuantity": fixed([(None, (STRING,), BOOL)]),
    "semver": fixed([(None, (STRING,), SEMVER), (None, (STRING, BOOL), SEMVER)]),
    "isSemver": fixed([(None, (STRING,), BOOL), (None, (STRING, BOOL), BOOL)]),
    "ip": fixed([(None, (STRING,), IP)]),
    "isIP": fixed([(None, (STRING,), BOOL)]),
    "ip.isCanonical": fixed([(None, (STRING,), BOOL)]),
    "cidr": fixed([(None, (STRING,), CIDR)]),
    "isCIDR": fixed([(None, (STRING,), BOOL)]),
    "url": fixed([(None, (STRING,), URL)]),
    "isURL": fixed([(None, (STRING,), BOOL)]),
    "strings.quote": fixed(
        [(None, (STRING,), STRING)],
        cost=lambda t, a: traversal(a[0].shape),
        shape=lambda t, a: Shape(cap(a[0].shape.size * 2 + 2)),
    ),
    "sets.contains": _sets,
    "sets.equivalent": _sets,
    "sets.intersects": _sets,
    "lists.range": _range,
}

#: functions called as ``x.f(...)``
MEMBER: dict[str, Rule] = {
    "size": _size,
    "contains": _contains,
    "startsWith": _affix,
    "endsWith": _affix,
    "matches": _matches,
    "find": _find(False),
    "findAll": _find(True),
    "charAt": fixed([(STRING, (INT,), STRING)], cost=_target_traversal),
    "indexOf": _index_of,
    "lastIndexOf": _index_of,
    "lowerAscii": fixed([(STRING, (), STRING)], cost=_target_traversal, shape=_same_shape),
    "upperAscii": fixed([(STRING, (), STRING)], cost=_target_traversal, shape=_same_shape),
    "trim": fixed([(STRING, (), STRING)], cost=_target_traversal, shape=_same_shape),
    "substring": fixed(
        [(STRING, (INT,), STRING), (STRING, (INT, INT), STRING)],
        cost=_target_traversal,
        shape=_same_shape,
    ),
    "replace": _replace,
    "split": _split,
    "join": _join,
    "format": _format,
    "isSorted": _list_walk(lambda e: BOOL),
    "sum": _list_walk(lambda e: e),
    "min": _list_walk(lambda e: e),
    "max": _list_walk(lambda e: e),
    "includes": _list_walk(lambda e: BOOL, extra=1),
    "distinct": _list_reshape(lambda s: s),
    "reverse": _list_reshape(lambda s: s),
    "sort": _list_reshape(lambda s: s),
    "slice": _list_reshape(lambda s: s, arity=2),
    "flatten": _flatten,
    "sign": _member_of(QUANTITY, INT),
    "isInteger": _member_of(QUANTITY, BOOL),
    "asInteger": _member_of(QUANTITY, INT),
    "asApproximateFloat": _member_of(QUANTITY, DOUBLE),
    "major": _member_of(SEMVER, INT),
    "minor": _member_of(SEMVER, INT),
    "patch": _member_of(SEMVER, INT),
    "family": fixed([(IP, (), INT)]),
    "isUnspecified": _member_of(IP, BOOL),
    "isLoopback": _member_of(IP, BOOL),
    "isLinkLocalMulticast": _member_of(IP, BOOL),
    "isLinkLocalUnicast": _member_of(IP, BOOL),
    "isGlobalUnicast": _member_of(IP, BOOL),
    "ip": _member_of(CIDR, IP),
    "masked": _member_of(CIDR, CIDR),
    "prefixLength": _member_of(CIDR, INT),
    "containsIP": fixed([(CIDR, (IP,), BOOL), (CIDR, (STRING,), BOOL)]),
    "containsCIDR": fixed([(CIDR, (CIDR,), BOOL), (CIDR, (STRING,), BOOL)]),
    "getScheme": _member_of(URL, STRING),
    "getHost": _member_of(URL, STRING),
    "getHostname": _member_of(URL, STRING),
    "getPort": _member_of(URL, STRING),
    "getEscapedPath": _member_of(URL, STRING),
    "getQuery": _member_of(URL, map_of(STRING, list_of(STRING))),
    **_ops(),
}

#: namespaces of qualified function names (``strings.quote``): not variables
NAMESPACES = frozenset({"strings", "sets", "lists", "ip"})

__all__ = ["GLOBAL", "MEMBER", "NAMESPACES", "NUMERIC", "Outcome", "Rule", "Value", "cap"]
