"""OVSDB session benchmark: opening ``ovs/*``'s session with each JSON-RPC parser.

Side by side in one run, against one real ``ovsdb-server`` + ``ovs-vswitchd`` (userspace
datapath, in a scratch network namespace; needs root and the ``openvswitch-switch`` package):

* ``stdlib``: :class:`~dmn.opcodes.ovs.ovsdb_session.OvsdbSession` as the executors use it,
  messages parsed by :mod:`dmn.opcodes.ovs.json_stream` (the standard library's C decoder);
* ``ovs-python``: the same session with ``ovs.json``'s own per-character Python lexer (what
  the ``ovs`` wheel does without its C extension).

Each session fetches the schema, syncs the monitored tables and reads one view. Figures are
medians of ``--repeats`` rounds of ``--sessions`` sessions (alternating, so load drifts hit
both); the ratio is stdlib over ovs-python.

    .venv/bin/python benchmarks/ovsdb_session.py [--sessions 10] [--repeats 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import ovs.json

from dmn.opcodes.ovs import json_stream
from dmn.opcodes.ovs.ovsdb_session import OvsdbSession

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the tests' own switch fixture
from tests.kernel.scratch import scratch_netns
from tests.kernel_lab.ovs_switch import ovs_switch


def _open_ms(remote: str, parser: Any, sessions: int) -> float:
    ovs.json.Parser = parser
    try:
        t0 = time.perf_counter()
        for _ in range(sessions):
            with OvsdbSession(remote) as session:
                session.view()
        return (time.perf_counter() - t0) * 1000 / sessions
    finally:
        json_stream.use_for_ovsdb()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    fast: list[float] = []
    slow: list[float] = []
    with scratch_netns("ovsbench") as ns, ovs_switch(ns, datapath="netdev") as switch:
        for _ in range(args.repeats):
            fast.append(_open_ms(switch.remote, json_stream.JsonStreamParser, args.sessions))
            slow.append(_open_ms(switch.remote, json_stream._ORIGINAL_PARSER, args.sessions))
    result = {
        "stdlib_ms": round(statistics.median(fast), 2),
        "ovs_python_ms": round(statistics.median(slow), 2),
    }
    result["ratio"] = round(result["stdlib_ms"] / result["ovs_python_ms"], 3)
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"session open+view: stdlib {result['stdlib_ms']} ms, ovs-python "
            f"{result['ovs_python_ms']} ms, ratio {result['ratio']}"
        )


if __name__ == "__main__":
    main()
