"""Journal retention benchmark: scan time with many terminal records, before and after
``JournalStore.forget_terminal`` (what ``dmn journal forget`` runs).

One store in ``--dir`` (default a temporary directory) holds ``--terminal`` Removed
attachments (no operations left: all collectable) and ``--live`` Ready ones. Side by side:

* ``before``: median wall time of ``store.attachments()`` (the scan the coordinator runs
  under its lock) over ``--repeats`` rounds with every terminal record present;
* ``retained``: the same scan after one ``collect_terminal`` with the agent's default
  :class:`Retention` (``dmn node`` runs it periodically: at most ``--retain-count``, default
  1000, terminal records kept), timed once too;
* ``after``: the same scan after one ``forget_terminal()`` (timed once, reported too).

The ratio is before / after.

    .venv/bin/python benchmarks/journal_retention.py [--terminal 20000] [--live 50] [--json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from dmn.agent.journal.records import AttachmentIdentity, AttachmentRecord, AttachmentState
from dmn.agent.journal.store import JournalStore, Retention


def _fill(store: JournalStore, terminal: int, live: int) -> None:
    for start in range(0, terminal + live, 1000):
        with store.batch() as b:
            for i in range(start, min(start + 1000, terminal + live)):
                state = AttachmentState.REMOVED if i < terminal else AttachmentState.READY
                ident = AttachmentIdentity("node-uid", "boot-1", f"pod-{i:06d}", f"sb-{i:06d}")
                b.put_attachment(AttachmentRecord(ident, state=state))


def _scan_ms(store: JournalStore, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        store.attachments()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--terminal", type=int, default=20000)
    parser.add_argument("--live", type=int, default=50)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--retain-count", type=int, default=Retention().max_count)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="dmn-bench-retention-", dir=args.dir))
    try:
        with JournalStore.open(root) as store:
            _fill(store, args.terminal, args.live)
            before = _scan_ms(store, args.repeats)
            started = time.perf_counter()
            retention = Retention(max_age=3600.0, max_count=args.retain_count)
            collected = store.collect_terminal(retention, time.time())
            collect_ms = (time.perf_counter() - started) * 1000
            retained = _scan_ms(store, args.repeats)
            started = time.perf_counter()
            forgotten = store.forget_terminal()
            forget_ms = (time.perf_counter() - started) * 1000
            after = _scan_ms(store, args.repeats)
            remaining = len(store.attachments())
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result = {
        "terminal_records": args.terminal,
        "live_records": args.live,
        "repeats": args.repeats,
        "scan_ms_before": round(before, 2),
        "retention_collect_ms": round(collect_ms, 1),
        "records_collected_by_retention": collected,
        "scan_ms_with_retention": round(retained, 2),
        "forget_terminal_ms": round(forget_ms, 1),
        "records_forgotten": forgotten,
        "records_remaining": remaining,
        "scan_ms_after": round(after, 3),
        "ratio_before_to_after": round(before / after, 1) if after else None,
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
