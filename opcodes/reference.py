"""The opcode reference: every spec described for people (``dmn opcodes``, ``docs/opcodes.md``).

Pure: the description is computed from the specs alone (the parameter models' JSON Schema
for types, bounds and defaults; the port specs; hooks, reversibility, recovery; the
``changes``/``undo`` prose each spec carries). The docs' reference is rendered from the same
description and drift-checked by ``dmn generate --check``, so the page cannot disagree with
what the checker enforces.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from dmn.opcodes.spec import OpcodeSpec, PortSpec

JsonObject = dict[str, Any]

_BOUND_KEYS = (
    ("minimum", "minimum"),
    ("maximum", "maximum"),
    ("exclusiveMinimum", "exclusiveMinimum"),
    ("exclusiveMaximum", "exclusiveMaximum"),
    ("minLength", "minLength"),
    ("maxLength", "maxLength"),
    ("pattern", "pattern"),
    ("minItems", "minItems"),
    ("maxItems", "maxItems"),
)


def _resolve(schema: Mapping[str, Any], defs: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        resolved: Mapping[str, Any] = defs[ref.removeprefix("#/$defs/")]
        return resolved
    return schema


def _type_text(schema: Mapping[str, Any], defs: Mapping[str, Any]) -> str:
    """A short human type: ``integer``, ``string``, ``one of "a", "b"``, ``list of integer``."""
    schema = _resolve(schema, defs)
    if "enum" in schema:
        return "one of " + ", ".join(
            f'"{v}"' if isinstance(v, str) else str(v) for v in schema["enum"]
        )
    if "const" in schema:
        value = schema["const"]
        return f'"{value}"' if isinstance(value, str) else str(value)
    options = schema.get("anyOf")
    if isinstance(options, list):
        texts = [_type_text(o, defs) for o in options if o.get("type") != "null"]
        return " or ".join(texts) if texts else "null"
    kind = schema.get("type")
    if kind == "array":
        items = schema.get("items", {})
        return f"list of {_type_text(items, defs)}"
    return str(kind) if kind is not None else "any"


def _bounds(schema: Mapping[str, Any], defs: Mapping[str, Any]) -> JsonObject:
    schema = _resolve(schema, defs)
    out: JsonObject = {}
    candidates: list[Mapping[str, Any]] = [schema]
    options = schema.get("anyOf")
    if isinstance(options, list):
        candidates += [_resolve(o, defs) for o in options]
    for candidate in candidates:
        for key, name in _BOUND_KEYS:
            if key in candidate:
                out[name] = candidate[key]
        items = candidate.get("items")
        if isinstance(items, Mapping):
            item_bounds = _bounds(items, defs)
            if item_bounds:
                out["items"] = item_bounds
    return out


_NO_DEFAULT = object()


def _default(spec: OpcodeSpec, alias: str) -> Any:
    """The field's default (also from a ``default_factory``, which JSON Schema omits)."""
    for name, info in spec.parameters.model_fields.items():
        if (info.alias or name) != alias:
            continue
        if info.is_required():
            return _NO_DEFAULT
        return info.get_default(call_default_factory=True)
    return _NO_DEFAULT


def _parameters(spec: OpcodeSpec) -> JsonObject:
    schema = spec.parameters.model_json_schema(by_alias=True)
    defs: Mapping[str, Any] = schema.get("$defs", {})
    required = set(schema.get("required", []))
    fields: list[JsonObject] = []
    for name, prop in schema.get("properties", {}).items():
        entry: JsonObject = {
            "name": name,
            "type": _type_text(prop, defs),
            "required": name in required,
        }
        bounds = _bounds(prop, defs)
        if bounds:
            entry["bounds"] = bounds
        default = _default(spec, name)
        if default is not _NO_DEFAULT:
            entry["default"] = default
        description = prop.get("description")
        if isinstance(description, str):
            entry["description"] = description
        fields.append(entry)
    doc = (spec.parameters.__doc__ or "").strip()
    return {"description": " ".join(doc.replace("``", "`").split()), "fields": fields}


def _sorted(values: Iterable[Any]) -> list[str]:
    return sorted(str(v) for v in values)


def _port(name: str, port: PortSpec, is_input: bool) -> JsonObject:
    entry: JsonObject = {
        "name": name,
        "type": port.type.value,
        "linkTypes": _sorted(port.link_types) if port.link_types is not None else None,
        "scope": port.scope.value if port.scope is not None else "any",
        "minItems": port.min_items,
        "maxItems": port.max_items,
    }
    if is_input:
        entry["access"] = port.access.value if port.access is not None else None
    else:
        entry["grants"] = _sorted(port.grants)
        entry["inherits"] = port.inherits
    return entry


