"""YAML loading: positions, duplicate keys, and no traceback on any input."""

from __future__ import annotations

from dmn.interpreter.diagnostics import Code
from dmn.interpreter.source import load_yaml_documents, path_text


def test_positions_of_keys_and_values_are_one_based() -> None:
    docs, diags = load_yaml_documents("a: 1\nb:\n  c: [x, 'y']\n", "f.yaml")
    assert not diags
    src = docs[0].source
    assert src.span(("a",)) == src.span(("a",))
    a = src.nodes[("a",)]
    assert (a.span.line, a.span.column) == (1, 4)
    assert (a.key_span.line, a.key_span.column) == (1, 1)  # type: ignore[union-attr]
    y = src.nodes[("b", "c", 1)]
    assert (y.span.line, y.span.column, y.style) == (3, 10, "'")
    assert docs[0].data == {"a": 1, "b": {"c": ["x", "y"]}}


def test_unknown_path_falls_back_to_nearest_parent() -> None:
    docs, _ = load_yaml_documents("a:\n  b: 1\n", "f")
    span = docs[0].source.span(("a", "b", "missing"))
    assert span is not None and (span.line, span.column) == (2, 6)


def test_duplicate_keys_are_reported_not_overwritten() -> None:
    docs, diags = load_yaml_documents("a: 1\nb: 2\na: 3\n", "f.yaml")
    assert docs[0].data == {"a": 1, "b": 2}
    assert [(d.code, d.line, d.column, d.path) for d in diags] == [
        (Code.E_DUPLICATE_KEY, 3, 1, "a")
    ]


def test_scalars_follow_yaml_1_2_and_json() -> None:
    docs, diags = load_yaml_documents(
        "i: 0x1F\no: 0o17\nb: true\ny: yes\nn: ~\nf: 1.5\ns: '1'\n", "f"
    )
    assert not diags
    assert docs[0].data == {"i": 31, "o": 15, "b": True, "y": "yes", "n": None, "f": 1.5, "s": "1"}


def test_explicit_false_is_kept() -> None:
    docs, _ = load_yaml_documents("up: false\n", "f")
    assert docs[0].data == {"up": False}
    assert "up" in docs[0].data


def test_syntax_error_has_a_position() -> None:
    docs, diags = load_yaml_documents("a: [1, 2\nb: 3\n", "f")
    assert not docs
    assert diags[0].code is Code.E_SYNTAX
    assert diags[0].line >= 2


def test_tags_and_bad_bytes_are_diagnostics() -> None:
    _, diags = load_yaml_documents("a: !!python/object x\n", "f")
    assert diags[0].code is Code.E_SCHEMA
    _, diags = load_yaml_documents(b"\xff\xfe\x00", "f")
    assert diags[0].code is Code.E_SYNTAX
    _, diags = load_yaml_documents("a: \x00\n", "f")
    assert diags[0].code is Code.E_SYNTAX


def test_recursive_aliases_do_not_crash() -> None:
    _, diags = load_yaml_documents("a: &x [*x]\n", "f")
    assert diags and diags[0].code in (Code.E_SYNTAX, Code.E_SCHEMA, Code.E_LIMIT)
    lines = ["a: &a [x,x,x,x,x,x,x,x,x]"]
    for i in range(8):
        prev, name = chr(97 + i), chr(98 + i)
        lines.append(f"{name}: &{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    bomb = "\n".join(lines) + "\n"
    _, diags = load_yaml_documents(bomb, "f")
    assert any(d.code is Code.E_LIMIT and "nodes" in d.message for d in diags)


def test_multiple_documents_keep_their_index() -> None:
    docs, diags = load_yaml_documents("a: 1\n---\n# only a comment\n---\nb: 2\n", "f")
    assert not diags
    assert [d.data for d in docs] == [{"a": 1}, {"b": 2}]
    assert docs[1].source.nodes[("b",)].span.line == 5


def test_path_text() -> None:
    assert path_text(("spec", "hooks", "connect", "effects", 0, "id")) == (
        "spec.hooks.connect.effects[0].id"
    )
    assert path_text(()) == ""
