"""The import direction of design §2 is the import-linter contracts in pyproject.toml.

The layering itself (who may import whom, specs-only imports of opcodes, no native or
cluster library below the node and cluster code) is expressed entirely as contracts and
checked by ``lint-imports``, indirect imports included. This module adds only what a
contract cannot say about itself:

* the contracts run and hold (``lint-imports`` exits 0 with every contract kept);
* they are *complete*: every package installed under ``dmn`` (each top-level folder
  linked from ``dmn/``) stands in the layers contract, so a new folder cannot join the
  tree unconstrained — a contract only constrains the modules it names.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _contracts() -> list[dict[str, object]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contracts: list[dict[str, object]] = config["tool"]["importlinter"]["contracts"]
    return contracts


def _layered_packages() -> set[str]:
    # layers contracts inside one package (``containers``: the agent's) order its parts only
    layers = [c for c in _contracts() if c["type"] == "layers" and "containers" not in c]
    assert len(layers) == 1, "one layers contract states the whole direction"
    names: set[str] = set()
    for layer in layers[0]["layers"]:  # type: ignore[union-attr]
        names |= {part.strip() for part in str(layer).replace(":", "|").split("|")}
    return names


def _installed_packages() -> set[str]:
    """``dmn.<folder>`` for every top-level folder linked (or placed) under ``dmn/``."""
    return {
        f"dmn.{entry.name}"
        for entry in (ROOT / "dmn").iterdir()
        if entry.is_dir() and (entry / "__init__.py").exists()
    }


def test_every_package_stands_in_the_layers_contract() -> None:
    installed = _installed_packages()
    assert "dmn.interpreter" in installed and "dmn.vocabulary" in installed  # not vacuous
    assert installed == _layered_packages()


def test_import_linter_contracts_hold() -> None:
    tool = Path(sys.executable).with_name("lint-imports")
    assert tool.exists(), "import-linter is a test dependency"
    done = subprocess.run(
        [str(tool), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert f"Contracts: {len(_contracts())} kept, 0 broken." in done.stdout
