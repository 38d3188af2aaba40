"""``dmn compile TOPOLOGY.yaml [--plugins DIR]... [--format human|json]``
(= ``network-topology-compile``).

Offline preview of what the controller would publish: the normalized revision and one
DeviceClass per root as YAML on stdout (with ``--format json``: one JSON array of those
objects; exit 0); or the diagnostics exactly as ``dmn
lint`` prints them — same renderer, same ``--format json`` array — with exit 1 for
errors and 2 for usage errors or unreadable input. Plugins are the shipped builtins plus
any ``--plugins`` directories (plugin folders or NetworkPlugin CR files). Not a
publisher: nothing is written to a cluster. The revision and DeviceClass names are the
ones the controller creates for the same documents (they are made from the topology's
name, not its UID: :func:`~dmn.controller.compile.digest.naming_digest`); the revision
UID and the semantic digest (over the topology UID) do not exist offline, so the classes
carry the placeholder ``<assigned-on-create>``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from dmn.cli.command_line import CommandParser, add_format_option, run_command
from dmn.controller.compile.compiler import compile_topology
from dmn.interpreter.diagnostics import Code, Diagnostic, SourceSpan, has_errors
from dmn.interpreter.lint import LintResult, render_human
from dmn.interpreter.loader import Plugin, load_builtin_plugins, load_plugins, read_file
from dmn.interpreter.source import YamlDocument, load_yaml_documents
from dmn.opcodes.registry import default_registry

PREVIEW_UID = "<assigned-on-create>"


def _parser(
    prog: str = "dmn compile", description: str = "Compile a NetworkTopology (offline preview)."
) -> CommandParser:
    p = CommandParser(prog=prog, description=description)
    p.add_argument("topology", metavar="TOPOLOGY.yaml")
    p.add_argument("--plugins", action="append", default=[], metavar="DIR")
    add_format_option(p)
    return p


def _emit(result: LintResult, fmt: str) -> None:
    if fmt == "json":
        sys.stdout.write(json.dumps([d.to_json() for d in result.diagnostics], indent=2) + "\n")
    else:
        sys.stdout.write(render_human(result) + "\n")


def run(argv: list[str]) -> int:
    return run_command(_parser(), argv, _compile)


def _compile(args: argparse.Namespace) -> int:
    loaded = load_topology_inputs(args.topology, args.plugins, args.format)
    if isinstance(loaded, int):
        return loaded
    plugins, topologies, diagnostics, sources, file = loaded
    out: list[dict[str, Any]] = []
    registry = default_registry()
    for doc in topologies:
        result = compile_topology(doc.data, plugins, registry, source=doc.source)
        diagnostics += result.diagnostics
        if result.compiled is not None:
            out.append(result.compiled.revision)
            out += result.compiled.device_classes(PREVIEW_UID)
    if has_errors(diagnostics):
        _emit(LintResult(diagnostics, [str(file)], sources), args.format)
        return 1
    if args.format == "json":
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
    else:
        sys.stdout.write(yaml.safe_dump_all(out, sort_keys=False, width=100))
    return 0


TopologyInputs = tuple[
    dict[str, Plugin], list[YamlDocument], list[Diagnostic], dict[str, str], Path
]


def load_topology_inputs(topology: str, plugin_dirs: list[str], fmt: str) -> TopologyInputs | int:
    """Read a topology file and the plugins it may use (builtins plus ``plugin_dirs``).

    Returns the plugins, the NetworkTopology documents, the diagnostics found so far and the
    sources for rendering; or the exit status (:attr:`LintResult.exit_code`) after printing
    why the topology or a plugin could not be read.
    Shared by ``dmn compile`` and ``dmn explain``.
    """
    file = Path(topology)
    data, io = read_file(file)
    if data is None:  # E_IO exits 2, E_LIMIT (too large) 1, as in dmn lint
        unread = LintResult(io, [str(file)], {})
        _emit(unread, fmt)
        return unread.exit_code
    sources = {str(file): data.decode("utf-8", errors="replace")}
    plugins: dict[str, Plugin] = load_builtin_plugins()
    diagnostics: list[Diagnostic] = []
    for d in plugin_dirs:
        found, problems = load_plugins(d)
        if any(p.code is Code.E_IO for p in problems):
            _emit(LintResult(problems, [str(file)], sources), fmt)
            return 2
        diagnostics += problems
        plugins.update(found)
    docs, problems = load_yaml_documents(data, str(file))
    diagnostics += problems
    topologies = [
        doc
        for doc in docs
        if isinstance(doc.data, dict) and doc.data.get("kind") == "NetworkTopology"
    ]
    if not problems and not topologies:
        empty = not docs
        diagnostics.append(
            Diagnostic.at(
                Code.E_EMPTY if empty else Code.E_SCHEMA,
                "file holds no YAML document" if empty else "no NetworkTopology document found",
                SourceSpan(str(file), 1, 1),
            )
        )
    return plugins, topologies, diagnostics, sources, file
