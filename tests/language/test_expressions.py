"""The expression grammar: typed references, guards, spans inside expressions."""

from __future__ import annotations

import pytest

from dmn.interpreter.diagnostics import Code
from dmn.interpreter.expressions import (
    AllocationRef,
    BoolOp,
    Compare,
    ConfigRef,
    EffectRef,
    GuardError,
    InputRef,
    Literal,
    Not,
    PreparedRef,
    SandboxRef,
    VarRef,
    evaluate,
    parse_guard,
    parse_reference,
    references,
)
from dmn.interpreter.source import ExpressionSpans, load_yaml_documents


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("call.config.ifName", ConfigRef(None, "ifName")),
        ("call.config.sysctls.ipv4RpFilter", ConfigRef(None, "sysctls", "ipv4RpFilter")),
        ("call.inputs.members", InputRef(None, "members")),
        ("call.inputs.members[1]", InputRef(None, "members", 1)),
        ("call.prepared.parent", PreparedRef(None, "parent")),
        ("call.allocation", AllocationRef(None)),
        ("call.allocation.function[0]", AllocationRef(None, "function", 0)),
        ("call.sandbox", SandboxRef(None)),
        ("effects.create-x.interface", EffectRef(None, "create-x", "interface")),
        ("effects.attach.member[3]", EffectRef(None, "attach", "member", 3)),
        ("member", VarRef(None, "member")),
    ],
)
def test_references_are_typed(text: str, expected: object) -> None:
    ref, diags = parse_reference(text)
    assert not diags
    assert type(ref) is type(expected)
    for name in ("field", "port", "index", "effect", "name"):
        if hasattr(expected, name):
            assert getattr(ref, name) == getattr(expected, name)
    assert ref is not None and ref.text() == text


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("call.foo", Code.E_REF_UNRESOLVED),
        ("call", Code.E_REF_UNRESOLVED),
        ("call.config", Code.E_REF_UNRESOLVED),
        ("call.config.a.b.c", Code.E_REF_UNRESOLVED),
        ("call.sandbox.x", Code.E_REF_UNRESOLVED),
        ("effects.a", Code.E_REF_UNRESOLVED),
        ("foo.bar", Code.E_REF_UNRESOLVED),
        ("a == b", Code.E_SYNTAX),
        ("f(x)", Code.E_SYNTAX),
        ("", Code.E_SYNTAX),
        ("call.inputs.x[", Code.E_SYNTAX),
        ("call.inputs.x[99999]", Code.E_SYNTAX),
        ("x" * 2000, Code.E_SYNTAX),
    ],
)
def test_bad_references(text: str, code: Code) -> None:
    ref, diags = parse_reference(text)
    assert ref is None
    assert [d.code for d in diags] == [code]


def test_guard_ast_and_precedence() -> None:
    expr, diags = parse_guard('call.config.a == "x" or not call.config.b and call.config.c')
    assert not diags
    assert isinstance(expr, BoolOp) and expr.op == "or"
    assert isinstance(expr.left, Compare) and expr.left.op == "=="
    assert isinstance(expr.right, BoolOp) and expr.right.op == "and"
    assert isinstance(expr.right.left, Not)
    assert [r.text() for r in references(expr)] == [
        "call.config.a",
        "call.config.b",
        "call.config.c",
    ]


@pytest.mark.parametrize(
    ("text", "config", "value"),
    [
        ('call.config.mode == "kernel"', {"mode": "kernel"}, True),
        ("call.config.mode == 'kernel'", {"mode": "vfio"}, False),
        ('call.config.mode != "kernel"', {}, True),
        ("call.config.n >= 3 and call.config.n < 10", {"n": 3}, True),
        ("call.config.n > 3", {"n": 3}, False),
        ("call.config.n <= -1", {"n": -1}, True),
        ('call.config.m in ["a", "b"]', {"m": "b"}, True),
        ('call.config.m not in ["a", "b"]', {"m": "b"}, False),
        ("not (call.config.x or call.config.y)", {"x": False, "y": False}, True),
        ("call.config.x", {}, None),
        ("not call.config.x", {}, True),
        ("call.config.x == null", {}, True),
        ("call.config.x == false", {"x": False}, True),
        ("call.config.x == 1", {"x": True}, False),
        ("true", {}, True),
        ('"a\\"b" == call.config.s', {"s": 'a"b'}, True),
    ],
)
def test_guard_evaluation(text: str, config: dict[str, object], value: object) -> None:
    expr, diags = parse_guard(text)
    assert not diags and expr is not None
    assert evaluate(expr, config) == value


