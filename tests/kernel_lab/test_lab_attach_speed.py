"""ipvlan (and macvlan) attach and removal beside the reference CNI plugins, in the kernel lab.

The development host's kernel lacks ipvlan, so issue 15's ipvlan comparison runs here, inside
the Debian-kernel VM: ``benchmarks/attach_vs_cni.py``'s ``ipvlan`` and ``macvlan`` rows — the
product's durable connect/cleanup (binder, runner, RocksDB journal, real executors, pinned
sandbox) and the reference ``/usr/lib/cni`` ipvlan/macvlan plugins' ADD/DEL, alternating, in
one run.

Under TCG absolute times mean nothing; ratios of one run are comparable. The journal lives on
the guest's tmpfs, where a sync costs nothing, and the VM slows the plugins' process start
most, so the macvlan row is the calibration: its ratio here beside the same row measured on
the host shows how far the VM bends ratios.

In CI this runs ``CYCLES`` cycles (each TCG cycle of both rows takes about ten seconds): it
proves every path of both sides works and prints the JSON (also written as
``attach_speed.json`` into the lab's run folder). The issue's numbers are the benchmark's own
minimum of 30 cycles: set ``CYCLES = 30`` and run
``pytest -m kernel_lab tests/kernel_lab/test_lab_attach_speed.py``. Nothing here asserts
wall-clock.
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from tests.kernel_lab.guest import GUEST_ENV

pytestmark = pytest.mark.kernel_lab

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "attach_vs_cni.py"
CYCLES = 3


def test_ipvlan_and_macvlan_beside_the_reference_plugins() -> None:
    spec = importlib.util.spec_from_file_location("attach_vs_cni", BENCH)
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    result = bench.measure({"ipvlan", "macvlan"}, CYCLES)
    for row in ("ipvlan", "macvlan"):
        r = result[row]
        assert r["cycles"] == CYCLES
        assert min(r["ours_ms"], r["cni_ms"], r["ours_del_ms"], r["cni_del_ms"]) > 0
    out = json.dumps(result)
    run_dir = os.environ.get(GUEST_ENV)
    if run_dir:
        (Path(run_dir) / "attach_speed.json").write_text(out + "\n")
    print(out)
