"""``dmn compile TOPOLOGY.yaml [--plugins DIR]`` (= ``network-topology-compile``).

Offline preview of what the controller would publish: the normalized revision and one
DeviceClass per root, as YAML on stdout; or diagnostics on stderr in the same
``file:line:col: error[E_CODE]: message`` form as ``dmn lint`` (``--json`` for the JSON
lines form). Exit 0 compiled, 1 diagnostics, 2 usage/I-O. Not a publisher: it writes
nothing to a cluster. The revision UID is unknown offline, so classes show a placeholder.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from dmn.controller.compile.compiler import compile_topology
from dmn.controller.compile.plugin_sources import builtin_plugins, load_plugin_dir
from dmn.interpreter.diagnostics import Code, Diagnostic, SourceSpan, has_errors
from dmn.interpreter.source import load_yaml_documents
from dmn.opcodes.spec import OpcodeRegistry

PREVIEW_UID = "<assigned-on-create>"


def _emit(diagnostics: list[Diagnostic], as_json: bool) -> None:
    for d in diagnostics:
        line = json.dumps(d.to_json(), sort_keys=True) if as_json else d.render()
        sys.stderr.write(line + "\n")


def _registry() -> OpcodeRegistry:
    from dmn.opcodes.registry import default_registry

    return default_registry()


def run(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="dmn compile", description=__doc__.split("\n")[0])
    parser.add_argument("topology", type=Path, help="NetworkTopology YAML file")
    parser.add_argument("--plugins", type=Path, help="directory of NetworkPlugin YAML files")
    parser.add_argument("--json", action="store_true", help="diagnostics as JSON lines")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return 2 if exc.code else 0
    try:
        text = args.topology.read_bytes()
    except OSError as exc:
        _emit([Diagnostic.at(Code.E_IO, str(exc), SourceSpan(str(args.topology), 1, 1))], args.json)
        return 2
    plugins, problems = load_plugin_dir(args.plugins) if args.plugins else builtin_plugins()
    if problems:
        _emit(problems, args.json)
        return 2 if any(d.code is Code.E_IO for d in problems) else 1
    docs, diagnostics = load_yaml_documents(text, str(args.topology))
    topologies = [
        d for d in docs if isinstance(d.data, dict) and d.data.get("kind") == "NetworkTopology"
    ]
    if not diagnostics and not topologies:
        diagnostics.append(
            Diagnostic.at(
                Code.E_SCHEMA,
                "no NetworkTopology document found",
                SourceSpan(str(args.topology), 1, 1),
            )
        )
    out: list[dict[str, Any]] = []
    registry = _registry()
    for doc in topologies:
        result = compile_topology(doc.data, plugins, registry, source=doc.source)
        diagnostics += result.diagnostics
        if result.compiled is not None:
            out.append(result.compiled.revision)
            out += result.compiled.device_classes(PREVIEW_UID)
    if has_errors(diagnostics):
        _emit(diagnostics, args.json)
        return 1
    _emit(diagnostics, args.json)
    sys.stdout.write(yaml.safe_dump_all(out, sort_keys=False, width=100))
    return 0