def test_ill_typed_guards_raise_guard_error() -> None:
    for text, config in [
        ("call.config.s > 1", {"s": "a"}),
        ("call.config.s in call.config.t", {"s": "a", "t": "b"}),
        ("call.config.s and true", {"s": "a"}),
        ("call.inputs.x == 1", {}),
    ]:
        expr, _ = parse_guard(text)
        assert expr is not None
        with pytest.raises(GuardError):
            evaluate(expr, config)


def test_guard_syntax_errors_point_at_the_token() -> None:
    _, diags = parse_guard("call.config.a == == 1")
    assert diags[0].code is Code.E_SYNTAX and diags[0].column == 18
    _, diags = parse_guard("call.config.a +")
    assert diags[0].code is Code.E_SYNTAX and diags[0].column == 15
    expr, diags = parse_guard("(" * 40 + "true" + ")" * 40)
    assert not diags and isinstance(expr, Literal)
    _, diags = parse_guard("not " * 40 + "true")
    assert diags[0].code is Code.E_SYNTAX


def test_spans_combine_yaml_position_and_expression_column() -> None:
    text = "a:\n  when: 'call.config.x and call.config.y'\n  b: call.config.q == 1\n"
    docs, _ = load_yaml_documents(text, "f.yaml")
    src = docs[0].source

    def at(path: tuple[str, ...]):
        return lambda line, column: src.expression_span(path, column, line)

    expr, _ = parse_guard(docs[0].data["a"]["when"], at(("a", "when")))
    assert isinstance(expr, BoolOp)
    # 'when' value starts at column 9; the quote adds one; "call.config.y" is at offset 19.
    assert expr.right.span is not None
    assert (expr.right.span.file, expr.right.span.line, expr.right.span.column) == ("f.yaml", 2, 28)
    assert expr.left.span is not None and expr.left.span.column == 10
    expr, _ = parse_guard(docs[0].data["a"]["b"], at(("a", "b")))
    assert isinstance(expr, Compare)
    assert isinstance(expr.right, Literal) and expr.right.span is not None
    assert (expr.right.span.line, expr.right.span.column) == (3, 23)
    _, diags = parse_guard("call.config.x and and", at(("a", "when")))
    assert (diags[0].line, diags[0].column) == (2, 28)


@pytest.mark.parametrize(
    "text",
    [
        "len(call.config.members) > 1",  # function call
        "call.config.name.upper()",  # method call
        "call.config.a + 1 > 2",  # arithmetic
        "[x for x in call.inputs.members]",  # comprehension
        "for m in call.inputs.members",  # loop
        "lambda: true",
        "call.config.a if call.config.b else call.config.c",  # conditional expression
        "`call.config.a`",
        "${call.config.ifName}",  # interpolation syntax outside a string
        "call.config.a = 1",  # assignment
        "call.inputs.members[call.config.i]",  # computed index
        "call.inputs.members[-1]",
    ],
)
def test_the_grammar_has_no_calls_loops_arithmetic_or_interpolation(text: str) -> None:
    for parse in (parse_guard, parse_reference):
        expr, diags = parse(text)
        assert expr is None and [d.code for d in diags] in (
            [Code.E_SYNTAX],
            [Code.E_REF_UNRESOLVED],
        )


