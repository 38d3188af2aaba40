"""Built-in kinds validated against the upstream Kubernetes OpenAPI schemas.

The schemas are the ones ``kubernetes-validate`` ships (converted from the upstream
OpenAPI, non-strict flavour, newest bundled version). A violation becomes a field cause of a
422 Invalid, so an object a real server would refuse for its shape — a ResourceSlice without
``spec.driver``, a ConfigMap value that is not a string — is refused in the lab too. This is
the upstream *schema* only: Go-side validation (name formats inside specs, CEL selector
compilation, cross-field rules, immutability) is not reproduced. Unknown fields are allowed,
as the real server drops them rather than failing.

Optional: without ``kubernetes-validate`` installed, built-in kinds are not validated.
"""

from __future__ import annotations

import logging
import re
from functools import lru_cache
from typing import Any

from . import errors
from .errors import Cause

log = logging.getLogger(__name__)

try:  # optional dependency: the schemas are large data, the lab works without them
    import jsonschema  # type: ignore[import-untyped]
    from kubernetes_validate import utils as _kv
    from referencing import Registry, Resource
except ImportError:  # pragma: no cover - exercised only where the package is absent
    _kv = None


def available() -> bool:
    return _kv is not None


@lru_cache(maxsize=64)
def _validator(api_version: str, kind: str) -> Any:
    loaded = _schemas(api_version, kind)
    if loaded is None:
        log.debug("no upstream schema api_version=%s kind=%s", api_version, kind)
        return None
    schema, _defs = loaded
    definitions = _definitions_document()
    registry = Resource.from_contents(definitions) @ (Resource.from_contents(schema) @ Registry())
    return jsonschema.validators.Draft202012Validator(schema, registry=registry)


def _path(parts: Any) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def validate_builtin(obj: dict[str, Any]) -> list[Cause]:
    """Field causes for ``obj`` against its kind's upstream schema (empty when valid/unknown)."""
    validator = _validator(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
    if validator is None:
        return []
    causes: list[Cause] = []
    for error in sorted(validator.iter_errors(obj), key=lambda e: list(map(str, e.absolute_path))):
        path = _path(error.absolute_path)
        if error.validator == "required":
            instance = error.instance if isinstance(error.instance, dict) else {}
            for name in error.validator_value:
                if name not in instance:
                    causes.append(errors.required(f"{path}.{name}" if path else name))
        elif error.validator == "type":
            expected = error.validator_value
            expected = (
                expected
                if isinstance(expected, str)
                else " or ".join(t for t in expected if t != "null")
            )
            causes.append(
                errors.type_invalid(
                    path, error.instance, f"{path} in body must be of type {expected}"
                )
            )
        elif error.validator == "enum":
            causes.append(errors.not_supported(path, error.instance, list(error.validator_value)))
        else:
            causes.append(errors.invalid(path, error.instance, error.message))
    return causes


MergeKeys = dict[tuple[str, ...], "str | None"]


def _directory() -> tuple[str, str]:
    version = _kv.latest_version()
    return f"kubernetes-json-schema/v{version}-local", version


@lru_cache(maxsize=1)
def _definitions_document() -> Any:
    directory, version = _directory()
    return _kv.schema_contents(f"{directory}/_definitions.json", version)


@lru_cache(maxsize=64)
def _schemas(api_version: str, kind: str) -> tuple[Any, Any] | None:
    """(kind schema, shared ``$defs``) from kubernetes-validate, or None."""
    if _kv is None:
        return None
    directory, version = _directory()
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    try:
        schema = _kv.schema_contents(f"{directory}/{kind.lower()}-{group_version}.json", version)
        definitions = _definitions_document()
    except (FileNotFoundError, _kv.InvalidSchemaError):
        return None
    return schema, definitions.get("$defs") or definitions.get("definitions") or {}


@lru_cache(maxsize=64)
def patch_merge_keys(api_version: str, kind: str) -> MergeKeys | None:
    """Strategic-merge list keys of a built-in kind, read from the upstream schema.

    Maps each field path (list levels elided, as strategic merge addresses them) whose
    ``x-kubernetes-patch-strategy`` includes ``merge`` to its ``x-kubernetes-patch-merge-key``
    (None for lists of primitives merged as sets). None when no schema is available.
    """
    loaded = _schemas(api_version, kind)
    if loaded is None:
        return None
    schema, defs = loaded
    keys: MergeKeys = {}

    def resolve(node: Any) -> Any:
        ref = node.get("$ref") if isinstance(node, dict) else None
        if isinstance(ref, str) and "/" in ref:
            return defs.get(ref.rsplit("/", 1)[-1], {}), ref.rsplit("/", 1)[-1]
        return node, None

    def walk(node: Any, path: tuple[str, ...], seen: frozenset[str]) -> None:
        node, name = resolve(node)
        if not isinstance(node, dict) or len(path) > 12:
            return
        if name is not None:
            if name in seen:
                return
            seen = seen | {name}
        for prop, sub in (node.get("properties") or {}).items():
            if not isinstance(sub, dict):
                continue
            child = (*path, prop)
            if "merge" in str(sub.get("x-kubernetes-patch-strategy", "")).split(","):
                keys[child] = sub.get("x-kubernetes-patch-merge-key")
            target = sub.get("items") if "items" in sub else sub
            walk(target, child, seen)

    walk(schema, (), frozenset())
    return keys
