"""Run one benchmark several times and report the median and spread of each figure.

Why: a single run of a side-by-side benchmark on a 2-core machine moves with whatever else
runs; a claim about a ratio needs the median of several runs and how far they spread.

    python benchmarks/repeat.py --runs 5 -- benchmarks/pod_storm.py --pods 40 --json

The command after ``--`` must print one JSON object (its ``--json`` mode) as its last line
of output. Runs go one after the other; each run's object is kept under ``runs``. For every
numeric key (nested objects are flattened to ``a.b``) the report gives ``median``, ``min``,
``max`` and ``spread`` (= (max - min) / median). ``--json`` prints the report as one
object; otherwise a table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any


def flatten(obj: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """The numeric leaves of ``obj`` (booleans excluded), keyed by dotted path."""
    out: dict[str, float] = {}
    for key, value in obj.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{path}."))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            out[path] = float(value)
    return out


def summarise(runs: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Per numeric key present in every run: median, min, max and relative spread."""
    flat = [flatten(r) for r in runs]
    keys = sorted(set.intersection(*(set(f) for f in flat))) if flat else []
    out: dict[str, dict[str, float]] = {}
    for key in keys:
        values = [f[key] for f in flat]
        median = statistics.median(values)
        low, high = min(values), max(values)
        spread = (high - low) / median if median else 0.0
        out[key] = {"median": median, "min": low, "max": high, "spread": round(spread, 3)}
    return out


def _run_once(command: Sequence[str]) -> dict[str, Any]:
    done = subprocess.run([sys.executable, *command], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    if not lines:
        raise SystemExit(f"{' '.join(command)} printed nothing")
    parsed: dict[str, Any] = json.loads(lines[-1])
    return parsed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--keys", default="", help="comma-separated keys to show (default all)")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = [c for c in args.command if c != "--"]
    if not command or args.runs < 1:
        parser.error("give --runs >= 1 and a command after --")
    runs = [_run_once(command) for _ in range(args.runs)]
    summary = summarise(runs)
    if args.keys:
        wanted = [k.strip() for k in args.keys.split(",") if k.strip()]
        summary = {k: v for k, v in summary.items() if k in wanted}
    if args.json:
        print(json.dumps({"command": command, "runs": runs, "summary": summary}))
        return 0
    width = max((len(k) for k in summary), default=10)
    print(f"{'key':<{width}}  {'median':>10} {'min':>10} {'max':>10} {'spread':>7}")
    for key, s in summary.items():
        print(
            f"{key:<{width}}  {s['median']:>10.3f} {s['min']:>10.3f} {s['max']:>10.3f} "
            f"{s['spread']:>7.3f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
