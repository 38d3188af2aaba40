"""Helpers for compiler tests: fixture plugin descriptors, example paths, a YAML loader."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from dmn.controller.compile.plugin_sources import plugin_from_object
from dmn.interpreter.loader import Plugin, load_builtin_plugins
from dmn.interpreter.source import SourceMap, load_yaml_documents

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
EXAMPLES = REPO / "examples" / "topologies"
NEGATIVE = REPO / "examples" / "negative" / "topologies"


def fixture_plugins() -> dict[str, Plugin]:
    """The shipped builtin plugins (programs/)."""
    return load_builtin_plugins()


def as_object(plugin: Plugin) -> dict[str, Any]:
    """A plugin as a NetworkPlugin CR dict with inline hooks (to edit in tests)."""
    content = copy.deepcopy(plugin.to_json())
    obj: dict[str, Any] = content["descriptor"]
    hooks = obj["spec"].setdefault("hooks", {})
    hooks.update(content["programs"])
    obj["spec"]["implementation"] = {"type": "EffectProgram"}
    return obj


def from_object(obj: dict[str, Any]) -> Plugin:
    plugin, problems = plugin_from_object(obj)
    assert plugin is not None and not problems, problems
    return plugin


def load_topology(path: Path) -> tuple[dict[str, Any], SourceMap]:
    docs, problems = load_yaml_documents(path.read_bytes(), str(path))
    assert not problems, problems
    return docs[0].data, docs[0].source


def load_text(text: str, name: str = "t.yaml") -> tuple[dict[str, Any], SourceMap]:
    docs, problems = load_yaml_documents(text, name)
    assert not problems, problems
    return docs[0].data, docs[0].source
