"""The three patch formats the lab accepts: JSON merge, JSON patch and strategic merge.

* ``application/merge-patch+json`` — RFC 7386: objects merge recursively, ``null`` deletes,
  everything else (lists included) replaces.
* ``application/json-patch+json`` — RFC 6902 operations over RFC 6901 pointers.
* ``application/strategic-merge-patch+json`` — only for built-in kinds (a real API server
  answers 415 for custom resources, and so does the lab). Lists merge by the patch merge
  keys the upstream schema declares (when ``kubernetes-validate`` is installed; otherwise by
  the table ``MERGE_KEYS`` of the fields we touch); every other list replaces. Directives
  ``$patch: replace|delete|merge`` and ``$deleteFromPrimitiveList/<field>`` are honoured;
  ``$setElementOrder`` and ``$retainKeys`` are accepted and ignored.

All functions are pure: they return a new document and never modify their inputs.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from .errors import ApiError, bad_request

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


# --- RFC 6902 ------------------------------------------------------------------------------


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request(f'json patch path "{path}" must start with "/"')
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _unprocessable(message: str) -> ApiError:
    return ApiError(422, "Invalid", message)


def _index(container: list[Any], token: str, *, for_add: bool) -> int:
    if token == "-" and for_add:
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
        raise _unprocessable(f'invalid array index "{token}"')
    idx = int(token)
    if idx > len(container) or (idx == len(container) and not for_add):
        raise _unprocessable(f"array index {idx} out of bounds")
    return idx


def _parent(doc: Any, tokens: list[str], path: str) -> Any:
    current = doc
    for token in tokens[:-1]:
        if isinstance(current, dict):
            if token not in current:
                raise _unprocessable(f'doc is missing path: "{path}"')
            current = current[token]
        elif isinstance(current, list):
            current = current[_index(current, token, for_add=False)]
        else:
            raise _unprocessable(f'doc is missing path: "{path}"')
    return current


def _get(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return doc
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise _unprocessable(f'doc is missing path: "{path}"')
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, for_add=False)]
    raise _unprocessable(f'doc is missing path: "{path}"')


def _add(doc: Any, path: str, value: Any) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, for_add=True), value)
    else:
        raise _unprocessable(f'doc is missing path: "{path}"')
    return doc


def _remove(doc: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        raise _unprocessable("cannot remove the whole document")
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise _unprocessable(f"unable to remove nonexistent key: {last}: missing value")
        del parent[last]
    elif isinstance(parent, list):
        del parent[_index(parent, last, for_add=False)]
    else:
        raise _unprocessable(f'doc is missing path: "{path}"')
    return doc


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902 JSON patch; malformed operations are 400, failed ones 422."""
    if not isinstance(operations, list):
        raise bad_request("json patch must be a JSON array of operations")
    doc = copy.deepcopy(target)
    for op in operations:
        if not isinstance(op, dict) or not isinstance(op.get("op"), str):
            raise bad_request(f"invalid json patch operation: {op!r}")
        kind = op["op"]
        path = op.get("path")
        if not isinstance(path, str):
            raise bad_request(f'json patch operation "{kind}" needs a string "path"')
        if kind == "add":
            doc = _add(doc, path, copy.deepcopy(_required_value(op)))
        elif kind == "remove":
            doc = _remove(doc, path)
        elif kind == "replace":
            _get(doc, path)
            doc = _remove(doc, path) if _pointer(path) else doc
            doc = _add(doc, path, copy.deepcopy(_required_value(op)))
        elif kind in ("move", "copy"):
            source = op.get("from")
            if not isinstance(source, str):
                raise bad_request(f'json patch operation "{kind}" needs a string "from"')
            value = copy.deepcopy(_get(doc, source))
            if kind == "move":
                doc = _remove(doc, source)
            doc = _add(doc, path, value)
        elif kind == "test":
            if _get(doc, path) != _required_value(op):
                raise _unprocessable(f"testing value {path} failed: test failed")
        else:
            raise bad_request(f'unexpected json patch operation "{kind}"')
    return doc


def _required_value(op: dict[str, Any]) -> Any:
    if "value" not in op:
        raise bad_request(f'json patch operation "{op["op"]}" needs a "value"')
    return op["value"]


# --- strategic merge -----------------------------------------------------------------------

