"""JSON Schema for the documents administrators write, for editors (``dmn schema KIND``).

The schemas are generated from the same strict pydantic models that validate the documents
(``dmn.interpreter.documents`` for HookProgram and NetworkPlugin, ``dmn.api.topology`` for
NetworkTopology), so an editor's YAML language server flags the same unknown fields, enums
and bounds ``dmn lint`` does. They describe *shape* only: references, opcodes, ports and a
topology's config against its plugin's ``configSchema`` are the checker's and compiler's.
Kubernetes-only keywords (``x-kubernetes-*``) are dropped; ``metadata`` of the CRD kinds is
left open the way the API server leaves it.

A topology step's ``config`` is checked against the ``configSchema`` of the builtin plugin its
``pluginRef`` names (an ``if``/``then`` per builtin). ``configSchema`` is already a JSON-Schema
subset; its conditional presence (``requiredWhen``/``forbiddenWhen``, guards of the effect
language) has no JSON-Schema form an editor understands, so it is left to ``dmn lint`` and the
compiler, and Python full-match patterns are anchored for JSON Schema's search semantics.

Use from an editor with a modeline on the first line of the document::

    # yaml-language-server: $schema=networktopology.schema.json
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from dmn.api.topology import NetworkTopology
from dmn.interpreter.documents import CRD_SCHEMA, HookProgram, NetworkPlugin
from dmn.interpreter.loader import load_builtin_plugins

DRAFT = "https://json-schema.org/draft/2020-12/schema"

KINDS: dict[str, type[BaseModel]] = {
    "HookProgram": HookProgram,
    "NetworkPlugin": NetworkPlugin,
    "NetworkTopology": NetworkTopology,
}


def _clean(node: Any) -> Any:
    """Drop Kubernetes extension keywords and the CRD-only payload schemas (``CRD_SCHEMA``),
    recursively; other keywords are kept as they are."""
    if isinstance(node, dict):
        return {
            k: _clean(v)
            for k, v in node.items()
            if not str(k).startswith("x-kubernetes-") and k != CRD_SCHEMA
        }
    if isinstance(node, list):
        return [_clean(v) for v in node]
    return node


def _require_identity(schema: dict[str, Any]) -> None:
    """``apiVersion`` and ``kind`` are required in every document an editor checks, even
    where the model gives them a default (the topology model does, for Python callers)."""
    required = schema.setdefault("required", [])
    for key in ("apiVersion", "kind"):
        if key in schema.get("properties", {}) and key not in required:
            required.insert(0, key)
    schema["required"] = sorted(set(required), key=required.index)


_LANGUAGE_ONLY = frozenset({"requiredWhen", "forbiddenWhen"})


def _config_schema(node: Any) -> Any:
    """A plugin ``configSchema`` as plain JSON Schema (see the module docstring)."""
    if isinstance(node, list):
        return [_config_schema(v) for v in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _LANGUAGE_ONLY:
            continue
        if key == "pattern" and isinstance(value, str):
            out[key] = value if value.startswith("^") and value.endswith("$") else f"^(?:{value})$"
        elif key == "properties" and isinstance(value, dict):
            out[key] = {name: _config_schema(prop) for name, prop in value.items()}
        else:
            out[key] = _config_schema(value)
    return out


def _builtin_configs(step: dict[str, Any]) -> None:
    """Constrain ``config`` of a step naming a builtin plugin to that plugin's schema."""
    rules: list[dict[str, Any]] = []
    for name, plugin in sorted(load_builtin_plugins().items()):
        config = plugin.to_json()["descriptor"]["spec"]["configSchema"]
        rules.append(
            {
                "if": {
                    "properties": {"pluginRef": {"properties": {"name": {"const": name}}}},
                    "required": ["pluginRef"],
                },
                "then": {"properties": {"config": _config_schema(config)}},
            }
        )
    step["allOf"] = [*step.get("allOf", []), *rules]


def editor_schema(kind: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one document kind; ``KeyError`` if unknown."""
    model = KINDS[kind]
    schema: dict[str, Any] = _clean(model.model_json_schema(by_alias=True, mode="validation"))
    _require_identity(schema)
    if kind == "NetworkTopology":
        _builtin_configs(schema["$defs"]["Step"])
    return {"$schema": DRAFT, "$id": f"{kind.lower()}.schema.json", **schema}
