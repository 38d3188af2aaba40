"""Reads Kubernetes manifests (``-f FILE|DIR``) for the lab's client commands.

A directory contributes its ``*.yaml``/``*.yml``/``*.json`` files (not recursive), sorted
by name; a file may hold several YAML documents. Every problem is a
:class:`ManifestError` with a stable reason code — ``E_IO`` (missing or unreadable),
``E_SYNTAX`` (not YAML), ``E_MANIFEST`` (a document that is not an object with
``apiVersion``, ``kind`` and ``metadata.name``) — and the file (and line for syntax).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

SUFFIXES = (".yaml", ".yml", ".json")


class ManifestError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Manifest:
    source: str  # "file" or "file#index" for multi-document files
    doc: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.doc["kind"])

    @property
    def name(self) -> str:
        return str(self.doc["metadata"]["name"])


def files_of(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(p for p in path.iterdir() if p.is_file() and p.suffix in SUFFIXES)
    if not path.exists():
        raise ManifestError("E_IO", f"{path}: no such file or directory")
    return [path]


def load(path: Path) -> list[Manifest]:
    """Every manifest in ``path`` (a file or a directory), in order."""
    out: list[Manifest] = []
    for file in files_of(path):
        out.extend(load_file(file))
    return out


def load_file(file: Path) -> list[Manifest]:
    try:
        text = file.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise ManifestError("E_IO", f"{file}: {reason}") from exc
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ManifestError("E_SYNTAX", f"{file}{where}: {problem}") from exc
    out: list[Manifest] = []
    for index, doc in enumerate(docs):
        source = f"{file}#{index}" if len(docs) > 1 else str(file)
        problem = _shape_problem(doc)
        if problem:
            raise ManifestError("E_MANIFEST", f"{source}: {problem}")
        out.append(Manifest(source, doc))
    return out


def _shape_problem(doc: Any) -> str | None:
    if not isinstance(doc, dict):
        return f"a manifest must be a mapping, got {type(doc).__name__}"
    for key in ("apiVersion", "kind"):
        if not isinstance(doc.get(key), str) or not doc[key]:
            return f"{key}: required string"
    meta = doc.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        return "metadata.name: required string"
    return None
