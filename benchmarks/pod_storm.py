"""A storm of Pods through the real node agent, beside the reference CNI macvlan plugin.

A lab control plane (:func:`tests.coordinator.lab_node.lab_control_plane`: lab API server,
controller, the lab node's links in a namespace the lab owns) with the ``shared-macvlan``
topology, the lab NRI runtime and the node agent:

* ``--agent process`` (default, as on a node): ``dmn node`` as its own process, inside the
  lab node's namespace (its "host" namespace, where its NICs are), with its RocksDB journal,
  NRI socket and kubelet DRA socket in a private directory; it scans its inventory and
  publishes the node's slices itself (the lab's publisher is stopped). Its API requests reach
  the lab API server through a small TCP relay process (the namespaces share no loopback).
  The lab NRI runtime is its own process too (as containerd is), driven over a pipe and
  timing each hook itself.
* ``--agent in-process`` (the earlier configuration, for comparison):
  :func:`tests.coordinator.lab_node.lab_node`, the real NodeAgent and the lab NRI runtime
  in this process, so the hooks compete for one interpreter lock with the runtime, the API
  server, the controller and the kubelet's gRPC calls.

``--pods`` Pods (default 100), each with one macvlan claim, go through in waves as wide as
the node's shares (4 per parent):

* the lab allocator allocates the wave's claims; kubelet ``NodePrepareResources`` runs over
  the real DRA gRPC socket, ``--concurrency`` (4) at a time, one claim per call;
* for each Pod, in turn (NRI hooks are serialised runtime-wide): **hook** = RunPodSandbox +
  CreateContainer through the lab NRI runtime into a fresh namespace for that Pod; right
  after it, in the same loop, one reference CNI macvlan ``ADD`` (``/usr/lib/cni/macvlan``,
  same mode and MTU, into its own fresh namespace, on a parent in a scratch host namespace);
* for each Pod: **teardown** = StopPodSandbox + RemovePodSandbox, then one CNI ``DEL``;
* unprepare over gRPC (4 at a time), release the claims.

``--ipam pool`` (default) runs shared-macvlan as shipped, so each Pod's hook also takes one
address of the example IPPool macvlan-v4 from the lab API server (the allocation's intent is
journaled and synced first) and adds it and the pool's route; the reference side then runs the
macvlan plugin with host-local IPAM over the same range and route. ``--ipam none`` drops the
pool from the topology and IPAM from the reference config: links only on both sides.

Reported (``--json``): ``hook_ms_per_pod`` and ``cni_add_ms`` (medians), ``ratio`` =
hook / ADD; ``teardown_ms_per_pod`` and ``cni_del_ms``, ``teardown_ratio``; plus p90s,
prepare/unprepare medians, the wall time of the storm, the pod count, the agent mode and
``agent_cpu_ms_per_pod``, the CPU time of the agent's process over the storm per Pod (in
``--agent in-process`` that process is the benchmark's own, so it counts everything).
Hook and teardown times are what the runtime sees: from sending the request to receiving
the response, nothing left out. Needs root.

    .venv/bin/python benchmarks/pod_storm.py [--pods 100] [--concurrency 4]
        [--agent process|in-process] [--ipam pool|none] [--json]
"""

from __future__ import annotations

import argparse
import copy
import ctypes
import ctypes.util
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import grpc  # noqa: E402
from attach_vs_cni import (  # noqa: E402
    CLONE_NEWNET,
    CNI_DIR,
    macvlan_cni_config,
    ns_path,
    run_cni,
)
from pyroute2 import IPRoute, netns  # noqa: E402

from dmn.agent.protos import dra_v1_pb2, dra_v1_pb2_grpc  # noqa: E402
from dmn.api.cluster import Cluster  # noqa: E402
from dmn.api.cluster import resources as r  # noqa: E402
from dmn.api.identity import DRIVER  # noqa: E402
from dmn.lab.allocator.service import ClaimService  # noqa: E402
from dmn.lab.node import CHILDREN, LAB_LINKS, NODE_NAME  # noqa: E402
from dmn.lab.runtime.nri_runtime import LabContainer, LabNriRuntime, LabPod  # noqa: E402
from tests.coordinator.lab_node import (  # noqa: E402
    NRI_REQUEST_TIMEOUT,
    WAIT,
    create_claim,
    create_pod,
    lab_control_plane,
    lab_node,
)

