"""Journal benchmark: synced commits per effect and runner overhead per effect.

Side by side in one run, on the same filesystem (``--dir``, default a temporary directory):

* ``bare``: a bare rocksdict loop of synced single puts (``WriteOptions.sync = True``) of an
  effect-record-sized value — the floor any durable journal pays per commit;
* ``runner``: the journaled runner over the RocksDB store running programs of ``--effects``
  no-op effects (capture/apply/observe do nothing) — microseconds per effect and synced
  commits per effect (budget: 2 per effect + 2 per operation);
* ``runner-memory``: the same runner over the in-memory journal — its pure CPU cost.

Each figure is the median of ``--repeats`` rounds. Ratios: runner µs per effect over bare µs
per synced put, and over (commits per effect × bare µs per put), i.e. what the runner costs
beyond the fsyncs it must do.

    .venv/bin/python benchmarks/journal.py [--effects 8] [--ops 20] [--repeats 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from rocksdict import Options, Rdict, WriteOptions

from dmn.agent.journal.store import JournalStore
from dmn.engine.bound import BoundEffect, BoundProgram
from dmn.engine.journal import MemoryJournal
from dmn.engine.runner import Runner
from dmn.opcodes.executor import EffectContext, Observed, RecoveryObservation
from dmn.opcodes.spec import OpcodeSpec
from dmn.vocabulary.handles import Handle
from dmn.vocabulary.terms import Hook, RecoveryStrategy, Reversibility


class _NoParams(BaseModel):
    pass


class NoopExecutor:
    spec = OpcodeSpec(
        name="bench/noop/v1",
        summary="does nothing",
        parameters=_NoParams,
        inputs={},
        outputs={},
        hooks=frozenset({Hook.CONNECT}),
        reversibility=Reversibility.REVERSIBLE,
        recovery=frozenset({RecoveryStrategy.OBSERVE_AND_RECONCILE}),
    )

    def capture(self, ctx: EffectContext) -> Any:
        return {"noop": True}

    def apply(self, ctx: EffectContext, before: Any) -> None:
        return None

    def observe(self, ctx: EffectContext, before: Any) -> Observed:
        return Observed(True, {})

    def undo(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, tuple[Handle, ...]]
    ) -> None:
        return None

    def recover(self, ctx: EffectContext, before: Any) -> RecoveryObservation:
        return RecoveryObservation.APPLIED


def program(effects: int) -> BoundProgram:
    return BoundProgram(
        plugin="bench",
        plugin_version="v1",
        hook="connect",
        contract_digest="sha256:bench",
        effects=tuple(
            BoundEffect(f"e{i}", f"e{i}", "bench/noop/v1", {}, {"i": i}) for i in range(effects)
        ),
    )


def bench_bare(root: Path, puts: int, value: bytes) -> float:
    """µs per synced put."""
    path = root / f"bare-{time.monotonic_ns()}"
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    db = Rdict(str(path), opts)
    sync = WriteOptions()
    sync.sync = True
    start = time.perf_counter()
    for i in range(puts):
        db.put(f"k/{i:08d}".encode(), value, sync)
    elapsed = time.perf_counter() - start
    db.close()
    shutil.rmtree(path, ignore_errors=True)
    return elapsed / puts * 1e6


def bench_runner(root: Path | None, ops: int, prog: BoundProgram) -> tuple[float, float]:
    """(µs per effect, synced commits per effect) over the RocksDB store or memory."""
    executors = {"bench/noop/v1": NoopExecutor()}
    state = root / f"runner-{time.monotonic_ns()}" if root is not None else None
    journal: Any = JournalStore.open(state) if state is not None else MemoryJournal()
    runner = Runner(journal, executors)
    base = journal.commits
    start = time.perf_counter()
    for i in range(ops):
        result = runner.run(f"op-{i}", f"att/{i}", prog)
        assert result.ok
    elapsed = time.perf_counter() - start
    commits = journal.commits - base
    if state is not None:
        journal.close()
        shutil.rmtree(state, ignore_errors=True)
    n = ops * len(prog.effects)
    return elapsed / n * 1e6, commits / n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--effects", type=int, default=8)
    parser.add_argument("--ops", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="dmn-bench-journal-", dir=args.dir))
    prog = program(args.effects)
    # an effect record's size: what one synced commit carries on the forward path
    value = b"x" * 600
    bare, runner, memory, commits = [], [], [], []
    try:
        for _ in range(args.repeats):
            bare.append(bench_bare(root, args.ops * args.effects, value))
            us, per_effect = bench_runner(root, args.ops, prog)
            runner.append(us)
            commits.append(per_effect)
            memory.append(bench_runner(None, args.ops, prog)[0])
    finally:
        shutil.rmtree(root, ignore_errors=True)
    bare_us = statistics.median(bare)
    runner_us = statistics.median(runner)
    commits_per_effect = statistics.median(commits)
    result = {
        "effects_per_operation": args.effects,
        "operations": args.ops,
        "repeats": args.repeats,
        "bare_synced_put_us": round(bare_us, 1),
        "runner_us_per_effect": round(runner_us, 1),
        "runner_memory_us_per_effect": round(statistics.median(memory), 1),
        "synced_commits_per_effect": round(commits_per_effect, 3),
        "commit_budget_per_effect": round(2 + 2 / args.effects, 3),
        "ratio_runner_to_bare_put": round(runner_us / bare_us, 2),
        "ratio_runner_to_its_fsync_floor": round(runner_us / (commits_per_effect * bare_us), 2),
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        width = max(len(k) for k in result)
        for k, v in result.items():
            print(f"{k:<{width}}  {v}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
