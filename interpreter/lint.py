"""Linting files and folders: the library under ``dmn lint`` (and reusable by tests).

What is linted, per YAML document found under the given paths:

* a plugin directory (a folder holding ``plugin.yaml``; its ``prepare.yaml`` /
  ``connect.yaml`` are part of it) — loaded as one plugin and checked whole;
* a ``NetworkPlugin`` CR anywhere else — checked with its inline programs;
* a ``HookProgram`` file outside a plugin directory — checked against the plugin it
  belongs to, resolved by folder name: ``.../<plugin>/<version>/<hook>.yaml`` or
  ``.../<plugin>/<hook>.yaml`` names a plugin from the builtins, ``--plugins DIR`` or a
  plugin linted in the same run; the file replaces that plugin's program for the hook;
* any other ``kind`` — the checker registered for it with :func:`register_kind`
  (the topology compiler registers ``NetworkTopology``), else ``E_SCHEMA``.

Pluggability: ``register_kind(kind, checker)`` where ``checker(document, context)``
returns diagnostics; ``context`` (:class:`LintContext`) gives the opcode registry and
every known plugin by name. Registration is idempotent per kind (last one wins).
Packages the interpreter must not import (the controller) register through the
``dmn.lint_kinds`` entry-point group instead — name = document kind, value =
``module:function`` with the checker signature — loaded on first lint.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from importlib.metadata import entry_points
from pathlib import Path as FsPath

from dmn.interpreter.checker import check_plugin, check_program
from dmn.interpreter.diagnostics import Code, Diagnostic, SourceSpan
from dmn.interpreter.documents import (
    DOCUMENT_MODELS,
    HookProgram,
    NetworkPlugin,
    document_kind,
    parse_document,
)
from dmn.interpreter.loader import (
    PLUGIN_FILE,
    Plugin,
    ProgramSource,
    load_builtin_plugins,
    load_plugin_dir,
    load_plugins,
    plugin_from_descriptor,
    read_file,
)
from dmn.interpreter.source import YamlDocument, load_yaml_documents
from dmn.opcodes.spec import OpcodeRegistry
from dmn.vocabulary.terms import HOOKS


@dataclass(slots=True)
class LintContext:
    """What a document checker may use: opcodes and every plugin known to this run."""

    registry: OpcodeRegistry
    plugins: dict[str, Plugin] = field(default_factory=dict)


DocumentChecker = Callable[[YamlDocument, LintContext], list[Diagnostic]]

_KIND_CHECKERS: dict[str, DocumentChecker] = {}


def register_kind(kind: str, checker: DocumentChecker) -> None:
    """Let ``dmn lint`` check documents of ``kind`` with ``checker``."""
    _KIND_CHECKERS[kind] = checker


ENTRY_POINT_GROUP = "dmn.lint_kinds"
_entry_points_loaded = False


def load_entry_point_kinds() -> list[Diagnostic]:
    """Register the checkers advertised in the ``dmn.lint_kinds`` entry-point group."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return []
    _entry_points_loaded = True
    out: list[Diagnostic] = []
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in _KIND_CHECKERS:
            continue
        try:
            checker = ep.load()
        except Exception as exc:  # a broken plugin must not take lint down
            out.append(
                Diagnostic(
                    code=Code.E_SCHEMA,
                    message=f"cannot load the {ep.name} checker {ep.value}: {exc}",
                )
            )
            continue
        _KIND_CHECKERS[ep.name] = checker
    return out


def registered_kinds() -> list[str]:
    load_entry_point_kinds()
    return sorted(_KIND_CHECKERS)


YAML_SUFFIXES = (".yaml", ".yml")


@dataclass(slots=True)
class LintResult:
    diagnostics: list[Diagnostic]
    files: list[str]
    sources: dict[str, str]

    @property
    def exit_code(self) -> int:
        """0 clean, 1 errors in documents, 2 unreadable input or usage errors."""
        if any(d.code in (Code.E_IO, Code.E_USAGE) for d in self.diagnostics):
            return 2
        return 1 if any(d.severity.value == "error" for d in self.diagnostics) else 0


