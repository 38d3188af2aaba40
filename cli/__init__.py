"""The ``dmn`` command line: a thin dispatcher over sub-command modules.

Each sub-command lives in the package that owns its logic and exposes
``run(argv: list[str]) -> int``. The dispatcher imports it lazily so that
``dmn lint`` never pays for (or depends on) gRPC, Kubernetes or netlink imports.
A sub-command whose module has not been built yet exits 2 with a clear message
instead of a traceback.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
from collections.abc import Sequence

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "lint": ("dmn.interpreter.lint_cli", "check hook programs, NetworkPlugins and topologies"),
    "compile": ("dmn.controller.compile.cli", "compile a NetworkTopology to a revision + classes"),
    "explain": ("dmn.controller.compile.explain_cli", "dry run: what a topology will do on a node"),
    "generate": ("dmn.generate", "regenerate CRDs, builtin NetworkPlugin CRs and protobuf modules"),
    "opcodes": ("dmn.opcodes.reference_cli", "describe the opcodes a HookProgram may use"),
    "schema": ("dmn.api.schema_cli", "JSON Schema of a document kind, for editors"),
    "journal": ("dmn.agent.journal.cli", "inspect a node journal (read-only)"),
    "inventory": ("dmn.agent.inventory.cli", "scan this node's hardware and preview its slices"),
    "node": ("dmn.agent.main", "run the node agent"),
    "node-ready": ("dmn.agent.readiness", "exit 0 if this node's agent reports ready (probe)"),
    "controller": ("dmn.controller.main", "run the controller"),
    "lab": ("dmn.lab.cli", "run the embedded single-node lab cluster"),
}


def version() -> str:
    """The installed distribution's version (what an image or wheel was built from)."""
    try:
        return importlib.metadata.version("dra-multi-network")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _usage() -> str:
    lines = ["usage: dmn [--version] <command> [options]", "", "commands:"]
    lines += [f"  {name:<11} {help_}" for name, (_, help_) in COMMANDS.items()]
    return "\n".join(lines)


def dispatch(name: str, argv: Sequence[str]) -> int:
    """Run sub-command ``name``; 2 if it is unknown or not available in this build."""
    entry = COMMANDS.get(name)
    if entry is None:
        sys.stderr.write(f"dmn: unknown command {name!r}\n{_usage()}\n")
        return 2
    module_name = entry[0]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            sys.stderr.write(f"dmn {name}: not yet available in this build\n")
            return 2
        raise
    result: int = module.run(list(argv))
    return result


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in {"-V", "--version"}:
        sys.stdout.write(f"dmn {version()}\n")
        return 0
    if not args or args[0] in {"-h", "--help", "help"}:
        sys.stdout.write(_usage() + "\n")
        return 0 if args else 2
    return dispatch(args[0], args[1:])


def node_main() -> int:
    return dispatch("node", sys.argv[1:])


def controller_main() -> int:
    return dispatch("controller", sys.argv[1:])


def compile_main() -> int:
    return dispatch("compile", sys.argv[1:])
