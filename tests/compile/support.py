"""Helpers for compiler tests: fixture plugin descriptors, example paths, a YAML loader."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dmn.controller.compile.plugin_sources import load_plugin_dir
from dmn.interpreter.source import SourceMap, load_yaml_documents

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
PLUGIN_DIR = HERE / "plugins"
EXAMPLES = REPO / "examples" / "topologies"
NEGATIVE = REPO / "examples" / "negative" / "topologies"


def fixture_plugins() -> dict[str, dict[str, Any]]:
    found, problems = load_plugin_dir(PLUGIN_DIR)
    assert not problems, problems
    return found


def load_topology(path: Path) -> tuple[dict[str, Any], SourceMap]:
    docs, problems = load_yaml_documents(path.read_bytes(), str(path))
    assert not problems, problems
    return docs[0].data, docs[0].source


def load_text(text: str, name: str = "t.yaml") -> tuple[dict[str, Any], SourceMap]:
    docs, problems = load_yaml_documents(text, name)
    assert not problems, problems
    return docs[0].data, docs[0].source
