"""The pure-Python YAML fallback composes folded scalars exactly like libyaml."""

from __future__ import annotations

from dmn.interpreter import source

TEXT = "a: >-\n  one long line\n  folded here\n\n  second paragraph\nb: >\n  x\n  y\n"


def test_pure_fallback_matches_default_composer(monkeypatch) -> None:
    default, _ = source.load_yaml_documents(TEXT, "f.yaml")
    monkeypatch.setattr(source, "_composer", source._pure_composer)
    pure, diags = source.load_yaml_documents(TEXT, "f.yaml")
    assert diags == []
    assert pure[0].data == {"a": "one long line folded here\nsecond paragraph", "b": "x y\n"}
    assert pure[0].data == default[0].data
