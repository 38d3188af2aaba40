"""JSON Schema for the documents administrators write, for editors (``dmn schema KIND``).

The schemas are generated from the same strict pydantic models that validate the documents
(``dmn.interpreter.documents`` for HookProgram and NetworkPlugin, ``dmn.api.topology`` for
NetworkTopology, ``dmn.api.ipam.ippool`` for IPPool), so an editor's YAML language server
flags the same unknown fields, enums and bounds ``dmn lint`` does. They describe *shape*
only: references, opcodes, ports and a topology's config against its plugin's
``configSchema`` are the checker's and compiler's (an IPPool's address rules, ``dmn lint``'s).
Kubernetes-only keywords (``x-kubernetes-*``) are dropped; ``metadata`` of the CRD kinds is
left open the way the API server leaves it.

A topology step's ``config`` is checked against the ``configSchema`` of the builtin plugin its
``pluginRef`` names (an ``if``/``then`` per builtin). ``configSchema`` is already a JSON-Schema
subset; its conditional presence (``requiredWhen``/``forbiddenWhen``, guards of the effect
language) has no JSON-Schema form an editor understands, so it is left to ``dmn lint`` and the
compiler, and Python full-match patterns are anchored for JSON Schema's search semantics.

Beyond the models' shape, the schemas know the opcode registry and the reference syntax, so
an editor flags the mistakes a new plugin author makes most: an effect ``kind`` (or an
``allowedEffects`` entry) that is no registered opcode, a parameter or input port the opcode
does not have, a ``from:`` that is no reference (``config.mtu`` for ``call.config.mtu``), and
an Allocation plugin whose ``configSchema`` has no ``mode``.

Use from an editor with a modeline on the first line of the document::

    # yaml-language-server: $schema=networktopology.schema.json
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from dmn.api.ipam.ippool import IPPool
from dmn.api.topology import NetworkTopology
from dmn.interpreter.documents import CRD_SCHEMA, HookProgram, NetworkPlugin
from dmn.interpreter.loader import load_builtin_plugins
from dmn.opcodes.registry import default_registry

DRAFT = "https://json-schema.org/draft/2020-12/schema"

KINDS: dict[str, type[BaseModel]] = {
    "HookProgram": HookProgram,
    "NetworkPlugin": NetworkPlugin,
    "NetworkTopology": NetworkTopology,
    "IPPool": IPPool,
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


_WORD = r"[A-Za-z_][A-Za-z0-9_-]*"
_RESERVED = r"(?:and|or|not|in|true|false|null)(?![A-Za-z0-9_-])"
_NAME = r"(?!" + _RESERVED + r")" + _WORD
_DOT = r"\s*\.\s*"
_INDEX = r"(?:\s*\[\s*[0-9]{1,4}\s*\])?"
#: What the expression parser accepts as a ``from:`` reference (``grammar/effects.lark`` and
#: its classification of names), as one anchored regular expression: ``call.config.<field>``
#: (or ``.<field>.<member>``),
#: ``call.inputs|prepared.<port>[i]``, ``call.allocation[.<port>][i]``, ``call.sandbox``,
#: ``effects.<id>.<port>[i]`` or a forEach variable. A property test holds it to the parser.
REFERENCE_PATTERN = (
    r"^\s*(?:call"
    + _DOT
    + r"(?:config"
    + _DOT
    + _NAME
    + r"(?:"
    + _DOT
    + _NAME
    + r")?"
    + r"|(?:inputs|prepared)"
    + _DOT
    + _NAME
    + _INDEX
    + r"|allocation(?:"
    + _DOT
    + _NAME
    + r")?"
    + _INDEX
    + r"|sandbox)"
    + r"|effects"
    + _DOT
    + _NAME
    + _DOT
    + _NAME
    + _INDEX
    + r"|(?!(?:call|effects)(?![A-Za-z0-9_-]))"
    + _NAME
    + r")\s*$"
)


def _opcode_rules(defs: dict[str, Any]) -> None:
    """Effects name registered opcodes and only their parameters and input ports; a
    reference is one the grammar accepts."""
    registry = default_registry()
    names = registry.names()
    effect = defs["Effect"]
    effect["properties"]["kind"] = {
        "type": "string",
        "enum": names,
        "description": "a registered opcode (`dmn opcodes` lists them)",
    }
    rules: list[dict[str, Any]] = []
    for name in names:
        spec = registry.get(name)
        if spec is None:
            continue
        params = sorted(spec.parameters.model_json_schema(by_alias=True).get("properties", {}))
        ports = sorted(spec.inputs)
        rules.append(
            {
                "if": {"properties": {"kind": {"const": name}}, "required": ["kind"]},
                "then": {
                    "properties": {
                        "parameters": {"propertyNames": {"enum": params}},
                        "parameterBindings": {"propertyNames": {"enum": params}},
                        "inputs": {"propertyNames": {"enum": ports}},
                    }
                },
            }
        )
    effect["allOf"] = [*effect.get("allOf", []), *rules]
    defs["Ref"]["properties"]["from"] = {
        "type": "string",
        "pattern": REFERENCE_PATTERN,
        "description": "call.config.<field>, call.inputs.<port>, call.prepared.<port>, "
        "call.allocation[.<port>], call.sandbox, effects.<id>.<port> or a forEach variable",
    }


def _allocation_mode(spec: dict[str, Any]) -> None:
    """An Allocation plugin's ``configSchema`` has a string ``mode`` (``dmn lint`` says the
    same, and that it must be required or defaulted)."""
    mode_rule = {
        "description": "an Allocation plugin's configSchema needs a string property `mode`, "
        "the persona mode a DeviceExposurePolicy exposes devices under",
        "required": ["properties"],
        "properties": {
            "properties": {
                "required": ["mode"],
                "properties": {"mode": {"properties": {"type": {"const": "string"}}}},
            }
        },
    }
    spec["allOf"] = [
        *spec.get("allOf", []),
        {
            "if": {
                "properties": {"stepKinds": {"contains": {"const": "Allocation"}}},
                "required": ["stepKinds"],
            },
            "then": {"properties": {"configSchema": mode_rule}},
        },
    ]


def editor_schema(kind: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one document kind; ``KeyError`` if unknown."""
    model = KINDS[kind]
    schema: dict[str, Any] = _clean(model.model_json_schema(by_alias=True, mode="validation"))
    _require_identity(schema)
    if kind == "NetworkTopology":
        _builtin_configs(schema["$defs"]["Step"])
    if kind in ("HookProgram", "NetworkPlugin"):
        _opcode_rules(schema["$defs"])
    if kind == "NetworkPlugin":
        _allocation_mode(schema["$defs"]["PluginSpec"])
        allowed = schema["$defs"]["PluginSpec"]["properties"]["allowedEffects"]
        allowed["items"] = {"type": "string", "enum": default_registry().names()}
    return {"$schema": DRAFT, "$id": f"{kind.lower()}.schema.json", **schema}