def test_strings_are_never_interpolated() -> None:
    # "${...}" inside a string literal is just those characters: nothing is substituted.
    expr, diags = parse_guard('call.config.s == "${call.config.t}"')
    assert not diags and expr is not None
    assert evaluate(expr, {"s": "${call.config.t}", "t": "x"}) is True
    assert evaluate(expr, {"s": "x", "t": "x"}) is False
    assert [r.text() for r in references(expr)] == ["call.config.s"]


def test_the_parser_is_built_once_and_parse_trees_are_cached() -> None:
    from dmn.interpreter import expressions

    assert expressions._parser() is expressions._parser()
    assert expressions._parser().options.parser == "lalr"
    before = expressions._parse_tree.cache_info().hits
    parse_guard("call.config.cached == 1", lambda line, column: None)
    parse_guard("call.config.cached == 1", lambda line, column: None)
    assert expressions._parse_tree.cache_info().hits > before


def test_a_built_ast_is_reused_only_at_the_same_position() -> None:
    """Issue 15: the checker parses a plugin's expressions again for every step using it;
    an AST is reused for the same text at the same position (source map identity + path),
    and the same text elsewhere still carries its own positions."""
    from dmn.interpreter import expressions

    (doc,), problems = load_yaml_documents("a: call.config.x == 1\nb: call.config.x == 1\n", "f")
    assert not problems
    at_a = ExpressionSpans(doc.source, ("a",))
    first, _ = parse_guard("call.config.x == 1", at_a, "a")
    hits = expressions._parse_positioned.cache_info().hits
    again, _ = parse_guard("call.config.x == 1", ExpressionSpans(doc.source, ("a",)), "a")
    assert again is first and expressions._parse_positioned.cache_info().hits == hits + 1
    at_b, _ = parse_guard("call.config.x == 1", ExpressionSpans(doc.source, ("b",)), "b")
    assert at_b is not None and first is not None
    assert (first.span.line, at_b.span.line) == (1, 2)
    (other,), _ = load_yaml_documents("a: call.config.x == 1\n", "g")
    elsewhere, _ = parse_guard("call.config.x == 1", ExpressionSpans(other.source, ("a",)), "a")
    assert elsewhere is not None and elsewhere.span.file == "g"


MULTILINE = """\
a:
  lit: |-
    call.config.x and
      call.config.bad
  fold: >-
    call.config.x and
    call.config.bad
  plain: call.config.x and
    call.config.bad
  dq: "call.config.s == \\"q\\" and
    call.config.bad"
  sq: 'call.config.s == ''q'' and
    call.config.bad'
"""


@pytest.mark.parametrize(
    ("key", "line", "column"),
    [("lit", 4, 7), ("fold", 7, 5), ("plain", 9, 5), ("dq", 11, 5), ("sq", 13, 5)],
)
def test_spans_inside_multiline_scalars_point_at_the_source_character(
    key: str, line: int, column: int
) -> None:
    """Block scalars drop their indentation and folded scalars turn line breaks into
    spaces, yet a diagnostic still points at the character in the file."""
    docs, diags = load_yaml_documents(MULTILINE, "m.yaml")
    assert not diags
    src = docs[0].source
    text = docs[0].data["a"][key]
    expr, _ = parse_guard(text, lambda ln, col: src.expression_span(("a", key), col, ln))
    assert isinstance(expr, BoolOp) and expr.right.span is not None
    assert (expr.right.span.line, expr.right.span.column) == (line, column)
    assert MULTILINE.splitlines()[line - 1][column - 1 :].startswith("call.config.bad")


def test_remembered_parameter_answers_keep_bool_and_int_apart() -> None:
    """field_error remembers scalar answers (issue 15); True and 1 hash alike but a strict
    integer field refuses one and takes the other, every time."""
    from pydantic import BaseModel

    from dmn.interpreter.parameters import field_error

    class Params(BaseModel):
        mtu: int

    for _ in range(2):
        assert field_error(Params, "mtu", 1) is None
        assert field_error(Params, "mtu", True) is not None
        assert field_error(Params, "mtu", 1.0) is not None
        assert field_error(Params, "mtu", [1]) is not None