AGENT_MODES = ("process", "in-process")


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


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "setns")


def api_relay(netns_path: str, upstream_port: int) -> int:
    """Relay TCP from 127.0.0.1 inside ``netns_path`` to 127.0.0.1:``upstream_port`` here.

    The listener is made inside the agent's namespace (the process enters it, brings its
    loopback up as a host's is, listens and returns before any thread exists); each
    connection is pumped both ways by two threads. Prints the listening port, serves until
    stdin closes."""
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(netns_path, os.O_RDONLY)
    _setns(target)
    with IPRoute() as ipr:
        ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")
    listener = socket.create_server(("127.0.0.1", 0))
    _setns(home)
    os.close(target)
    os.close(home)

    def pump(src: socket.socket, dst: socket.socket) -> None:
        with suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def serve() -> None:
        while True:
            conn, _ = listener.accept()
            up = socket.create_connection(("127.0.0.1", upstream_port))
            for a, b in ((conn, up), (up, conn)):
                a.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                threading.Thread(target=pump, args=(a, b), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    sys.stdout.write(f"{listener.getsockname()[1]}\n")
    sys.stdout.flush()
    sys.stdin.read()
    return 0


def _unmount_under(root: Path) -> None:
    """Detach what a stopped agent left mounted under its private directory (its pin
    directory is bind-mounted onto itself), deepest first, so that it can be removed."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    with open("/proc/self/mountinfo") as info:
        points = [line.split()[4] for line in info]
    prefix = str(root) + "/"
    for point in sorted((p for p in points if p.startswith(prefix)), reverse=True):
        libc.umount2(point.encode(), 2)  # MNT_DETACH


class RuntimeHooks:
    """The lab NRI runtime in this process; each call is timed around the runtime's own
    calls (request sent, response received)."""

    def __init__(self, runtime: LabNriRuntime) -> None:
        self.runtime = runtime

    def hook(self, i: int, pod_uid: str, netns_path: str) -> float:
        sandbox = LabPod(f"sb{i}", pod_uid, f"sp{i}", "default", netns_path)
        a = time.perf_counter()
        self.runtime.run_pod_sandbox(sandbox)
        self.runtime.create_container(f"sb{i}", LabContainer(f"c{i}", f"sb{i}", "app"))
        return time.perf_counter() - a

    def teardown(self, i: int) -> float:
        a = time.perf_counter()
        self.runtime.stop_pod_sandbox(f"sb{i}")
        self.runtime.remove_pod_sandbox(f"sb{i}")
        return time.perf_counter() - a

    def wait_ready(self, timeout: float) -> bool:
        return self.runtime.wait_ready(1, timeout)

    def plugins(self) -> list[str]:
        return self.runtime.ready_plugins

    def close(self) -> None:
        self.runtime.stop()


def runtime_helper(socket_path: str) -> int:
    """The lab NRI runtime as its own process (containerd is one on a node): JSON requests
    on stdin, one JSON reply a line; hook times are taken here, around the runtime's calls,
    so the pipe is not counted."""
    hooks = RuntimeHooks(
        LabNriRuntime(
            socket_path, request_timeout=NRI_REQUEST_TIMEOUT, registration_timeout=20.0
        ).start()
    )
    for line in sys.stdin:
        req = json.loads(line)
        try:
            op = req["op"]
            if op == "hook":
                reply: dict[str, Any] = {"value": hooks.hook(req["i"], req["uid"], req["netns"])}
            elif op == "teardown":
                reply = {"value": hooks.teardown(req["i"])}
            elif op == "wait":
                reply = {"value": hooks.wait_ready(req["timeout"])}
            else:
                reply = {"value": hooks.plugins()}
        except Exception as exc:  # reported to the parent, which raises
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()
    hooks.close()
    return 0


class RuntimeProcess:
    """:func:`runtime_helper` in its own process, driven over a pipe."""

    def __init__(self, socket_path: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--runtime-helper", socket_path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )

    def _call(self, **req: Any) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        reply = json.loads(self.proc.stdout.readline())
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return reply["value"]

    def hook(self, i: int, pod_uid: str, netns_path: str) -> float:
        return float(self._call(op="hook", i=i, uid=pod_uid, netns=netns_path))

    def teardown(self, i: int) -> float:
        return float(self._call(op="teardown", i=i))

    def wait_ready(self, timeout: float) -> bool:
        return bool(self._call(op="wait", timeout=timeout))

    def plugins(self) -> list[str]:
        return list(self._call(op="plugins"))

    def close(self) -> None:
        _end(self.proc)


@dataclass
class StormNode:
    """What the storm drives: the API, the NRI runtime, the kubelet's DRA socket."""

    cluster: Cluster
    runtime: RuntimeHooks | RuntimeProcess
    device_class: str
    dra_socket: Path
    agent_pid: int  # the process the agent's hooks run in (--profile samples it)

    def claim(self, name: str) -> dict[str, Any]:
        return create_claim(self.cluster, name, self.device_class)

    def pod(self, name: str, claim: str) -> dict[str, Any]:
        return create_pod(self.cluster, name, claim)


def without_pool(doc: dict[str, Any]) -> dict[str, Any]:
    """shared-macvlan as shipped but without its IPPool: links only (``--ipam none``)."""
    out = copy.deepcopy(doc)
    for step in out["spec"]["steps"]:
        step.get("config", {}).pop("pool", None)
    return out


TOPOLOGY_EDITS: dict[str, Callable[[dict[str, Any]], dict[str, Any]] | None] = {
    "pool": None,
    "none": without_pool,
}


@contextmanager
def agent_in_process(ipam: str = "pool") -> Iterator[StormNode]:
    with lab_node(topology_edit=TOPOLOGY_EDITS[ipam]) as node:
        dra_socket = node.kubelet.dra_socket
        hooks = RuntimeHooks(node.runtime)
        yield StormNode(node.cluster, hooks, node.device_class, dra_socket, os.getpid())


@contextmanager
def agent_process(ipam: str = "pool") -> Iterator[StormNode]:
    """``dmn node`` in the lab node's namespace against the lab control plane."""
    root = Path(tempfile.mkdtemp(prefix="dmn-ps-", dir="/tmp"))  # short: sockaddr_un
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, root, True)
        stack.callback(_unmount_under, root)
        lab, cluster, topo = stack.enter_context(
            lab_control_plane(root, topology_edit=TOPOLOGY_EDITS[ipam])
        )
        assert lab.publication is not None
        lab.publication.stop()  # the agent scans and publishes its node itself
        host_ns = f"/var/run/netns/{lab.netns}"
        relay = subprocess.Popen(
            [sys.executable, __file__, "--api-relay", host_ns, lab.url.rsplit(":", 1)[1]],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        stack.callback(_end, relay)
        assert relay.stdout is not None
        port = int(relay.stdout.readline())
        sock = str(root / "nri.sock")
        runtime = RuntimeProcess(sock)
        stack.callback(runtime.close)
        (root / "sysfs").mkdir()  # no PCI devices: the lab node's NICs are its veth ends
        argv = ["nsenter", f"--net={host_ns}", "--", sys.executable, "-m", "dmn", "node"]
        argv += ["--url", f"http://127.0.0.1:{port}", "--node-name", NODE_NAME]
        argv += ["--state-dir", str(root / "agent"), "--host-netns", host_ns]
        argv += ["--kubelet-registry-dir", str(root / "reg")]
        argv += ["--kubelet-plugins-dir", str(root / "plugins")]
        argv += ["--nri-socket", sock, "--sysfs", str(root / "sysfs")]
        for link in LAB_LINKS:
            argv += ["--lab-link", link]
        env = {k: v for k, v in os.environ.items() if k != "NRI_PLUGIN_SOCKET"}
        log = stack.enter_context((root / "agent.log").open("w"))
        agent = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, cwd=ROOT
        )
        stack.callback(_stop_agent, agent, root / "agent.log")
        dra_socket = root / "plugins" / DRIVER / "dra.sock"
        deadline = time.monotonic() + WAIT
        while not (runtime.wait_ready(0.5) and dra_socket.is_socket()):
            if agent.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"dmn node did not come up: {_tail(root / 'agent.log')}")
        yield StormNode(cluster, runtime, topo.device_classes[0], dra_socket, agent.pid)


