"""A storm of Pods through the real node agent, beside the reference CNI macvlan plugin.

A lab node (:func:`tests.coordinator.lab_node.lab_node`: lab API server, controller, slice
publication, the real NodeAgent on private sockets with its RocksDB journal, the lab NRI
runtime) with the ``shared-macvlan`` topology. ``--pods`` Pods (default 100), each with one
macvlan claim, go through in waves as wide as the node's shares (4 per parent):

* the lab allocator allocates the wave's claims; kubelet ``NodePrepareResources`` runs over
  the real DRA gRPC socket, ``--concurrency`` (4) at a time, one claim per call;
* for each Pod, in turn (NRI hooks are serialised runtime-wide): **hook** = RunPodSandbox +
  CreateContainer through the lab NRI runtime into a fresh namespace for that Pod; right
  after it, in the same loop, one reference CNI macvlan ``ADD`` (``/usr/lib/cni/macvlan``,
  same mode and MTU, into its own fresh namespace, on a parent in a scratch host namespace);
* for each Pod: **teardown** = StopPodSandbox + RemovePodSandbox, then one CNI ``DEL``;
* unprepare over gRPC (4 at a time), release the claims.

Reported (``--json``): ``hook_ms_per_pod`` and ``cni_add_ms`` (medians), ``ratio`` =
hook / ADD; ``teardown_ms_per_pod`` and ``cni_del_ms``, ``teardown_ratio``; plus p90s,
prepare/unprepare medians, the wall time of the storm and the pod count. Needs root.

    .venv/bin/python benchmarks/pod_storm.py [--pods 100] [--concurrency 4] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import grpc  # noqa: E402
from attach_vs_cni import CNI_DIR, macvlan_cni_config, ns_path, run_cni  # noqa: E402
from pyroute2 import IPRoute, netns  # noqa: E402

from dmn.agent.protos import dra_v1_pb2, dra_v1_pb2_grpc  # noqa: E402
from dmn.api.cluster import resources as r  # noqa: E402
from dmn.lab.allocator.service import ClaimService  # noqa: E402
from dmn.lab.node import CHILDREN, LAB_LINKS, NODE_NAME  # noqa: E402
from dmn.lab.runtime.nri_runtime import LabContainer, LabPod  # noqa: E402
from tests.coordinator.lab_node import lab_node  # noqa: E402


class CniHelper:
    """Runs the reference plugin from a small helper process without gRPC threads (forking
    the agent's process for ``preexec_fn`` setns would fork its gRPC event engine); the
    helper times each plugin execution itself, so the pipe is not counted."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--cni-helper"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )

    def run(self, command: str, config: dict[str, Any], netns: str, cid: str, host: str) -> float:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        req = {"command": command, "config": config, "netns": netns, "cid": cid, "host": host}
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        reply = json.loads(self.proc.stdout.readline())
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return float(reply["seconds"])

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=10)


def cni_helper() -> int:
    fds: dict[str, int] = {}
    for line in sys.stdin:
        req = json.loads(line)
        host = req["host"]
        if host not in fds:
            fds[host] = os.open(host, os.O_RDONLY)
        try:
            a = time.perf_counter()
            run_cni("macvlan", req["command"], req["config"], req["netns"], req["cid"], fds[host])
            reply: dict[str, Any] = {"seconds": time.perf_counter() - a}
        except Exception as exc:  # reported to the parent, which raises
            reply = {"error": str(exc)}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    return 0


@contextmanager
def namespace(name: str) -> Iterator[str]:
    netns.create(name)
    try:
        yield name
    finally:
        netns.remove(name)


def _ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 3)


def _p90(samples: list[float]) -> float:
    return round(sorted(samples)[max(int(len(samples) * 0.9) - 1, 0)] * 1000, 3)