def describe(spec: OpcodeSpec) -> JsonObject:
    """Everything an author or operator needs about one opcode, as plain JSON data."""
    return {
        "name": spec.name,
        "family": spec.family,
        "version": spec.version,
        "summary": spec.summary,
        "changes": spec.changes,
        "undo": spec.undo,
        "hooks": _sorted(spec.hooks),
        "reversibility": spec.reversibility.value,
        "recovery": _sorted(spec.recovery),
        "requires": _sorted(spec.requires),
        "postconditions": _sorted(spec.postconditions),
        "mutatesParent": spec.mutates_parent,
        "parameters": _parameters(spec),
        "inputs": [_port(n, p, True) for n, p in sorted(spec.inputs.items())],
        "outputs": [_port(n, p, False) for n, p in sorted(spec.outputs.items())],
    }


def _bounds_text(bounds: Mapping[str, Any]) -> str:
    parts: list[str] = []
    for key, value in bounds.items():
        if key == "items":
            parts.append("items: " + _bounds_text(value))
        elif key == "pattern":
            parts.append(f"pattern `{value}`")
        else:
            parts.append(f"{key} {value}")
    return ", ".join(parts)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _port_rows(ports: list[JsonObject], is_input: bool) -> list[str]:
    if not ports:
        return ["none"]
    last = "access" if is_input else "grants (inherits)"
    rows = [
        f"| port | handle | link types | scope | items | {last} |",
        "|---|---|---|---|---|---|",
    ]
    for port in ports:
        links = ", ".join(port["linkTypes"]) if port["linkTypes"] else "any"
        items = f"{port['minItems']}..{port['maxItems']}"
        if is_input:
            tail = port["access"] or "-"
        else:
            tail = ", ".join(port["grants"]) or "-"
            if port["inherits"]:
                tail += f" (inherits `{port['inherits']}`)"
        rows.append(
            f"| `{port['name']}` | {port['type']} | {links} | {port['scope']} | {items} | {tail} |"
        )
    return rows


def render_markdown(entry: Mapping[str, Any], level: int = 2) -> str:
    """One opcode as a Markdown section (stable output: the docs are drift-checked)."""
    head = "#" * level
    lines = [f"{head} `{entry['name']}`", "", entry["summary"], ""]
    lines.append(f"- **Changes on the node:** {entry['changes']}")
    lines.append(f"- **Undo:** {entry['undo']}")
    lines.append(f"- **Hooks:** {', '.join(entry['hooks'])}")
    lines.append(f"- **Reversibility:** {entry['reversibility']}")
    lines.append(f"- **Recovery strategies:** {', '.join(entry['recovery'])}")
    if entry["requires"]:
        lines.append(f"- **Requires:** {', '.join(entry['requires'])}")
    if entry["postconditions"]:
        lines.append(f"- **Postconditions:** {', '.join(entry['postconditions'])}")
    if entry["mutatesParent"]:
        lines.append("- **Mutates a shared parent:** yes")
    lines.append("")
    params = entry["parameters"]
    lines.append("Parameters" + (f" — {params['description']}" if params["description"] else ""))
    lines.append("")
    if params["fields"]:
        lines += ["| name | type | required | default | bounds |", "|---|---|---|---|---|"]
        for field in params["fields"]:
            default = f"`{field['default']!r}`" if "default" in field else "-"
            bounds = _bounds_text(field.get("bounds", {})) or "-"
            lines.append(
                f"| `{field['name']}` | {_cell(field['type'])} | "
                f"{'yes' if field['required'] else 'no'} | {_cell(default)} | {_cell(bounds)} |"
            )
    else:
        lines.append("none")
    lines += ["", "Inputs", ""]
    lines += _port_rows(entry["inputs"], True)
    lines += ["", "Outputs", ""]
    lines += _port_rows(entry["outputs"], False)
    return "\n".join(lines) + "\n"


DOC_HEADER = """\
<!-- Generated by `dmn generate` from the opcode specs (opcodes/*/specs.py). Do not edit. -->
# Opcode reference

Every effect a HookProgram may use, with its parameters (types, bounds, defaults), its
typed input and output ports, the access each input needs, the hooks it may run in, whether
and how it is undone, and what it changes on a node. `dmn opcodes NAME` prints one entry;
`dmn opcodes --format json` prints the same data as JSON.

"""


def render_document(entries: Iterable[Mapping[str, Any]]) -> str:
    """The whole ``docs/opcodes.md`` page."""
    entries = list(entries)
    index = [f"- [`{e['name']}`](#{_anchor(e['name'])}) — {e['summary']}" for e in entries]
    sections = [render_markdown(e) for e in entries]
    return DOC_HEADER + "\n".join(index) + "\n\n" + "\n".join(sections)


def _anchor(name: str) -> str:
    """GitHub's heading anchor for ``## `name` ``: lower case, punctuation except - dropped."""
    return "".join(c for c in name.lower() if c.isalnum() or c in "-_ ").replace(" ", "-")