# Field paths (list segments elided) whose lists merge by key in Kubernetes' Go types
# (``patchStrategy:"merge" patchMergeKey:...``). ``None`` = merge a list of primitives as a set.
_COMMON: dict[tuple[str, ...], str | None] = {
    ("metadata", "finalizers"): None,
    ("metadata", "ownerReferences"): "uid",
}
_CONTAINER = {
    ("env",): "name",
    ("ports",): "containerPort",
    ("volumeMounts",): "mountPath",
    ("volumeDevices",): "devicePath",
}


def _pod_keys() -> dict[tuple[str, ...], str | None]:
    keys: dict[tuple[str, ...], str | None] = {
        ("spec", "containers"): "name",
        ("spec", "initContainers"): "name",
        ("spec", "ephemeralContainers"): "name",
        ("spec", "volumes"): "name",
        ("spec", "imagePullSecrets"): "name",
        ("spec", "resourceClaims"): "name",
        ("status", "conditions"): "type",
        ("status", "podIPs"): "ip",
        ("status", "resourceClaimStatuses"): "name",
    }
    for container in ("containers", "initContainers", "ephemeralContainers"):
        for suffix, key in _CONTAINER.items():
            keys[("spec", container, *suffix)] = key
    return keys


MERGE_KEYS: dict[str, dict[tuple[str, ...], str | None]] = {
    "pods": _pod_keys(),
    "nodes": {("status", "conditions"): "type", ("status", "addresses"): "type"},
    "namespaces": {("status", "conditions"): "type"},
    "resourceclaims": {("status", "reservedFor"): "uid"},
}


def strategic_merge_patch(
    target: Any,
    patch: Any,
    plural: str,
    merge_keys: Mapping[tuple[str, ...], str | None] | None = None,
) -> Any:
    """Apply a strategic merge patch to a built-in object of resource ``plural``.

    ``merge_keys`` (from the upstream schema, see ``builtin_schema.patch_merge_keys``)
    replaces the built-in table when given.
    """
    if not isinstance(patch, dict):
        raise bad_request("strategic merge patch must be a JSON object")
    keys = dict(merge_keys) if merge_keys is not None else {**_COMMON, **MERGE_KEYS.get(plural, {})}
    return _smp_map(target if isinstance(target, dict) else {}, patch, (), keys)


def _smp_map(
    target: dict[str, Any],
    patch: dict[str, Any],
    path: tuple[str, ...],
    keys: dict[tuple[str, ...], str | None],
) -> dict[str, Any] | None:
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    body = {k: v for k, v in patch.items() if k not in ("$patch", "$retainKeys")}
    if directive == "replace":
        replaced: dict[str, Any] = _strip_directives(body)
        return replaced
    if directive not in (None, "merge"):
        raise bad_request(f"unknown patch directive {directive!r}")
    result = copy.deepcopy(target)
    deletions = {}
    for key, value in body.items():
        if key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            deletions[key.split("/", 1)[1]] = value
            continue
        child_path = (*path, key)
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            existing = result.get(key)
            merged = _smp_map(
                existing if isinstance(existing, dict) else {}, value, child_path, keys
            )
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list) and child_path in keys:
            existing = result.get(key)
            result[key] = _smp_list(
                existing if isinstance(existing, list) else [], value, child_path, keys
            )
        else:
            result[key] = _strip_directives(copy.deepcopy(value))
    for key, remove in deletions.items():
        if isinstance(result.get(key), list) and isinstance(remove, list):
            result[key] = [v for v in result[key] if v not in remove]
    return result


def _smp_list(
    target: list[Any],
    patch: list[Any],
    path: tuple[str, ...],
    keys: dict[tuple[str, ...], str | None],
) -> list[Any]:
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [
            _strip_directives(i)
            for i in patch
            if not (isinstance(i, dict) and i.get("$patch") == "replace")
        ]
    merge_key = keys[path]
    if merge_key is None:
        result = list(target)
        for item in patch:
            if item not in result:
                result.append(item)
        return result
    result = copy.deepcopy(target)
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            raise bad_request(f"map: {item!r} does not contain declared merge key: {merge_key}")
        position = next(
            (
                i
                for i, e in enumerate(result)
                if isinstance(e, dict) and e.get(merge_key) == item[merge_key]
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if position is not None:
                del result[position]
            continue
        if position is None:
            result.append(_strip_directives(item))
        else:
            merged = _smp_map(result[position], item, path, keys)
            if merged is not None:
                result[position] = merged
    return result


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: _strip_directives(v)
            for k, v in value.items()
            if not k.startswith("$") and v is not None
        }
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return value
