"""Inventory → personas → ResourceSlices on a synthetic scale node, side by side.

The node (built once per run from tests/fixtures/sysfs_layouts.py): ``--pfs`` ConnectX-style
PFs with ``--vfs`` VFs each plus a management NIC, every PF and VF exposed under four
personas (kernel, vfio, macvlan, ipvlan) with two compatibility domains each.

* ``discover+build``: scan the sysfs tree (recorded link/devlink facts), evaluate the
  policies, build the pool's slices — what the agent does on start;
* ``rebuild-after-policy-change``: one policy changes (the PF macvlan ``children``
  capacity); personas and slices are rebuilt from the existing inventory with the
  publisher's coherent generation bump — what the agent does on a policy event;
* ``scan-only``: the scan alone, to show where the time goes.

Figures are medians of ``--repeats`` rounds; ratios are against ``discover+build``.

    .venv/bin/python benchmarks/slices.py [--pfs 4] [--vfs 64] [--repeats 7] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dmn.agent.inventory import Inventory, ScanConfig, scan
from dmn.agent.personas import build_personas
from dmn.agent.slices import SlicePublisher
from dmn.api.policy import DeviceExposurePolicy
from tests.fixtures.policies import family, iface, policy
from tests.fixtures.sysfs_layouts import FixtureNode, build_synthetic_node


def four_personas(kind: str, children: int) -> list[DeviceExposurePolicy]:
    sel = {"kind": kind, "vendors": ["0x15b3"]}
    hw = {"allowedDrivers": ["vfio-pci"]}
    handoff = "pf-handoff" if kind == "PF" else "host-retained"
    k = kind.lower()
    return [
        policy(f"{k}-kernel", persona="kernel", plugin="host-cni", mode="kernel", selector=sel,
               compatibility=[iface("kernel-handoff"), family(handoff)]),
        policy(f"{k}-vfio", persona="vfio", plugin="host-cni", mode="vfio", selector=sel,
               hardware=hw, compatibility=[iface("vfio-handoff"), family(handoff)]),
        policy(f"{k}-macvlan", persona="macvlan", plugin="macvlan-cni", mode="bridge",
               selector=sel, children=children,
               compatibility=[iface("macvlan"), family("host-retained")]),
        policy(f"{k}-ipvlan", persona="ipvlan", plugin="ipvlan-cni", mode="l2", selector=sel,
               children=children, compatibility=[iface("ipvlan"), family("host-retained")]),
    ]  # fmt: skip


def policies(pf_children: int) -> list[DeviceExposurePolicy]:
    return four_personas("PF", pf_children) + four_personas("VF", 8)


def median_ms(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), result


def run(pfs: int, vfs: int, repeats: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        node: FixtureNode = build_synthetic_node(Path(tmp), pfs=pfs, vfs=vfs)
        build_tree_ms = (time.perf_counter() - t0) * 1000

        def discover() -> Inventory:
            return scan(ScanConfig(node.sysfs, "bench-node", node.links, node.devlink,
                                   node_ips=node.node_ips))  # fmt: skip

        def discover_and_build() -> tuple[Inventory, list[dict[str, Any]]]:
            inv = discover()
            ps = build_personas(inv, policies(64), {})
            _, slices = SlicePublisher("bench-node").publish(ps)
            return inv, slices

        scan_ms, _ = median_ms(discover, repeats)
        full_ms, (inventory, slices) = median_ms(discover_and_build, repeats)
        publisher = SlicePublisher("bench-node")
        base = build_personas(inventory, policies(64), {})
        publisher.publish(base)
        flip = [32, 64]

        def rebuild() -> tuple[bool, list[dict[str, Any]], int]:
            flip.reverse()  # every round is a real change
            ps = build_personas(inventory, policies(flip[0]), {})
            changed, out = publisher.publish(ps)
            return changed, out, len(ps.personas)

        rebuild_ms, (changed, rebuilt, personas) = median_ms(rebuild, repeats)
        assert changed
    devices = sum(len(s["spec"].get("devices") or []) for s in slices)
    counter_sets = sum(len(s["spec"].get("sharedCounters") or []) for s in slices)
    return {
        "node": {"pfs": pfs, "vfsPerPf": vfs, "items": len(inventory.items)},
        "personas": personas,
        "devices": devices,
        "counterSets": counter_sets,
        "slices": len(slices),
        "counterSlices": sum(1 for s in slices if s["spec"].get("sharedCounters")),
        "generationAfterRebuilds": rebuilt[0]["spec"]["pool"]["generation"],
        "repeats": repeats,
        "buildFixtureTreeMs": round(build_tree_ms, 1),
        "medianMs": {
            "discover+build": round(full_ms, 2),
            "scan-only": round(scan_ms, 2),
            "rebuild-after-policy-change": round(rebuild_ms, 2),
        },
        "ratios": {
            "scan-only/discover+build": round(scan_ms / full_ms, 3),
            "rebuild/discover+build": round(rebuild_ms / full_ms, 3),
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pfs", type=int, default=4)
    parser.add_argument("--vfs", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = run(args.pfs, args.vfs, args.repeats)
    if args.json:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
        return 0
    m = result["medianMs"]
    sys.stdout.write(
        f"node: {args.pfs} PFs x {args.vfs} VFs, {result['node']['items']} items, "
        f"{result['personas']} personas -> {result['slices']} slices "
        f"({result['counterSlices']} counter, {result['counterSets']} counter sets, "
        f"{result['devices']} devices)\n"
        f"discover+build               {m['discover+build']:9.2f} ms (median of {args.repeats})\n"
        f"scan-only                    {m['scan-only']:9.2f} ms  "
        f"ratio {result['ratios']['scan-only/discover+build']}\n"
        f"rebuild-after-policy-change  {m['rebuild-after-policy-change']:9.2f} ms  "
        f"ratio {result['ratios']['rebuild/discover+build']}\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
