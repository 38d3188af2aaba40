"""One claim's node lifecycle through the real agent, phase by phase (c1's lab benchmark).

A lab node (:func:`tests.coordinator.lab_node.lab_node`: lab API server, controller, slice
publication, the real NodeAgent on private sockets, the lab NRI runtime) with the
``shared-macvlan`` topology; each iteration allocates a claim for a Pod, then times

* ``prepare``: kubelet ``NodePrepareResources`` over the DRA socket;
* ``run_pod``: the NRI RunPodSandbox hook (macvlan child moved into a scratch namespace);
* ``create_ctr``: the CreateContainer gate;
* ``stop+remove``: StopPodSandbox + RemovePodSandbox (connect undone from the journal);
* ``unprepare``: kubelet ``NodeUnprepareResources``.

Figures are medians (and p90) over ``--iterations``. Needs root (network namespaces).

    .venv/bin/python benchmarks/node_lifecycle.py [--iterations 20] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import grpc

from dmn.agent.protos import dra_v1_pb2, dra_v1_pb2_grpc
from dmn.lab.allocator.service import ClaimService
from dmn.lab.node import NODE_NAME
from dmn.lab.runtime.nri_runtime import LabContainer, LabPod
from tests.coordinator.lab_node import lab_node
from tests.kernel.scratch import netns_path, scratch_netns

PHASES = ("prepare", "run_pod", "create_ctr", "stop+remove", "unprepare")


def measure(iterations: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {k: [] for k in PHASES}
    with lab_node() as node, scratch_netns("dmbnl") as sb_ns:
        channel = grpc.insecure_channel(f"unix://{node.kubelet.dra_socket}")
        stub = dra_v1_pb2_grpc.DRAPluginStub(channel)
        for i in range(iterations):
            claim, pod = node.claim(f"b{i}"), node.pod(f"bp{i}", f"b{i}")
            (claim,) = ClaimService(node.cluster, NODE_NAME).allocate([claim], pod=pod)
            uid = claim["metadata"]["uid"]
            ref = dra_v1_pb2.Claim(namespace="default", uid=uid, name=f"b{i}")
            a = time.perf_counter()
            rep = stub.NodePrepareResources(dra_v1_pb2.NodePrepareResourcesRequest(claims=[ref]))
            times["prepare"].append(time.perf_counter() - a)
            assert not rep.claims[uid].error, rep
            sandbox = LabPod(
                f"s{i}", pod["metadata"]["uid"], f"bp{i}", "default", netns_path(sb_ns)
            )
            a = time.perf_counter()
            node.runtime.run_pod_sandbox(sandbox)
            times["run_pod"].append(time.perf_counter() - a)
            a = time.perf_counter()
            node.runtime.create_container(f"s{i}", LabContainer(f"c{i}", f"s{i}", "app"))
            times["create_ctr"].append(time.perf_counter() - a)
            a = time.perf_counter()
            node.runtime.stop_pod_sandbox(f"s{i}")
            node.runtime.remove_pod_sandbox(f"s{i}")
            times["stop+remove"].append(time.perf_counter() - a)
            a = time.perf_counter()
            req = dra_v1_pb2.NodeUnprepareResourcesRequest(claims=[ref])
            rep2 = stub.NodeUnprepareResources(req)
            times["unprepare"].append(time.perf_counter() - a)
            assert not rep2.claims[uid].error, rep2
        channel.close()
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    times = measure(args.iterations)
    result = {
        phase: {
            "median_ms": round(statistics.median(v) * 1000, 2),
            "p90_ms": round(sorted(v)[max(int(len(v) * 0.9) - 1, 0)] * 1000, 2),
            "n": len(v),
        }
        for phase, v in times.items()
    }
    if args.json:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
        return 0
    for phase, row in result.items():
        sys.stdout.write(
            f"{phase:12s} median {row['median_ms']:7.1f} ms  p90 {row['p90_ms']:7.1f} ms"
            f"  n={row['n']}\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