def storm(pods: int, concurrency: int) -> dict[str, Any]:
    wave_size = CHILDREN * len(LAB_LINKS)
    times: dict[str, list[float]] = {
        k: [] for k in ("hook", "cni_add", "teardown", "cni_del", "prepare", "unprepare")
    }
    tag = os.getpid() % 10000
    with ExitStack() as stack:
        helper = CniHelper()  # before any gRPC thread exists
        stack.callback(helper.close)
        node = stack.enter_context(lab_node())
        # the reference plugin's side: a parent in a scratch "host" namespace
        cni_host = stack.enter_context(namespace(f"psh{tag}"))
        ipr = stack.enter_context(IPRoute(netns=cni_host))
        ipr.link("add", ifname="psparent", kind="veth", peer="pspeer")
        for n in ("psparent", "pspeer"):
            ipr.link("set", index=ipr.link_lookup(ifname=n)[0], state="up", mtu=1500)
        cni_config = macvlan_cni_config("psparent")
        channel = grpc.insecure_channel(f"unix://{node.kubelet.dra_socket}")
        stack.callback(channel.close)
        stub = dra_v1_pb2_grpc.DRAPluginStub(channel)
        service = ClaimService(node.cluster, NODE_NAME)
        pool = stack.enter_context(ThreadPoolExecutor(max_workers=concurrency))

        def prepare(ref: Any) -> float:
            a = time.perf_counter()
            rep = stub.NodePrepareResources(dra_v1_pb2.NodePrepareResourcesRequest(claims=[ref]))
            took = time.perf_counter() - a
            assert not rep.claims[ref.uid].error, rep
            return took

        def unprepare(ref: Any) -> float:
            a = time.perf_counter()
            req = dra_v1_pb2.NodeUnprepareResourcesRequest(claims=[ref])
            rep = stub.NodeUnprepareResources(req)
            took = time.perf_counter() - a
            assert not rep.claims[ref.uid].error, rep
            return took

        started = time.perf_counter()
        done = 0
        while done < pods:
            wave = range(done, min(done + wave_size, pods))
            claims, pod_objs, refs = [], [], []
            for i in wave:
                claims.append(node.claim(f"s{i}"))
                pod_objs.append(node.pod(f"sp{i}", f"s{i}"))
            allocated = []
            for claim, pod in zip(claims, pod_objs, strict=True):
                (got,) = service.allocate([claim], pod=pod)
                allocated.append(got)
                meta = got["metadata"]
                refs.append(
                    dra_v1_pb2.Claim(namespace="default", uid=meta["uid"], name=meta["name"])
                )
            times["prepare"].extend(pool.map(prepare, refs))
            with ExitStack() as wave_stack:
                for i, pod in zip(wave, pod_objs, strict=True):
                    pod_ns = wave_stack.enter_context(namespace(f"psp{tag}x{i}"))
                    cni_ns = wave_stack.enter_context(namespace(f"psc{tag}x{i}"))
                    sandbox = LabPod(
                        f"sb{i}", pod["metadata"]["uid"], f"sp{i}", "default", ns_path(pod_ns)
                    )
                    a = time.perf_counter()
                    node.runtime.run_pod_sandbox(sandbox)
                    node.runtime.create_container(f"sb{i}", LabContainer(f"c{i}", f"sb{i}", "app"))
                    times["hook"].append(time.perf_counter() - a)
                    times["cni_add"].append(
                        helper.run("ADD", cni_config, ns_path(cni_ns), f"ps{i}", ns_path(cni_host))
                    )
                for i in wave:
                    a = time.perf_counter()
                    node.runtime.stop_pod_sandbox(f"sb{i}")
                    node.runtime.remove_pod_sandbox(f"sb{i}")
                    times["teardown"].append(time.perf_counter() - a)
                    cni_ns = ns_path(f"psc{tag}x{i}")
                    times["cni_del"].append(
                        helper.run("DEL", cni_config, cni_ns, f"ps{i}", ns_path(cni_host))
                    )
            times["unprepare"].extend(pool.map(unprepare, refs))
            for got, pod in zip(allocated, pod_objs, strict=True):
                service.release(got)
                node.cluster.delete(r.PODS, pod["metadata"]["name"], "default")
                node.cluster.delete(r.RESOURCE_CLAIMS, got["metadata"]["name"], "default")
            done += len(wave)
        wall = time.perf_counter() - started
    hook, add = _ms(times["hook"]), _ms(times["cni_add"])
    down, delete = _ms(times["teardown"]), _ms(times["cni_del"])
    return {
        "pods": pods,
        "concurrency": concurrency,
        "hook_ms_per_pod": hook,
        "cni_add_ms": add,
        "ratio": round(hook / add, 3),
        "teardown_ms_per_pod": down,
        "cni_del_ms": delete,
        "teardown_ratio": round(down / delete, 3),
        "hook_p90_ms": _p90(times["hook"]),
        "teardown_p90_ms": _p90(times["teardown"]),
        "prepare_ms": _ms(times["prepare"]),
        "unprepare_ms": _ms(times["unprepare"]),
        "wall_s": round(wall, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--pods", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--cni-helper", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cni_helper:
        return cni_helper()
    if not (CNI_DIR / "macvlan").is_file():
        sys.stderr.write(
            f"{CNI_DIR / 'macvlan'} missing: apt-get install containernetworking-plugins\n"
        )
        return 2
    result = storm(args.pods, args.concurrency)
    if args.json:
        sys.stdout.write(json.dumps(result) + "\n")
        return 0
    sys.stdout.write(
        f"{result['pods']} pods: hook {result['hook_ms_per_pod']:.2f} ms/pod vs CNI ADD "
        f"{result['cni_add_ms']:.2f} ms (ratio {result['ratio']:.2f}); teardown "
        f"{result['teardown_ms_per_pod']:.2f} ms/pod vs CNI DEL {result['cni_del_ms']:.2f} ms "
        f"(ratio {result['teardown_ratio']:.2f}); prepare {result['prepare_ms']:.2f} ms, "
        f"unprepare {result['unprepare_ms']:.2f} ms; wall {result['wall_s']:.1f} s\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