def _expand(paths: Sequence[str]) -> tuple[list[FsPath], list[Diagnostic]]:
    files: list[FsPath] = []
    diagnostics: list[Diagnostic] = []
    for raw in paths:
        p = FsPath(raw)
        if p.is_dir():
            found = sorted(f for f in p.rglob("*") if f.suffix in YAML_SUFFIXES and f.is_file())
            if not found:
                # Linting nothing is almost always a wrong path; say so instead of passing.
                diagnostics.append(
                    Diagnostic.at(
                        Code.E_USAGE,
                        "directory holds no .yaml or .yml file to lint",
                        SourceSpan(raw, 1, 1),
                    )
                )
            files += found
        elif p.is_file():
            files.append(p)
        else:
            why = "not a regular file or directory" if p.exists() else "no such file or directory"
            diagnostics.append(Diagnostic.at(Code.E_IO, why, SourceSpan(raw, 1, 1)))
    unique: list[FsPath] = []
    seen: set[FsPath] = set()
    for f in files:
        key = f.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(f)
    return unique, diagnostics


def _plugin_dir_of(file: FsPath) -> FsPath | None:
    if file.name == PLUGIN_FILE:
        return file.parent
    if file.stem in HOOKS and file.suffix == ".yaml" and (file.parent / PLUGIN_FILE).is_file():
        return file.parent
    return None


def _owner_names(file: FsPath) -> list[str]:
    """Plugin names a standalone HookProgram file may belong to, by its folders."""
    parent = file.parent
    return [parent.parent.name, parent.name]


def lint_paths(
    paths: Sequence[str],
    registry: OpcodeRegistry | None = None,
    plugin_dirs: Iterable[str] = (),
    include_builtins: bool = True,
) -> LintResult:
    """Lint every YAML file under ``paths``; never raises for bad input."""
    if registry is None:
        from dmn.opcodes.registry import default_registry

        registry = default_registry()
    ctx = LintContext(registry=registry)
    diagnostics: list[Diagnostic] = load_entry_point_kinds()
    if include_builtins:
        ctx.plugins.update(load_builtin_plugins())
    for d in plugin_dirs:
        plugins, diags = load_plugins(d)
        diagnostics += diags  # a --plugins file's own errors, not only "plugin not found" later
        ctx.plugins.update(plugins)
    files, diags = _expand(paths)
    diagnostics += diags
    sources: dict[str, str] = {}

    # Pass 1: plugins (directories and CRs), so programs and topologies can resolve them.
    plugin_dirs_done: set[FsPath] = set()
    pending: list[tuple[FsPath, list[tuple[object, YamlDocument]]]] = []
    checked_plugins: list[Plugin] = []
    for file in files:
        data, io = read_file(file)
        if data is None:
            diagnostics += io
            continue
        sources[str(file)] = data.decode("utf-8", errors="replace")
        pdir = _plugin_dir_of(file)
        if pdir is not None:
            if pdir in plugin_dirs_done:
                continue
            plugin_dirs_done.add(pdir)
            plugin, diags = load_plugin_dir(pdir)
            diagnostics += diags
            for hook_file in [pdir / PLUGIN_FILE, *(pdir / f"{h}.yaml" for h in HOOKS)]:
                if hook_file.is_file() and str(hook_file) not in sources:
                    hdata, _ = read_file(hook_file)
                    if hdata is not None:
                        sources[str(hook_file)] = hdata.decode("utf-8", errors="replace")
            if plugin is not None:
                ctx.plugins[plugin.name] = plugin
                checked_plugins.append(plugin)
            continue
        docs, diags = load_yaml_documents(data, str(file))
        diagnostics += diags
        if not docs and not diags:
            diagnostics.append(
                Diagnostic.at(
                    Code.E_EMPTY, "file holds no YAML document", SourceSpan(str(file), 1, 1)
                )
            )
        rest: list[tuple[object, YamlDocument]] = []
        for doc in docs:
            kind = document_kind(doc)
            if kind in _KIND_CHECKERS and kind not in DOCUMENT_MODELS:
                rest.append((None, doc))
                continue
            if kind not in DOCUMENT_MODELS and isinstance(doc.data, dict):
                known = ", ".join(sorted({*DOCUMENT_MODELS, *_KIND_CHECKERS}))
                diagnostics.append(
                    Diagnostic.at(
                        Code.E_SCHEMA,
                        f"unknown document kind {doc.data.get('kind')!r} (expected one of {known})",
                        doc.source.span(("kind",)),
                        "kind",
                    )
                )
                continue
            model, diags = parse_document(doc)
            diagnostics += diags
            if isinstance(model, NetworkPlugin):
                plugin, merge = plugin_from_descriptor(model, doc.source)
                diagnostics += merge
                ctx.plugins[plugin.name] = plugin
                checked_plugins.append(plugin)
            elif model is not None:
                rest.append((model, doc))
        pending.append((file, rest))
    for plugin in checked_plugins:
        diagnostics += check_plugin(plugin, registry)

    # Pass 2: standalone programs and registered kinds.
    for file, entries in pending:
        for entry, doc in entries:
            if isinstance(entry, HookProgram):
                diagnostics += _lint_program(file, entry, doc, ctx)
                continue
            kind = document_kind(doc)
            checker = _KIND_CHECKERS.get(kind or "")
            if checker is not None:
                try:
                    diagnostics += checker(doc, ctx)
                except Exception as exc:  # a registered checker must not crash lint
                    diagnostics.append(
                        Diagnostic.at(
                            Code.E_SCHEMA,
                            f"internal error checking {kind}: {type(exc).__name__}: {exc}",
                            doc.source.span(()),
                        )
                    )
    diagnostics = sorted(set(diagnostics), key=lambda d: (d.file, d.line, d.column, d.code.value))
    return LintResult(diagnostics=diagnostics, files=[str(f) for f in files], sources=sources)


