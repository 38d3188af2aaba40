"""Wall-clock stack samples of the node agent's request handlers, without py-spy.

Why: py-spy is not installed on the development machine, and cProfile sees only the thread
it runs in, while the agent's kubelet and NRI handlers run in thread pools. Put this
directory first on ``PYTHONPATH`` and set ``DMN_STACK_SAMPLES=DIR``: every Python process
started with that environment (the agent that ``benchmarks/pod_storm.py`` starts, for one)
samples all its threads every 5 ms. A sample whose stack is inside one of :data:`ROOTS`
counts once for that root and once for each distinct frame of this repository on its stack
(cumulative share) and for its innermost frame (where it waits or works).
``DIR/samples-<pid>.json`` is rewritten every 2 s::

    DMN_STACK_SAMPLES=/tmp/s PYTHONPATH=benchmarks/stack_sampler \\
        .venv/bin/python benchmarks/pod_storm.py --pods 20 --json

Samples are wall clock: waiting on the API server, a lock or the kernel counts, as it does
in a Pod's startup.

``DMN_THREAD_CPU=DIR`` instead (or as well) records CPU time, not stacks: every second it
reads each live thread's user + system time from ``/proc/self/task/<tid>/stat`` and
rewrites ``DIR/threads-<pid>.json`` with the CPU milliseconds per thread name (a pool's
numbered workers and ``Thread-N (target)`` folded into one name; threads that ended keep
their last reading) and the process total. Why: in a Pod burst the node's two cores are
the currency, and wall-clock stacks do not say which of the agent's background threads
(publication, inventory rescans, status writes, watches) compete with the hooks. It only
reads ``/proc`` once a second, so it can run beside a timed benchmark::

    DMN_THREAD_CPU=/tmp/cpu PYTHONPATH=benchmarks/stack_sampler \\
        .venv/bin/python benchmarks/pod_startup.py ...
"""

from __future__ import annotations

import collections
import json
import os
import re
import sys
import threading
import time
from pathlib import Path
from types import FrameType

ROOTS = {
    ("preparation.py", "prepare"): "prepare",
    ("preparation.py", "unprepare"): "unprepare",
    ("sandbox_attachment.py", "run_pod"): "run_pod",
    ("sandbox_attachment.py", "gate"): "gate",
    ("sandbox_attachment.py", "stop_pod"): "stop_pod",
    ("node_publisher.py", "_loop"): "publish_loop",
    ("manager.py", "process_one"): "controller",
}
REPO = str(Path(__file__).resolve().parents[2]) + "/"


def _stack(frame: FrameType | None) -> list[FrameType]:
    out = []
    while frame is not None:
        out.append(frame)
        frame = frame.f_back
    return out


def _sample(out: Path) -> None:
    counts: collections.Counter[str] = collections.Counter()
    cum: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    leaf: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    me, written = threading.get_ident(), time.monotonic()
    while True:
        for tid, frame in sys._current_frames().items():
            if tid == me:
                continue
            stack = _stack(frame)
            roots = [
                ROOTS[k]
                for f in stack
                if (k := (f.f_code.co_filename.rsplit("/", 1)[-1], f.f_code.co_name)) in ROOTS
            ]
            if not roots:
                continue
            root = roots[-1]
            counts[root] += 1
            mine = {
                f"{f.f_code.co_filename.removeprefix(REPO)}:{f.f_code.co_name}"
                for f in stack
                if f.f_code.co_filename.startswith(REPO) and "/.venv/" not in f.f_code.co_filename
            }
            cum[root].update(mine)
            top = stack[0].f_code
            leaf[root]["/".join(top.co_filename.rsplit("/", 2)[-2:]) + ":" + top.co_name] += 1
        if counts and time.monotonic() - written > 2:
            doc = {
                "samples": counts,
                "cumulative": {k: v.most_common(40) for k, v in cum.items()},
                "innermost": {k: v.most_common(15) for k, v in leaf.items()},
            }
            out.write_text(json.dumps(doc))
            written = time.monotonic()
        time.sleep(0.005)


_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cpu_ms(stat_path: str) -> float | None:
    try:
        with open(stat_path) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) * 1000.0 / _TICKS  # utime, stime


def _thread_name(name: str) -> str:
    m = re.fullmatch(r"Thread-\d+ \((.+)\)", name)
    if m:
        return m.group(1)
    return re.sub(r"[_-]\d+$", "", name)


def _thread_cpu(out: Path) -> None:
    last: dict[int, tuple[str, float]] = {}
    while True:
        time.sleep(1.0)
        for t in threading.enumerate():
            tid = t.native_id
            if tid is None:
                continue
            ms = _cpu_ms(f"/proc/self/task/{tid}/stat")
            if ms is not None:
                last[tid] = (_thread_name(t.name), ms)
        by_name: collections.Counter[str] = collections.Counter()
        for name, ms in last.values():
            by_name[name] += ms
        doc = {"process_cpu_ms": _cpu_ms("/proc/self/stat"), "threads_cpu_ms": by_name}
        out.write_text(json.dumps(doc))


if os.environ.get("DMN_THREAD_CPU"):
    _cpu_target = Path(os.environ["DMN_THREAD_CPU"]) / f"threads-{os.getpid()}.json"
    _cpu_target.parent.mkdir(parents=True, exist_ok=True)
    threading.Thread(
        target=_thread_cpu, args=(_cpu_target,), daemon=True, name="thread-cpu"
    ).start()

if os.environ.get("DMN_STACK_SAMPLES"):
    _target = Path(os.environ["DMN_STACK_SAMPLES"]) / f"samples-{os.getpid()}.json"
    _target.parent.mkdir(parents=True, exist_ok=True)
    threading.Thread(target=_sample, args=(_target,), daemon=True, name="stack-sampler").start()
