"""Positions for objects that come from the API server, not from a file.

A NetworkPlugin or NetworkTopology the controller or the webhook rejects has no source file:
the API server sends JSON, and every diagnostic used to point at line 1, column 1. Here the
object *as the API server sent it* is rendered as YAML in one fixed layout — keys sorted at
every level, two-space indentation, sequences under a key not indented, multi-line strings
as ``|`` blocks, ``metadata.managedFields`` left out (all as ``kubectl get -o yaml``), but no
line folding — and parsed back with the project's positioned loader. A diagnostic's line
and column are then positions in that rendering, which :func:`render` reproduces byte for
byte (``dmn lab get KIND NAME -o yaml`` prints it), and :data:`POSITION_NOTE` says so
wherever such a position is shown. kubectl v1.37.2 (go-yaml) folds strings longer than 80
columns and quotes some strings differently (compared on one topology and one plugin): its
line numbers agree with ours up to the first folded string, not beyond.

Contract: pure; :func:`served_document` never raises for an object that is JSON data.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.scalarstring import LiteralScalarString

from dmn.interpreter.source import SourceMap, YamlDocument, load_yaml_documents

POSITION_NOTE = (
    "line:column in the object as the API server sent it, rendered as YAML "
    "(keys sorted, managedFields left out)"
)


def _layout(value: Any, top: bool = False) -> Any:
    if isinstance(value, Mapping):
        out = {}
        for key in sorted(value, key=str):
            if top and key == "metadata" and isinstance(value[key], Mapping):
                meta = {k: v for k, v in value[key].items() if k != "managedFields"}
                out[key] = _layout(meta)
            else:
                out[key] = _layout(value[key])
        return out
    if isinstance(value, list):
        return [_layout(item) for item in value]
    if isinstance(value, str) and "\n" in value.rstrip("\n") and "\r" not in value:
        return LiteralScalarString(value)
    return value


def render(obj: Mapping[str, Any]) -> str:
    """The object in the fixed YAML layout described above."""
    yaml = YAML(typ="rt", pure=True)
    yaml.indent(mapping=2, sequence=2, offset=0)
    yaml.width = 1 << 30  # never fold a long line: positions stay where the value is
    yaml.default_flow_style = False
    stream = io.StringIO()
    yaml.dump(_layout(obj, top=True), stream)
    return stream.getvalue()


def source_label(kind: str, name: str) -> str:
    """The "file" a served object's diagnostics name, e.g. ``networktopology/blue``."""
    return f"{kind.lower()}/{name}"


def served_document(obj: Mapping[str, Any], kind: str) -> YamlDocument:
    """``obj`` with positions from its rendering (labelled by :func:`source_label`)."""
    name = str((obj.get("metadata") or {}).get("name", ""))
    label = source_label(kind, name)
    documents, problems = load_yaml_documents(render(obj), label)
    if documents and not problems:
        return documents[0]
    # unreachable for JSON data; keep the contract (a positionless map) rather than raise
    return YamlDocument(data=dict(obj), source=SourceMap(label))
