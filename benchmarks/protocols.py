"""Round-trip latency of the node agent's two wire protocols, side by side.

* NRI: lab/runtime drives RunPodSandbox through mux + ttrpc to the agent's NRI plugin
  (empty handler) over a real unix socket — once via the dedicated RPC, once via
  StateChange as an older runtime would.
* gRPC: a kubelet-like client calls NodePrepareResources (one claim, empty handler) on the
  agent's DRA server over a real unix socket.

Reports medians and p90 in microseconds and the NRI/gRPC ratio. ``--json`` prints one JSON
object instead of text. Run: ``.venv/bin/python benchmarks/protocols.py [--n 2000] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import grpc

from dmn.agent.kubelet.handler import ClaimRef, PrepareResult, UnprepareResult
from dmn.agent.kubelet.server import KubeletPluginServer
from dmn.agent.nri.handler import Container, ContainerAdjustment, HookTimeout, PodSandbox
from dmn.agent.nri.plugin import NriPlugin, PluginConfig, PluginThread
from dmn.agent.protos import dra_v1_pb2, dra_v1_pb2_grpc
from dmn.lab.runtime.nri_runtime import LabNriRuntime, LabPod


class EmptyNri:
    def synchronize(self, pods: Sequence[PodSandbox], containers: Sequence[Container]) -> None:
        pass

    def run_pod_sandbox(self, pod: PodSandbox) -> None:
        pass

    def stop_pod_sandbox(self, pod: PodSandbox) -> None:
        pass

    def remove_pod_sandbox(self, pod: PodSandbox) -> None:
        pass

    def create_container(self, pod: PodSandbox, container: Container) -> ContainerAdjustment:
        return ContainerAdjustment()

    def start_container(self, pod: PodSandbox, container: Container) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def hook_timed_out(self, report: HookTimeout) -> None:
        pass


class EmptyDra:
    def prepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, PrepareResult]:
        return {c.uid: PrepareResult() for c in claims}

    def unprepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, UnprepareResult]:
        return {c.uid: UnprepareResult() for c in claims}


def _time(n: int, op: Callable[[int], object]) -> list[float]:
    for i in range(min(50, n)):  # warm-up
        op(i)
    samples = []
    for i in range(n):
        start = time.perf_counter()
        op(i)
        samples.append((time.perf_counter() - start) * 1e6)
    return samples


def _summary(samples: list[float]) -> dict[str, float]:
    q = statistics.quantiles(samples, n=10)
    return {"median_us": statistics.median(samples), "p90_us": q[-1], "n": len(samples)}


def bench_nri(root: Path, n: int, state_change_only: bool) -> dict[str, float]:
    sock = str(root / ("nri-sc.sock" if state_change_only else "nri.sock"))
    runtime = LabNriRuntime(sock, request_timeout=2.0, state_change_only=state_change_only).start()
    thread = PluginThread(NriPlugin(EmptyNri(), PluginConfig(socket_path=sock))).start()
    try:
        if not runtime.wait_ready(1, 10.0):
            raise RuntimeError("NRI plugin did not become ready")

        def op(i: int) -> None:
            runtime.run_pod_sandbox(LabPod(f"p{i}", f"uid-{i}", f"p{i}", "bench", "/run/netns/x"))
            runtime.pods.pop(f"p{i}", None)

        return _summary(_time(n, op))
    finally:
        thread.stop()
        runtime.stop()


def bench_grpc(root: Path, n: int) -> dict[str, float]:
    srv = KubeletPluginServer(
        "dra-multi-network.schseba.github.io",
        EmptyDra(),
        registry_dir=root / "reg",
        plugins_dir=root / "plugins",
    ).start()
    try:
        with grpc.insecure_channel(f"unix://{srv.dra_socket}") as ch:
            stub = dra_v1_pb2_grpc.DRAPluginStub(ch)

            def op(i: int) -> None:
                req = dra_v1_pb2.NodePrepareResourcesRequest(
                    claims=[dra_v1_pb2.Claim(namespace="bench", uid=f"uid-{i}", name=f"c{i}")]
                )
                stub.NodePrepareResources(req, timeout=5)

            return _summary(_time(n, op))
    finally:
        srv.stop(1.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=2000, help="round trips per case")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="dmn-bench-", dir="/tmp"))
    try:
        result = {
            "nri_run_pod_sandbox_dedicated": bench_nri(root, args.n, state_change_only=False),
            "nri_run_pod_sandbox_state_change": bench_nri(root, args.n, state_change_only=True),
            "grpc_node_prepare_resources": bench_grpc(root, args.n),
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)
    ratio = (
        result["nri_run_pod_sandbox_dedicated"]["median_us"]
        / result["grpc_node_prepare_resources"]["median_us"]
    )
    if args.json:
        sys.stdout.write(json.dumps({**result, "ratio_nri_over_grpc": ratio}, indent=2) + "\n")
    else:
        for name, s in result.items():
            sys.stdout.write(
                f"{name:36s} median {s['median_us']:8.1f} us  p90 {s['p90_us']:8.1f} us"
                f"  (n={int(s['n'])})\n"
            )
        sys.stdout.write(f"{'ratio NRI dedicated / gRPC (median)':36s} {ratio:8.2f}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
