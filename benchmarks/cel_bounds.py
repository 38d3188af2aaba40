"""What the CEL selector bounds cost on normal topologies (issue 39): ``dmn lint`` and
``dmn compile`` of ``examples/topologies`` with the code just before the bounds landed
(``before``: the parent of commit 3bbefa9, "CEL selectors bounded"), with that commit
(``landed``: the bounds' own cost, nothing else changed) and with this tree (``after``:
the bounds plus everything since), side by side in one run.

Each side runs as users run it: a fresh ``python -m dmn`` process per command (start-up,
imports, YAML, checking, CEL), with the *same* input files (this tree's examples and
plugins). The old trees are unpacked with ``git archive`` into a temporary directory and put
first on the module path. Rounds alternate between the two sides so load on the shared
machine falls on both alike; medians are reported.

Usage: ``python benchmarks/cel_bounds.py [--rounds 7] [--before 3bbefa9^]
[--landed 3bbefa9] [--json]``; prints JSON. The old trees' ``lint`` reports one E_SCHEMA that is
no topology's: the installed package's entry point names a document checker module the
old trees lack; every topology is still checked.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOPOLOGIES = sorted((ROOT / "examples" / "topologies").glob("*.yaml"))
PLUGINS = ROOT / "examples" / "plugins"


def _unpack(commit: str, into: Path) -> str:
    """The tree of ``commit`` in ``into/tree``; returns the full commit id."""
    full = subprocess.run(
        ["git", "rev-parse", commit], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()
    archive = into / "tree.tar"
    with archive.open("wb") as out:
        subprocess.run(["git", "archive", full], cwd=ROOT, check=True, stdout=out)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "tree", filter="tar")
    return full


def _timed(argv: list[str], tree: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "dmn", *argv],
        cwd=tree,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    return time.perf_counter() - start


def _round(tree: Path) -> dict[str, float]:
    lint = _timed(["lint", str(ROOT / "examples" / "topologies")], tree)
    compile_ = sum(
        _timed(["compile", str(path), "--plugins", str(PLUGINS)], tree) for path in TOPOLOGIES
    )
    return {"lint": lint, "compile": compile_}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--before", default="3bbefa9^")
    parser.add_argument("--landed", default="3bbefa9")
    parser.add_argument("--json", action="store_true", help="accepted; the output is JSON")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="dmn-cel-bench-") as d:
        commits = {}
        sides = {}
        for side in ("before", "landed"):
            (Path(d) / side).mkdir()
            commits[side] = _unpack(getattr(args, side), Path(d) / side)
            sides[side] = Path(d) / side / "tree"
        sides["after"] = ROOT
        samples: dict[str, dict[str, list[float]]] = {
            side: {"lint": [], "compile": []} for side in sides
        }
        for _ in range(args.rounds):
            for side, tree in sides.items():
                for name, seconds in _round(tree).items():
                    samples[side][name].append(seconds)
    result = {
        "what": "seconds per command over examples/topologies "
        f"({len(TOPOLOGIES)} files; compile = sum of one process per file)",
        "commits": {**commits, "after": "working tree"},
        "rounds": args.rounds,
        "median_seconds": {
            name: {side: round(statistics.median(samples[side][name]), 3) for side in sides}
            for name in ("lint", "compile")
        },
        "samples": samples,
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
