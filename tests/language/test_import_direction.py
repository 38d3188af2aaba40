"""The import direction of DESIGN §2, enforced over the real source folders (AST-based).

* ``interpreter`` imports nothing of the project but itself, ``grammar``/``programs``
  data and opcode *specs* (``dmn.opcodes.spec``, ``.registry``, ``.predicates``,
  ``.parameter_types``, ``.executor`` — the executor *protocol* — and
  ``dmn.opcodes.<family>.specs``); never a native or cluster library.
* opcode spec modules import no native library (so importing specs is always safe).
* ``engine`` (bind/run/recover) imports only ``interpreter``, data and opcode specs plus
  the executor protocol; never a native or cluster library.
* ``opcodes`` never imports ``api``, ``agent``, ``controller`` or ``lab``.
* ``api`` imports only ``interpreter`` (and ``opcodes`` specs) of the project.
* ``controller`` and ``agent`` never import each other, nor ``lab``.
* ``grammar`` and ``programs`` are data and import nothing of the project.
* only ``lab`` (and tests) import ``lab``.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = (
    "interpreter",
    "engine",
    "opcodes",
    "api",
    "controller",
    "agent",
    "lab",
    "grammar",
    "programs",
)
NATIVE = ("pyroute2", "kubernetes", "grpc", "rocksdict", "pyudev", "ovs", "cel", "cryptography")
SPEC_MODULES = (
    "dmn.opcodes.spec",
    "dmn.opcodes.registry",
    "dmn.opcodes.predicates",
    "dmn.opcodes.parameter_types",
    "dmn.opcodes.executor",
)


def python_files(folder: str) -> list[Path]:
    base = ROOT / folder
    return sorted(
        p
        for p in base.rglob("*.py")
        if "__pycache__" not in p.parts
        and not p.name.endswith("_pb2.py")
        and not p.name.endswith("_pb2_grpc.py")
    )


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(["dmn", *parts])


def imports(path: Path) -> Iterator[tuple[str, int]]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = module_name(path)
    if path.name != "__init__.py":
        package = package.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            yield mod, node.lineno
            for alias in node.names:  # `from dmn.opcodes import linux` imports a package
                yield f"{mod}.{alias.name}", node.lineno


def top(mod: str) -> str:
    parts = mod.split(".")
    if parts[0] == "dmn" and len(parts) > 1:
        return parts[1]
    return parts[0]


def is_spec_module(mod: str) -> bool:
    """Pure opcode contracts (and names imported from them), never executors."""
    if mod == "dmn.opcodes" or any(mod == m or mod.startswith(m + ".") for m in SPEC_MODULES):
        return True
    parts = mod.split(".")
    if len(parts) < 3 or parts[:2] != ["dmn", "opcodes"]:
        return False
    # dmn.opcodes.<family> (the package) or dmn.opcodes.<family>.specs[.<name>]
    return len(parts) == 3 or parts[3] == "specs"


ALLOWED: dict[str, tuple[str, ...]] = {
    "grammar": (),
    "programs": (),
    "interpreter": ("grammar", "programs", "opcodes"),
    "engine": ("grammar", "programs", "interpreter", "opcodes"),
    "opcodes": ("interpreter",),
    "api": ("interpreter", "opcodes"),
    "controller": ("api", "interpreter", "engine", "opcodes"),
    "agent": ("api", "interpreter", "engine", "opcodes"),
    "lab": FOLDERS,
}
SPECS_ONLY = ("interpreter", "engine", "api")


def forbidden(folder: str, mod: str) -> bool:
    """Is importing project module ``mod`` from ``folder`` against DESIGN §2?"""
    t = top(mod)
    if t not in ALLOWED[folder]:
        return t in FOLDERS
    return folder in SPECS_ONLY and t == "opcodes" and not is_spec_module(mod)


def violations(folder: str) -> list[str]:
    out: list[str] = []
    for path in python_files(folder):
        own = module_name(path)
        for mod, line in imports(path):
            where = f"{path.relative_to(ROOT)}:{line}: {own} imports {mod}"
            t = top(mod)
            project = mod == "dmn" or mod.startswith("dmn.")
            if not project and t in NATIVE:
                if folder in ("interpreter", "engine", "grammar", "programs"):
                    out.append(where)
                if folder == "opcodes" and (path.name == "specs.py" or own in SPEC_MODULES):
                    out.append(where)
                if folder == "api" and t in ("pyroute2", "grpc", "rocksdict", "pyudev", "ovs"):
                    out.append(where)
                continue
            if not project or t == folder or mod == "dmn":
                continue
            if forbidden(folder, mod):
                out.append(where)
    return out


@pytest.mark.parametrize("folder", FOLDERS)
def test_import_direction(folder: str) -> None:
    assert violations(folder) == []


def test_the_checker_sees_imports() -> None:
    # Guard against a vacuous pass: the interpreter does import opcode specs.
    found = {mod for p in python_files("interpreter") for mod, _ in imports(p)}
    assert "dmn.opcodes.spec" in found
    assert any(m.startswith("dmn.interpreter.") for m in found)


@pytest.mark.parametrize(
    ("folder", "mod", "bad"),
    [
        ("interpreter", "dmn.agent.journal", True),
        ("interpreter", "dmn.opcodes.linux.executors", True),
        ("interpreter", "dmn.opcodes.linux.specs", False),
        ("interpreter", "dmn.opcodes.registry.default_registry", False),
        ("interpreter", "dmn.api.crds", True),
        ("interpreter", "dmn.engine.runner", True),
        ("engine", "dmn.opcodes.executor", False),
        ("engine", "dmn.opcodes.linux.executors", True),
        ("agent", "dmn.engine.runner", False),
        ("controller", "dmn.engine.binder", False),
        ("opcodes", "dmn.interpreter.handles", False),
        ("opcodes", "dmn.controller", True),
        ("api", "dmn.interpreter.documents", False),
        ("api", "dmn.agent", True),
        ("controller", "dmn.agent.main", True),
        ("agent", "dmn.controller.compile", True),
        ("agent", "dmn.lab.apiserver", True),
        ("lab", "dmn.agent.main", False),
        ("programs", "dmn.interpreter", True),
    ],
)
def test_rules(folder: str, mod: str, bad: bool) -> None:
    assert forbidden(folder, mod) is bad


def test_import_linter_contracts_hold() -> None:
    """DESIGN §2 names import-linter contracts in pyproject.toml; they hold, indirect
    imports included (e.g. interpreter -> ... -> pyroute2 would break the first)."""
    import subprocess
    import sys

    tool = Path(sys.executable).with_name("lint-imports")
    assert tool.exists(), "import-linter is a test dependency"
    done = subprocess.run(
        [str(tool), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert re.search(r"Contracts: \d+ kept, 0 broken\.", done.stdout), done.stdout[-3000:]
