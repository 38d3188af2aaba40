"""``dmn explain TOPOLOGY.yaml [--plugins DIR]... [--format human|json]``: the admin's dry run.

Shows, per step in topology order and per hook, the effects the node agent will run for
this topology's config, in order, on which kind of device and in which namespace, with the
parameters bound from the config, and what undo (removal, unprepare) will do. Nothing is
written anywhere and no node is read. A topology that does not compile prints the same
diagnostics as ``dmn compile`` (exit 1); usage errors and unreadable files exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys

from dmn.cli.command_line import run_command
from dmn.cli.compile import _emit, _parser, load_topology_inputs
from dmn.controller.compile.explain import explain_topology, render_text
from dmn.interpreter.diagnostics import has_errors
from dmn.interpreter.lint import LintResult
from dmn.opcodes.registry import default_registry


def run(argv: list[str]) -> int:
    parser = _parser("dmn explain", "Show what a NetworkTopology will do on a node (dry run).")
    return run_command(parser, argv, _explain)


def _explain(args: argparse.Namespace) -> int:
    loaded = load_topology_inputs(args.topology, args.plugins, args.format)
    if isinstance(loaded, int):
        return loaded
    plugins, topologies, diagnostics, sources, file = loaded
    explanations = []
    for doc in topologies:
        explanation = explain_topology(doc.data, plugins, default_registry(), source=doc.source)
        diagnostics += explanation.diagnostics
        explanations.append(explanation)
    if has_errors(diagnostics):
        _emit(LintResult(diagnostics, [str(file)], sources), args.format)
        return 1
    if args.format == "json":
        payload = [e.to_json() for e in explanations]
        sys.stdout.write(json.dumps(payload[0] if len(payload) == 1 else payload, indent=2) + "\n")
    else:
        sys.stdout.write("\n".join(render_text(e) for e in explanations))
    return 0
