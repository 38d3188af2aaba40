"""Where ``dmn compile`` finds NetworkPlugin descriptors: a directory of NetworkPlugin
YAML documents (``--plugins DIR``) or, by default, the builtin plugin CRs shipped in the
chart. Loading goes through the language core's positioned YAML loader, so a broken
plugin file is a diagnostic, never a traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dmn.interpreter.diagnostics import Code, Diagnostic, SourceSpan
from dmn.interpreter.source import load_yaml_documents

BUILTIN_DIR = (
    Path(__file__).resolve().parents[2] / "charts" / "dra-multi-network" / "templates" / "plugins"
)


def load_plugin_dir(directory: Path) -> tuple[dict[str, dict[str, Any]], list[Diagnostic]]:
    plugins: dict[str, dict[str, Any]] = {}
    diagnostics: list[Diagnostic] = []
    if not directory.is_dir():
        diagnostics.append(
            Diagnostic.at(Code.E_IO, f"plugin directory {directory} not found", None)
        )
        return plugins, diagnostics
    for path in sorted(directory.rglob("*.yaml")):
        try:
            text = path.read_bytes()
        except OSError as exc:
            diagnostics.append(Diagnostic.at(Code.E_IO, str(exc), SourceSpan(str(path), 1, 1)))
            continue
        docs, problems = load_yaml_documents(text, str(path))
        diagnostics += problems
        for doc in docs:
            data = doc.data
            if isinstance(data, dict) and data.get("kind") == "NetworkPlugin":
                name = str((data.get("metadata") or {}).get("name", ""))
                if name:
                    plugins[name] = data
    return plugins, diagnostics


def builtin_plugins() -> tuple[dict[str, dict[str, Any]], list[Diagnostic]]:
    if not BUILTIN_DIR.is_dir():
        return {}, []
    return load_plugin_dir(BUILTIN_DIR)
