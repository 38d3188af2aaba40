"""The ``dmn`` command line: a thin dispatcher over sub-command modules.

Every command-line and process entry module lives in this package (``dmn.cli``), the top
layer of the import graph: it may import every library layer and none imports it, so the
library code never depends on argument parsing or exit statuses. Each sub-command module
exposes ``run(argv: list[str]) -> int`` and is imported lazily so that ``dmn lint`` never
pays for (or depends on) gRPC, Kubernetes or netlink imports.

``dmn lab`` (``dmn.cli.lab``, over ``dmn.lab``) is installed for lab users and tests only;
the product-only wheel of the node and controller image leaves both out, and there ``dmn
lab`` exits 2 with one ``E_LAB_NOT_INSTALLED`` line saying how to get it. Any other
sub-command whose module is absent exits 2 with a clear message instead of a traceback.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
from collections.abc import Sequence

from dmn.cli.command_line import report_usage_error, requested_format

LAB_PACKAGES = ("dmn.cli.lab", "dmn.lab")
"""What a product-only installation leaves out: ``dmn lab``'s command and the lab itself."""
LAB_NOT_INSTALLED = (
    "dmn lab: error[E_LAB_NOT_INSTALLED]: the lab is not installed here (this installation"
    " carries the product only, as the node and controller image does); run it from a"
    " checkout after `make setup`, or install the full distribution: pip install '.[lab]'\n"
)

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "lint": ("dmn.cli.lint", "check hook programs, NetworkPlugins and topologies"),
    "compile": ("dmn.cli.compile", "compile a NetworkTopology to a revision + classes"),
    "explain": ("dmn.cli.explain", "dry run: what a topology will do on a node"),
    "generate": (
        "dmn.cli.generate",
        "regenerate CRDs, builtin NetworkPlugin CRs and protobuf modules",
    ),
    "opcodes": ("dmn.cli.opcodes", "describe the opcodes a HookProgram may use"),
    "schema": ("dmn.cli.schema", "JSON Schema of a document kind, for editors"),
    "journal": ("dmn.cli.journal", "inspect a node journal (read-only)"),
    "inventory": ("dmn.cli.inventory", "scan this node's hardware and preview its slices"),
    "node": ("dmn.cli.node", "run the node agent"),
    "node-ready": ("dmn.cli.node_ready", "exit 0 if this node's agent reports ready (probe)"),
    "controller": ("dmn.cli.controller", "run the controller"),
    "lab": ("dmn.cli.lab", "run the embedded single-node lab cluster"),
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
        fmt = requested_format(argv)
        status = report_usage_error("dmn", f"unknown command {name!r}", fmt)
        if fmt != "json":
            sys.stderr.write(_usage() + "\n")
        return status
    module_name = entry[0]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if name == "lab" and _within(exc.name, LAB_PACKAGES):
            sys.stderr.write(LAB_NOT_INSTALLED)
            return 2
        if exc.name is not None and module_name.startswith(exc.name):
            sys.stderr.write(f"dmn {name}: not yet available in this build\n")
            return 2
        raise
    result: int = module.run(list(argv))
    return result


def _within(module: str | None, packages: Sequence[str]) -> bool:
    return module is not None and any(module == p or module.startswith(p + ".") for p in packages)


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