def _tail(path: Path, lines: int = 20) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _end(proc: subprocess.Popen[str]) -> None:
    if proc.stdin is not None:
        proc.stdin.close()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _stop_agent(agent: subprocess.Popen[bytes], log: Path) -> None:
    """SIGTERM (the agent stops in reverse order and exits 0), SIGKILL after 30 s."""
    if agent.poll() is None:
        agent.send_signal(signal.SIGTERM)
    try:
        code = agent.wait(timeout=30)
    except subprocess.TimeoutExpired:
        agent.kill()
        code = agent.wait()
    if code != 0:
        sys.stderr.write(f"dmn node exited {code}:\n{_tail(log)}\n")


AGENTS: dict[str, Callable[[str], Any]] = {"process": agent_process, "in-process": agent_in_process}


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


@contextmanager
def sampled(pid: int, out: Path | None) -> Iterator[None]:
    """py-spy samples ``pid`` (every thread, idle ones too: a hook waits on fdatasync and
    netlink) in raw collapsed stacks to ``out`` while the block runs; nothing when None."""
    if out is None:
        yield
        return
    spy_bin = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy_bin).is_file():
        raise SystemExit("--profile needs py-spy (not in the test extras): pip install py-spy")
    argv = [spy_bin, "record", "--pid", str(pid), "--idle", "--threads", "--rate", "50"]
    spy = subprocess.Popen([*argv, "--format", "raw", "--output", str(out), "--nonblocking"])
    time.sleep(1.0)  # attached before the storm starts
    try:
        yield
    finally:
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=60)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` (every thread) from /proc: what the agent's process
    spent, which a busy machine's run queue does not inflate as it does wall time."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


#: The reference side of ``--ipam pool``: host-local hands out addresses of the same range
#: as the example pool macvlan-v4 (its exclusion aside) and adds the same route, keeping its
#: leases in files (dataDir) as host-local does on a node.
def host_local_ipam(data_dir: Path) -> dict[str, Any]:
    return {
        "type": "host-local",
        "ranges": [
            [
                {
                    "subnet": "10.56.0.0/24",
                    "rangeStart": "10.56.0.10",
                    "rangeEnd": "10.56.0.199",
                    "gateway": "10.56.0.1",
                }
            ]
        ],
        "routes": [{"dst": "10.58.0.0/16", "gw": "10.56.0.1"}],
        "dataDir": str(data_dir),
    }


def storm(
    pods: int,
    concurrency: int,
    agent: str = "process",
    profile: Path | None = None,
    ipam: str = "pool",
) -> dict[str, Any]:
    wave_size = CHILDREN * len(LAB_LINKS)
    times: dict[str, list[float]] = {
        k: [] for k in ("hook", "cni_add", "teardown", "cni_del", "prepare", "unprepare")
    }
    tag = os.getpid() % 10000
    with ExitStack() as stack:
        helper = CniHelper()  # before any gRPC thread exists
        stack.callback(helper.close)
        node: StormNode = stack.enter_context(AGENTS[agent](ipam))
        # the reference plugin's side: a parent in a scratch "host" namespace
        cni_host = stack.enter_context(namespace(f"psh{tag}"))
        ipr = stack.enter_context(IPRoute(netns=cni_host))
        ipr.link("add", ifname="psparent", kind="veth", peer="pspeer")
        for n in ("psparent", "pspeer"):
            ipr.link("set", index=ipr.link_lookup(ifname=n)[0], state="up", mtu=1500)
        cni_config = macvlan_cni_config("psparent")
        if ipam == "pool":
            leases = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="dmn-ps-ipam-")))
            cni_config["ipam"] = host_local_ipam(leases)
        channel = grpc.insecure_channel(f"unix://{node.dra_socket}")
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

        stack.enter_context(sampled(node.agent_pid, profile))
        cpu_before = _cpu_seconds(node.agent_pid)
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
                    times["hook"].append(
                        node.runtime.hook(i, pod["metadata"]["uid"], ns_path(pod_ns))
                    )
                    times["cni_add"].append(
                        helper.run("ADD", cni_config, ns_path(cni_ns), f"ps{i}", ns_path(cni_host))
                    )
                for i in wave:
                    times["teardown"].append(node.runtime.teardown(i))
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
        agent_cpu = _cpu_seconds(node.agent_pid) - cpu_before
        # a hook past the runtime's timeout drops the plugin and later hooks reach nobody:
        # such a run measures nothing
        if len(node.runtime.plugins()) != 1:
            raise RuntimeError(f"the agent's NRI plugin was dropped: {node.runtime.plugins()}")
    hook, add = _ms(times["hook"]), _ms(times["cni_add"])
    down, delete = _ms(times["teardown"]), _ms(times["cni_del"])
    return {
        "pods": pods,
        "concurrency": concurrency,
        "agent": agent,
        "ipam": ipam,
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
        "agent_cpu_ms_per_pod": round(agent_cpu * 1000 / pods, 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--pods", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument(
        "--agent",
        choices=AGENT_MODES,
        default="process",
        help="dmn node as its own process (default, as on a node) or the NodeAgent in this one",
    )
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="FILE",
        help="sample the agent's process with py-spy during the storm (raw collapsed stacks)",
    )
    parser.add_argument(
        "--ipam",
        choices=tuple(TOPOLOGY_EDITS),
        default="pool",
        help="pool (default): shared-macvlan as shipped, addressed from the IPPool, beside "
        "the reference plugin with host-local IPAM; none: links only on both sides",
    )
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--cni-helper", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--api-relay", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--runtime-helper", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cni_helper:
        return cni_helper()
    if args.runtime_helper:
        return runtime_helper(args.runtime_helper)
    if args.api_relay:
        return api_relay(args.api_relay[0], int(args.api_relay[1]))
    if not (CNI_DIR / "macvlan").is_file():
        sys.stderr.write(
            f"{CNI_DIR / 'macvlan'} missing: apt-get install containernetworking-plugins\n"
        )
        return 2
    if args.ipam == "pool" and not (CNI_DIR / "host-local").is_file():
        sys.stderr.write(
            f"{CNI_DIR / 'host-local'} missing: apt-get install containernetworking-plugins\n"
        )
        return 2
    result = storm(args.pods, args.concurrency, args.agent, args.profile, args.ipam)
    if args.json:
        sys.stdout.write(json.dumps(result) + "\n")
        return 0
    sys.stdout.write(
        f"{result['pods']} pods (agent {result['agent']}, ipam {result['ipam']}): hook "
        f"{result['hook_ms_per_pod']:.2f} ms/pod vs CNI ADD "
        f"{result['cni_add_ms']:.2f} ms (ratio {result['ratio']:.2f}); teardown "
        f"{result['teardown_ms_per_pod']:.2f} ms/pod vs CNI DEL {result['cni_del_ms']:.2f} ms "
        f"(ratio {result['teardown_ratio']:.2f}); prepare {result['prepare_ms']:.2f} ms, "
        f"unprepare {result['unprepare_ms']:.2f} ms; wall {result['wall_s']:.1f} s\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
