"""Topology compile time: a 32-step topology and every example, side by side.

For each topology, in one run (medians and p90 of ``--n`` runs, milliseconds):

* ``load``: positioned YAML loading of the topology text;
* ``checker``: the language checker alone, afresh on every step's plugin with that step's
  config (what compilation cost before the compiler reused verdicts);
* ``compile``: the whole compiler — shape, config, typed DAG, checker, budgets,
  normalization, digest, revision and DeviceClasses. It checks a plugin once per distinct
  reading of the config (``CleanVerdicts``: a clean verdict is reused for a later step whose
  config the checker reads the same way), so on topologies with repeated plugins it can be
  below ``checker``;
* ``compile_cpu_ms``: the compiler's CPU time (median): on a shared machine wall time also
  shows the run queue;
* ``ratio`` = compile / checker.

    .venv/bin/python benchmarks/compile.py [--n 30] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from dmn.controller.compile.compiler import compile_topology
from dmn.interpreter.checker import check_plugin
from dmn.interpreter.config_schema import validate_config
from dmn.interpreter.loader import load_builtin_plugins
from dmn.interpreter.source import load_yaml_documents
from dmn.opcodes.registry import default_registry

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples" / "topologies"


def topology_32() -> dict[str, Any]:
    """8 SR-IOV roots, 4 active-backup bonds over pairs, 20 VLANs on the bonds: 32 steps."""
    steps: list[dict[str, Any]] = []
    for i in range(8):
        steps.append(
            {
                "id": f"vf{i}",
                "kind": "Allocation",
                "pluginRef": {"name": "sriov-cni"},
                "config": {"mode": "kernel", "ifName": f"vf{i}", "mtu": 1500, "up": True},
            }
        )
    for b in range(4):
        steps.append(
            {
                "id": f"bond{b}",
                "kind": "Operation",
                "pluginRef": {"name": "bond-cni"},
                "inputs": {
                    "members": [
                        {"from": f"vf{2 * b}.interface"},
                        {"from": f"vf{2 * b + 1}.interface"},
                    ]
                },
                "config": {
                    "ifName": f"bond{b}",
                    "mtu": 1500,
                    "up": True,
                    "mode": "active-backup",
                    "monitorIntervalMs": 100,
                    "failOverMac": "active",
                },
            }
        )
    for v in range(20):
        steps.append(
            {
                "id": f"vlan{v}",
                "kind": "Operation",
                "pluginRef": {"name": "vlan-cni"},
                "inputs": {"parent": {"from": f"bond{v % 4}.interface"}},
                "config": {"ifName": f"v{v}", "mtu": 1500, "up": True, "vlanId": 100 + v},
            }
        )
    return {
        "apiVersion": "networking.dra-multi-network.schseba.github.io/v1alpha1",
        "kind": "NetworkTopology",
        "metadata": {"name": "bench-32"},
        "spec": {
            "effectBudget": {
                "allow": [
                    "linux/link-move/v1",
                    "linux/link-configure/v1",
                    "linux/create-bond/v1",
                    "linux/attach-master/v1",
                    "linux/create-vlan/v1",
                ]
            },
            "steps": steps,
        },
    }


def measure(fn: Callable[[], Any], n: int, cpu: list[float] | None = None) -> tuple[float, float]:
    """Median and p90 wall milliseconds; CPU milliseconds per run appended to ``cpu``."""
    fn()  # warm caches (grammar, registry)
    samples = []
    for _ in range(n):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
        if cpu is not None:
            cpu.append((time.process_time() - start_cpu) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(0.9 * (len(samples) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=30)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    plugins = load_builtin_plugins()
    registry = default_registry()
    cases: dict[str, str] = {"32-step": yaml.safe_dump(topology_32(), sort_keys=False)}
    for path in sorted(EXAMPLES.glob("*.yaml")):
        cases[path.stem] = path.read_text()
    rows = []
    for name, text in cases.items():
        docs, problems = load_yaml_documents(text, name)
        assert not problems
        doc = docs[0]
        result = compile_topology(doc.data, plugins, registry, source=doc.source, uid="u")
        assert result.compiled is not None, [d.render() for d in result.diagnostics]

        def checker_only(data: dict[str, Any] = doc.data) -> None:
            for step in data["spec"]["steps"]:
                plugin = plugins[step["pluginRef"]["name"]]
                config, _ = validate_config(plugin.descriptor.spec.config_schema, step["config"])
                check_plugin(plugin, registry, config)

        load = measure(lambda text=text, name=name: load_yaml_documents(text, name), args.n)
        check = measure(checker_only, args.n)
        cpu: list[float] = []
        full = measure(
            lambda doc=doc: compile_topology(
                doc.data, plugins, registry, source=doc.source, uid="u"
            ),
            args.n,
            cpu,
        )
        rows.append(
            {
                "topology": name,
                "steps": len(doc.data["spec"]["steps"]),
                "load_ms": load,
                "checker_ms": check,
                "compile_ms": full,
                "compile_cpu_ms": statistics.median(cpu),
                "ratio": full[0] / check[0],
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    head = ("topology", "steps", "load ms", "checker ms", "compile ms", "cpu ms", "ratio")
    print(
        f"{head[0]:<20} {head[1]:>5} {head[2]:>14} {head[3]:>14} {head[4]:>14} {head[5]:>6} "
        f"{head[6]:>6}"
    )
    for row in rows:

        def fmt(pair: tuple[float, float]) -> str:
            return f"{pair[0]:6.2f} ({pair[1]:5.2f})"

        print(
            f"{row['topology']:<20} {row['steps']:>5} {fmt(row['load_ms']):>14} "
            f"{fmt(row['checker_ms']):>14} {fmt(row['compile_ms']):>14} "
            f"{row['compile_cpu_ms']:6.2f} {row['ratio']:>6.2f}"
        )
    print("median (p90) over", args.n, "runs; ratio = compile / checker")


if __name__ == "__main__":
    main()