def _lint_program(
    file: FsPath, program: HookProgram, doc: YamlDocument, ctx: LintContext
) -> list[Diagnostic]:
    owner = next((ctx.plugins[n] for n in _owner_names(file) if n in ctx.plugins), None)
    if owner is None:
        names = " or ".join(repr(n) for n in _owner_names(file))
        return [
            Diagnostic.at(
                Code.E_REF_UNRESOLVED,
                f"cannot resolve the plugin of this program: no plugin named {names} "
                "(place it beside a plugin.yaml, under <plugin>/<version>/, or pass --plugins)",
                doc.source.span(()),
                "hook",
            )
        ]
    programs = dict(owner.programs)
    programs[program.hook] = ProgramSource(program.hook, program.body(), doc.source, ())
    plugin = replace(owner, programs=programs)
    return check_program(plugin, program.hook, ctx.registry)


def _printable(line: str) -> str:
    """The source line as a terminal may show it: one ``?`` per control or otherwise
    unprintable character (never an escape sequence from the file), tabs kept, so the
    caret stays aligned."""
    return "".join(ch if ch == "\t" or ch.isprintable() else "?" for ch in line)


def render_human(result: LintResult) -> str:
    """Compiler-style output: one line per diagnostic, then the source line and a caret."""
    lines: list[str] = []
    for d in result.diagnostics:
        lines.append(d.render())
        text = result.sources.get(d.file)
        if text is None:
            continue
        source_lines = text.splitlines()
        if 1 <= d.line <= len(source_lines):
            src = _printable(source_lines[d.line - 1])
            lines.append(f"  {src}")
            col = max(1, min(d.column, len(src) + 1))
            prefix = "".join(ch if ch == "\t" else " " for ch in src[: col - 1])
            lines.append(f"  {prefix}^")
    errors = sum(1 for d in result.diagnostics if d.severity.value == "error")
    lines.append(f"{len(result.files)} file(s) checked, {errors} error(s)")
    return "\n".join(lines)


__all__ = [
    "DocumentChecker",
    "LintContext",
    "LintResult",
    "lint_paths",
    "register_kind",
    "registered_kinds",
    "render_human",
]
