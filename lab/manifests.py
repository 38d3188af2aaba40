"""Reads Kubernetes manifests (``-f FILE|DIR``) for the lab's client commands.

A directory contributes its ``*.yaml``/``*.yml``/``*.json`` files (not recursive), sorted
by name; a file may hold several YAML documents. Every file goes through the project's one
bounded loader (:func:`dmn.interpreter.source.load_yaml_documents`: size checked before
reading, nesting depth, node count and aliases bounded, exact positions for syntax and
encoding errors, the first structural error only). Every problem is a
:class:`ManifestError` with a stable reason code and ``file:line:col`` — ``E_IO`` (missing
or unreadable), ``E_LIMIT`` (over a loader bound), ``E_SYNTAX`` (not YAML or not UTF-8),
``E_DUPLICATE_KEY``, ``E_SCHEMA`` (a scalar YAML cannot carry into JSON), ``E_EMPTY`` (a
file with no document, or a directory with no manifest file), ``E_MANIFEST`` (a document
that is not an object with ``apiVersion``, ``kind`` and ``metadata.name``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dmn.interpreter.diagnostics import Diagnostic
from dmn.interpreter.loader import read_file
from dmn.interpreter.source import SourceMap, load_yaml_documents

SUFFIXES = (".yaml", ".yml", ".json")


class ManifestError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message

    @classmethod
    def of(cls, diagnostic: Diagnostic) -> ManifestError:
        where = f"{diagnostic.file}:{diagnostic.line}:{diagnostic.column}"
        field = f" ({diagnostic.path})" if diagnostic.path else ""
        return cls(diagnostic.code.value, f"{where}: {diagnostic.message}{field}")


@dataclass(frozen=True)
class Manifest:
    source: str  # "file:line:col" of the document's start
    doc: dict[str, Any]
    # positions of the document's fields (None for manifests not read from a file)
    source_map: SourceMap | None = field(default=None, compare=False, repr=False)

    def at(self, path: tuple[str | int, ...]) -> str:
        """``file:line:col`` of the field at ``path`` (else of the document)."""
        span = self.source_map.span(path) if self.source_map is not None else None
        return f"{span.file}:{span.line}:{span.column}" if span else self.source

    @property
    def kind(self) -> str:
        return str(self.doc["kind"])

    @property
    def name(self) -> str:
        return str(self.doc["metadata"]["name"])


def files_of(path: Path) -> list[Path]:
    if path.is_dir():
        found = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in SUFFIXES)
        if not found:
            suffixes = ", ".join(SUFFIXES)
            raise ManifestError("E_EMPTY", f"{path}: directory holds no {suffixes} file")
        return found
    if not path.exists():
        raise ManifestError("E_IO", f"{path}: no such file or directory")
    if not path.is_file():
        raise ManifestError("E_IO", f"{path}: not a regular file or directory")
    return [path]


def load(path: Path) -> list[Manifest]:
    """Every manifest in ``path`` (a file or a directory), in order."""
    out: list[Manifest] = []
    for file in files_of(path):
        out.extend(load_file(file))
    return out


def load_file(file: Path) -> list[Manifest]:
    """The file's manifests; the first problem, in file order, as a :class:`ManifestError`."""
    data, problems = read_file(file)
    if data is None:
        raise ManifestError.of(problems[0])
    docs, problems = load_yaml_documents(data, str(file))
    if problems:
        first = min(problems, key=lambda d: (d.line, d.column))
        raise ManifestError.of(first)
    if not docs:
        raise ManifestError("E_EMPTY", f"{file}:1:1: file holds no YAML document")
    out: list[Manifest] = []
    for doc in docs:
        span = doc.source.span(())
        source = f"{file}:{span.line}:{span.column}" if span else str(file)
        problem = _shape_problem(doc.data, doc.source)
        if problem:
            raise ManifestError("E_MANIFEST", problem)
        out.append(Manifest(source, doc.data, doc.source))
    return out


def _shape_problem(doc: Any, source: SourceMap) -> str | None:
    def at(path: tuple[str, ...], message: str) -> str:
        span = source.span(path) or source.span(())
        where = f"{span.file}:{span.line}:{span.column}: " if span else ""
        return f"{where}{message}"

    if not isinstance(doc, dict):
        return at((), f"a manifest must be a mapping, got {type(doc).__name__}")
    for key in ("apiVersion", "kind"):
        if not isinstance(doc.get(key), str) or not doc[key]:
            return at((key,), f"{key}: required string")
    meta = doc.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        return at(("metadata", "name"), "metadata.name: required string")
    return None
