"""``kubectl apply`` (client-side) semantics as a pure function: the three-way JSON merge patch.

Why: a merge patch of the manifest alone never removes a field that an earlier apply set
and the new manifest no longer has (a stale, misspelt config key stays for ever). kubectl
solves this by remembering the last applied manifest in the annotation
:data:`LAST_APPLIED` and patching with the three-way difference of (last applied, new
manifest, live object): fields the previous apply set that the new manifest drops are
deleted (``null``), fields the manifest sets are set, and fields other writers added
(finalizers, labels, defaults) are left alone. Lists are replaced whole (JSON merge patch
semantics; the project's kinds are custom resources, for which kubectl does the same).

Contract: :func:`three_way_patch` returns an RFC 7386 merge patch (possibly ``{}``) that
turns ``current`` into the applied state; it never includes ``status``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
#: above this the annotation is not recorded (annotations are capped at 256 KiB in total);
#: the apply then only sets fields, like a plain merge patch
MAX_LAST_APPLIED = 128 * 1024


def last_applied_json(manifest: Mapping[str, Any]) -> str | None:
    """The annotation value recording ``manifest`` (without the annotation), or None when
    too large to record."""
    meta = dict(manifest.get("metadata") or {})
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != LAST_APPLIED}
    if annotations:
        meta["annotations"] = annotations
    else:
        meta.pop("annotations", None)
    text = json.dumps({**manifest, "metadata": meta}, sort_keys=True, separators=(",", ":"))
    return text if len(text) <= MAX_LAST_APPLIED else None


def with_last_applied(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """``manifest`` carrying its own last-applied annotation (when small enough)."""
    recorded = last_applied_json(manifest)
    meta = dict(manifest.get("metadata") or {})
    if recorded is not None:
        meta["annotations"] = {**(meta.get("annotations") or {}), LAST_APPLIED: recorded}
    return {**manifest, "metadata": meta}


def previous_apply(current: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest recorded by the last apply of ``current`` ({} when none or unreadable)."""
    annotations = (current.get("metadata") or {}).get("annotations") or {}
    try:
        recorded = json.loads(annotations.get(LAST_APPLIED, "{}"))
    except (TypeError, ValueError):
        return {}
    return recorded if isinstance(recorded, dict) else {}


def three_way_patch(
    original: Mapping[str, Any], modified: Mapping[str, Any], current: Mapping[str, Any]
) -> dict[str, Any]:
    """Deletions of (original → modified) merged with the changes of (current → modified)."""
    patch = _deletions(original, modified)
    _merge_into(patch, _changes(current, modified))
    patch.pop("status", None)
    return patch


def _deletions(original: Mapping[str, Any], modified: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, old in original.items():
        if key not in modified:
            out[key] = None
        elif isinstance(old, Mapping) and isinstance(modified[key], Mapping):
            nested = _deletions(old, modified[key])
            if nested:
                out[key] = nested
    return out


def _changes(current: Mapping[str, Any], modified: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, new in modified.items():
        old = current.get(key)
        if isinstance(new, Mapping) and isinstance(old, Mapping):
            nested = _changes(old, new)
            if nested:
                out[key] = nested
        elif key not in current or old != new:
            out[key] = new
    return out


def _merge_into(target: dict[str, Any], patch: Mapping[str, Any]) -> None:
    for key, value in patch.items():
        if isinstance(value, Mapping) and isinstance(target.get(key), dict):
            _merge_into(target[key], value)
        else:
            target[key] = value
