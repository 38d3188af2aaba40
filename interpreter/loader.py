"""Loading plugins: descriptors plus their hook programs, with positions.

A :class:`Plugin` is what the checker, binder and runner work on: the validated
``NetworkPlugin`` descriptor and one :class:`ProgramSource` per program hook
(``prepare``/``connect``), each remembering the file and field path it came from so
diagnostics point into the right document.

Two layouts produce the same :class:`Plugin`:

* an ``EffectProgram`` CR with its programs inline under ``spec.hooks.<hook>``;
* a plugin *directory* (the builtins: ``programs/<plugin>/<version>/``) holding
  ``plugin.yaml`` — a ``NetworkPlugin`` whose ``spec.hooks`` holds only the cleanup
  entries (``unprepare: {undo: prepare}``, ``remove: {undo: connect}``) — beside
  ``prepare.yaml`` / ``connect.yaml`` ``HookProgram`` files, which are merged in.
  A hook defined both inline and as a file is an error (``E_SCHEMA``).

Entry points never raise for bad input; they return diagnostics.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path as FsPath
from typing import Any

from dmn.interpreter.canonical_json import sha256_digest
from dmn.interpreter.diagnostics import Code, Diagnostic, SourceSpan
from dmn.interpreter.documents import HookProgram, NetworkPlugin, ProgramBody, parse_document
from dmn.interpreter.source import (
    Path,
    SourceMap,
    YamlDocument,
    load_yaml_documents,
    size_problem,
)
from dmn.vocabulary.terms import HOOKS, HookName

PLUGIN_FILE = "plugin.yaml"


@dataclass(frozen=True, slots=True)
class ProgramSource:
    """One hook program and where it was written (``base`` = path of the body)."""

    hook: HookName
    body: ProgramBody
    source: SourceMap
    base: Path = ()

    def span(self, *path: str | int) -> SourceSpan | None:
        return self.source.span((*self.base, *path))

    def key_span(self, *path: str | int) -> SourceSpan | None:
        return self.source.key_span((*self.base, *path))

    def expression_span(self, path: Path, column: int, line: int = 1) -> SourceSpan | None:
        return self.source.expression_span((*self.base, *path), column, line)


@dataclass(frozen=True, slots=True)
class Plugin:
    """A NetworkPlugin descriptor with its programs merged in."""

    descriptor: NetworkPlugin
    source: SourceMap
    programs: Mapping[str, ProgramSource] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.descriptor.metadata.name

    @property
    def version(self) -> str:
        return self.descriptor.spec.contract_version

    def program(self, hook: str) -> ProgramSource | None:
        return self.programs.get(hook)

    def span(self, *path: str | int) -> SourceSpan | None:
        return self.source.span(path)

    def to_json(self) -> dict[str, Any]:
        """Canonical content: descriptor (without inline program bodies) plus programs.

        Every default is written out, so the digest depends on meaning only: an API server
        stores a NetworkPlugin with the CRD's defaults (e.g. a port's ``minItems: 1``) made
        explicit, and that stored object must digest exactly like the node's own copy.
        """
        descriptor = self.descriptor.model_dump(
            mode="json", by_alias=True, exclude_none=True, exclude={"status"}
        )
        hooks = descriptor.get("spec", {}).get("hooks")
        if isinstance(hooks, dict):
            for hook in HOOKS:
                hooks.pop(hook, None)
        programs = {
            hook: prog.body.model_dump(mode="json", by_alias=True, exclude_none=True)
            for hook, prog in sorted(self.programs.items())
        }
        return {"descriptor": descriptor, "programs": programs}

    @property
    def contract_digest(self) -> str:
        """SHA-256 over the canonical descriptor and programs (design §3.5), computed once
        per plugin object (it is immutable): the compiler, binder and agent ask for it on
        every compile and bind (issue 15). Safe from any thread: the controller's workers,
        the webhook's and the agent's services share the cache."""
        with _DIGESTS_LOCK:
            hit = _DIGESTS.get(id(self))
        if hit is not None and hit[0] is self:
            return hit[1]
        digest = sha256_digest(self.to_json())
        with _DIGESTS_LOCK:
            while len(_DIGESTS) >= _DIGESTS_KEPT:
                del _DIGESTS[next(iter(_DIGESTS))]  # the oldest: a bound, not a policy
            _DIGESTS[id(self)] = (self, digest)
        return digest


_DIGESTS: dict[int, tuple[Plugin, str]] = {}
"""Contract digests by plugin identity; each entry holds its plugin, so an id is never
reused for another object while its entry exists."""
_DIGESTS_KEPT = 512
_DIGESTS_LOCK = threading.Lock()


def contract_digest(plugin: Plugin) -> str:
    return plugin.contract_digest


def plugin_from_descriptor(
    descriptor: NetworkPlugin,
    source: SourceMap,
    files: Iterable[tuple[HookProgram, SourceMap]] = (),
) -> tuple[Plugin, list[Diagnostic]]:
    """Assemble a :class:`Plugin` from a descriptor, inline hooks and HookProgram files."""
    diagnostics: list[Diagnostic] = []
    programs: dict[str, ProgramSource] = {}
    hooks = descriptor.spec.hooks
    if hooks is not None:
        for hook in HOOKS:
            body = getattr(hooks, hook)
            if body is not None:
                programs[hook] = ProgramSource(hook, body, source, ("spec", "hooks", hook))
    for program, psource in files:
        if program.hook in programs:
            diagnostics.append(
                Diagnostic.at(
                    Code.E_SCHEMA,
                    f"hook {program.hook!r} of plugin {descriptor.metadata.name!r} "
                    "is defined twice",
                    psource.span(("hook",)),
                    "hook",
                )
            )
            continue
        programs[program.hook] = ProgramSource(program.hook, program.body(), psource, ())
    return Plugin(descriptor=descriptor, source=source, programs=programs), diagnostics


def load_text(
    text: str | bytes, file: str
) -> tuple[list[tuple[Any, YamlDocument]], list[Diagnostic]]:
    """Parse every document in ``text`` into (model or None, yaml document)."""
    docs, diagnostics = load_yaml_documents(text, file)
    out: list[tuple[Any, YamlDocument]] = []
    for doc in docs:
        model, diags = parse_document(doc)
        diagnostics += diags
        out.append((model, doc))
    return out, diagnostics


def read_file(path: FsPath) -> tuple[bytes | None, list[Diagnostic]]:
    """The file's bytes, or None and the reason: ``E_IO`` (also for anything that is not a
    regular file: a FIFO, a device, a socket), or ``E_LIMIT`` for a file over the loader's
    size bound (checked before reading it, and again while reading, for files whose size
    ``stat`` does not tell, such as those of ``/proc``).

    Why open, then look: the open does not block (``O_NONBLOCK``, so a FIFO without a writer
    cannot hang us) and the descriptor is what is checked and read, so nothing swapped in
    between a check and the read is read. ``dmn compile /dev/zero`` once read 8 GB."""
    span = SourceSpan(str(path), 1, 1)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        return None, [Diagnostic.at(Code.E_IO, f"cannot read file: {exc.strerror or exc}", span)]
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            what = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
            return None, [Diagnostic.at(Code.E_IO, f"cannot read file: {what}", span)]
        too_large = size_problem(info.st_size, str(path))
        if too_large is not None:
            return None, [too_large]
        chunks: list[bytes] = []
        size = 0
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
            size += len(chunk)
            too_large = size_problem(size, str(path))
            if too_large is not None:
                return None, [too_large]
        return b"".join(chunks), []
    except OSError as exc:
        return None, [Diagnostic.at(Code.E_IO, f"cannot read file: {exc.strerror or exc}", span)]
    finally:
        os.close(fd)


def load_plugin_dir(path: FsPath | str) -> tuple[Plugin | None, list[Diagnostic]]:
    """Load one plugin directory: ``plugin.yaml`` plus sibling ``<hook>.yaml`` files."""
    root = FsPath(path)
    data, diagnostics = read_file(root / PLUGIN_FILE)
    if data is None:
        return None, diagnostics
    docs, diags = load_text(data, str(root / PLUGIN_FILE))
    diagnostics += diags
    plugins = [(m, d) for m, d in docs if isinstance(m, NetworkPlugin)]
    if len(docs) != 1 or len(plugins) != 1:
        if not diags:
            diagnostics.append(
                Diagnostic.at(
                    Code.E_SCHEMA,
                    f"{PLUGIN_FILE} must hold exactly one NetworkPlugin document",
                    SourceSpan(str(root / PLUGIN_FILE), 1, 1),
                )
            )
        return None, diagnostics
    descriptor, doc = plugins[0]
    files: list[tuple[HookProgram, SourceMap]] = []
    for hook in HOOKS:
        hook_path = root / f"{hook}.yaml"
        if not hook_path.exists():
            continue
        hdata, hdiags = read_file(hook_path)
        diagnostics += hdiags
        if hdata is None:
            continue
        hdocs, hd = load_text(hdata, str(hook_path))
        diagnostics += hd
        for model, hdoc in hdocs:
            if isinstance(model, HookProgram):
                if model.hook != hook:
                    diagnostics.append(
                        Diagnostic.at(
                            Code.E_SCHEMA,
                            f"file {hook}.yaml holds a {model.hook!r} program",
                            hdoc.source.span(("hook",)),
                            "hook",
                        )
                    )
                    continue
                files.append((model, hdoc.source))
            elif model is not None:
                diagnostics.append(
                    Diagnostic.at(
                        Code.E_SCHEMA,
                        f"{hook}.yaml must hold a HookProgram",
                        hdoc.source.span(("kind",)),
                        "kind",
                    )
                )
    plugin, merge = plugin_from_descriptor(descriptor, doc.source, files)
    return plugin, diagnostics + merge


def _plugin_dirs(root: FsPath) -> list[FsPath]:
    """Directories under ``root`` (any depth) that hold a ``plugin.yaml``."""
    return sorted(p.parent for p in root.rglob(PLUGIN_FILE))


def load_plugins(root: FsPath | str) -> tuple[dict[str, Plugin], list[Diagnostic]]:
    """Every plugin found under ``root``: plugin directories and single-file CRs.

    Plugin directories are recognised by their ``plugin.yaml``; any other ``*.yaml``
    file holding ``NetworkPlugin`` documents contributes those (inline programs).
    ``root`` may also be one such file.
    """
    base = FsPath(root)
    plugins: dict[str, Plugin] = {}
    diagnostics: list[Diagnostic] = []
    if not base.is_dir() and not base.is_file():
        return plugins, [
            Diagnostic.at(Code.E_IO, "not a plugin directory or file", SourceSpan(str(base), 1, 1))
        ]
    if base.is_dir():
        dirs = _plugin_dirs(base)
    else:  # one file: a plugin directory's plugin.yaml, or a NetworkPlugin CR
        dirs = [base.parent] if base.name == PLUGIN_FILE else []
    claimed = {d / f"{h}.yaml" for d in dirs for h in HOOKS} | {d / PLUGIN_FILE for d in dirs}

    def add(plugin: Plugin) -> None:
        if plugin.name in plugins:
            diagnostics.append(
                Diagnostic.at(
                    Code.E_SCHEMA,
                    f"plugin {plugin.name!r} is defined more than once",
                    plugin.span("metadata", "name"),
                    "metadata.name",
                )
            )
            return
        plugins[plugin.name] = plugin

    for d in dirs:
        plugin, diags = load_plugin_dir(d)
        diagnostics += diags
        if plugin is not None:
            add(plugin)
    files = sorted(base.rglob("*.yaml")) if base.is_dir() else [base] if not dirs else []
    for file in files:
        if file in claimed:
            continue
        data, diags = read_file(file)
        diagnostics += diags
        if data is None:
            continue
        docs, _ = load_text(data, str(file))
        for model, doc in docs:
            if isinstance(model, NetworkPlugin):
                plugin, merge = plugin_from_descriptor(model, doc.source)
                diagnostics += merge
                add(plugin)
    return plugins, diagnostics


_BUILTINS: dict[str, Plugin] | None = None
_BUILTIN_DIAGNOSTICS: list[Diagnostic] = []


def builtin_programs_root() -> FsPath:
    """The packaged ``programs/`` folder (``dmn.programs``)."""
    return FsPath(str(resources.files("dmn.programs"))).resolve()


def load_builtin_plugins() -> dict[str, Plugin]:
    """The shipped plugins by name (cached). Broken builtins are left out; their
    diagnostics are available from :func:`builtin_diagnostics` (and ``dmn lint``)."""
    global _BUILTINS
    if _BUILTINS is None:
        plugins, diagnostics = load_plugins(builtin_programs_root())
        _BUILTIN_DIAGNOSTICS[:] = diagnostics
        _BUILTINS = plugins
    return dict(_BUILTINS)


def builtin_diagnostics() -> list[Diagnostic]:
    load_builtin_plugins()
    return list(_BUILTIN_DIAGNOSTICS)
