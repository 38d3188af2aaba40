"""Server-side printing: ``meta.k8s.io`` ``Table`` responses, which ``kubectl get`` asks for.

A custom resource's columns are Name plus its CRD's ``additionalPrinterColumns`` (default:
Age), each cell the first result of the column's JSONPath, typed like the apiextensions
server does it (``date`` cells become human-readable ages, integers/numbers/booleans keep
their JSON type, strings are printed). Built-in kinds get Name and Age (and a few Pod columns);
a real server prints richer built-in columns. Rows carry ``PartialObjectMetadata`` (or the
object with ``includeObject=Object``, nothing with ``None``).

The JSONPath subset is what printer columns use: ``.field``, ``['field']``, ``[n]``, ``[*]``
and filters ``[?(@.a.b=="x")]`` / ``!=`` with string or number literals.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from .kinds import ResourceType

_DEFAULT_AGE = {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}
_BUILTIN_COLUMNS: dict[tuple[str, str], list[dict[str, Any]]] = {
    ("", "pods"): [
        {"name": "Status", "type": "string", "jsonPath": ".status.phase"},
        {"name": "Node", "type": "string", "jsonPath": ".spec.nodeName", "priority": 1},
    ],
    ("", "namespaces"): [{"name": "Status", "type": "string", "jsonPath": ".status.phase"}],
}
_TOKEN = re.compile(
    r"""\.(?P<field>[A-Za-z0-9_\-]+)
      | \[\s*'(?P<quoted>[^']*)'\s*\]
      | \[\s*(?P<index>-?\d+)\s*\]
      | \[\s*\*\s*\]
      | \[\?\(\s*@(?P<fpath>(?:\.[A-Za-z0-9_\-]+)+)\s*(?P<op>==|!=)\s*
          (?P<lit>"[^"]*"|'[^']*'|-?[\d.]+)\s*\)\]""",
    re.X,
)


def wants_table(accept: str) -> str | None:
    """The Table version (``v1``/``v1beta1``) the Accept header asks for first, if any."""
    for media in accept.split(","):
        params = dict(p.strip().split("=", 1) for p in media.split(";")[1:] if "=" in p)
        if params.get("as") == "Table" and params.get("g") == "meta.k8s.io":
            return params.get("v", "v1")
    return None


def jsonpath(expression: str, obj: Any) -> list[Any]:
    """Evaluate the printer-column JSONPath subset; the list of matches (maybe empty)."""
    text = expression.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    text = text.lstrip("$")
    current = [obj]
    pos = 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            return []
        pos = match.end()
        current = _step(match, current)
    return current


def _step(match: re.Match[str], values: list[Any]) -> list[Any]:
    out: list[Any] = []
    field = match.group("field") or match.group("quoted")
    for value in values:
        if field is not None:
            if isinstance(value, Mapping) and field in value:
                out.append(value[field])
        elif match.group("index") is not None:
            if isinstance(value, list):
                i = int(match.group("index"))
                if -len(value) <= i < len(value):
                    out.append(value[i])
        elif match.group("op") is not None:
            if isinstance(value, list):
                literal = json.loads(match.group("lit").replace("'", '"'))
                for item in value:
                    found = jsonpath(match.group("fpath"), item)
                    equal = bool(found) and found[0] == literal
                    if equal == (match.group("op") == "=="):
                        out.append(item)
        elif isinstance(value, list):
            out.extend(value)
        elif isinstance(value, Mapping):
            out.extend(value.values())
    return out


def human_age(timestamp: str, now: dt.datetime | None = None) -> str:
    """Kubernetes' ``HumanDuration`` of the time since an RFC 3339 timestamp."""
    try:
        then = dt.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return "<invalid>"
    seconds = int(((now or dt.datetime.now(dt.UTC)) - then).total_seconds())
    if seconds < -1:
        return "<invalid>"
    seconds = max(seconds, 0)
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if seconds < 120:
        return f"{seconds}s"
    if minutes < 10:
        rest = seconds % 60
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        rest = minutes % 60
        return f"{hours}h{rest}m" if rest else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 192:
        rest = hours % 24
        return f"{days}d{rest}h" if rest else f"{days}d"
    years = days // 365
    if years < 2:
        return f"{days}d"
    if years < 8:
        rest = days % 365
        return f"{years}y{rest}d" if rest else f"{years}y"
    return f"{years}y"


def columns_for(rt: ResourceType, crd: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """Printer columns (after Name) for a type: the CRD's, or the built-in defaults."""
    if crd is not None:
        for version in (crd.get("spec") or {}).get("versions") or []:
            if version.get("name") == rt.version:
                return list(version.get("additionalPrinterColumns") or [_DEFAULT_AGE])
        return [_DEFAULT_AGE]
    return [*_BUILTIN_COLUMNS.get((rt.group, rt.plural), []), _DEFAULT_AGE]


def _cell(column: Mapping[str, Any], obj: Any) -> Any:
    found = jsonpath(str(column.get("jsonPath", "")), obj)
    if not found or found[0] is None:
        return None
    value = found[0]
    kind = column.get("type", "string")
    if kind == "date":
        return human_age(value) if isinstance(value, str) else None
    if kind == "string":
        return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    if kind == "integer":
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    if kind == "number":
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if kind == "boolean":
        return value if isinstance(value, bool) else None
    return None


def _row_object(obj: Mapping[str, Any], include: str) -> dict[str, Any] | None:
    if include == "None":
        return None
    if include == "Object":
        return dict(obj)
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata") or {},
    }


def table(
    version: str,
    columns: list[dict[str, Any]],
    objects: Sequence[Mapping[str, Any]],
    resource_version: str,
    *,
    include: str = "Metadata",
    with_definitions: bool = True,
) -> dict[str, Any]:
    definitions = [
        {
            "name": "Name",
            "type": "string",
            "format": "name",
            "description": "Name must be unique within a namespace.",
            "priority": 0,
        }
    ] + [
        {
            "name": c.get("name", ""),
            "type": c.get("type", "string"),
            "format": c.get("format", ""),
            "description": c.get("description", ""),
            "priority": int(c.get("priority", 0)),
        }
        for c in columns
    ]
    rows = []
    for obj in objects:
        row: dict[str, Any] = {
            "cells": [(obj.get("metadata") or {}).get("name")] + [_cell(c, obj) for c in columns]
        }
        row_object = _row_object(obj, include)
        if row_object is not None:
            row["object"] = row_object
        rows.append(row)
    body: dict[str, Any] = {
        "kind": "Table",
        "apiVersion": f"meta.k8s.io/{version}",
        "metadata": {"resourceVersion": resource_version},
        "rows": rows,
    }
    if with_definitions:
        body["columnDefinitions"] = definitions
    return body
