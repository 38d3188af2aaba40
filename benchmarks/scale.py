"""Scale on the real control plane: slice publication, scheduling with our classes, controller.

One run brings up the upstream lab's control plane only (etcd, kube-apiserver v1.37.2 from
the upstream cache, our controller and webhook) and starts kube-scheduler beside it (no
controller manager, no kubelet). It then simulates ``--nodes`` nodes:

* a Node object each (Ready in status, allocatable Pods, the capability report our agent
  writes, so the controller labels it eligible as for a real agent);
* each node's ResourceSlices published by the product's own
  :class:`~dmn.agent.slices.node_publisher.NodeSlicePublisher` (every pass lists, plans,
  writes and reports policy status exactly as ``dmn node`` does) over one synthetic
  inventory (``--pfs`` PFs x ``--vfs`` VFs, tests/fixtures/sysfs_layouts.py): PFs as
  shared macvlan parents (consumable ``children`` capacity), VFs as exclusive kernel VFs.

Identity: every simulated node publishes with the node agent's own service-account token
(the identity the chart gives every agent; RBAC as the lab grants it), not a per-node
credential: a bound per-node token needs an agent Pod on that node, which this lab has not.

Figures: publish time for all nodes (``--workers`` agents at a time), slice bytes, API
requests and bytes of one at-rest pass per node (from the API server's own metrics),
republish time after a policy change touching every node; scheduling of ``--pods`` Pods
each with one claim of our classes (a macvlan share plus an exclusive VF on the same
``pcieRoot``) and, in the same run, as many Pods whose claim asks two devices of a plain
DeviceClass selecting by one attribute (the scheduler's floor); apply → Ready of
``--topologies`` NetworkTopologies with the controller's CPU and memory. The scheduler's
and API server's CPU are reported as measured, not tuned.

    flock /tmp/dmn-heavy.lock .venv/bin/python benchmarks/scale.py --nodes 50 --json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dmn.agent.inventory import Inventory, ScanConfig, scan
from dmn.agent.slices.node_publisher import NodeSlicePublisher
from dmn.api.cluster import AlreadyExists, Cluster, connect
from dmn.api.cluster import resources as r
from dmn.api.identity import DRIVER
from dmn.api.node_capability import (
    ANNOTATION,
    MAX_REFRESH_S,
    CapabilityReport,
    capability_labels,
    revision_requirement,
)
from dmn.controller.manager import REPORT_WINDOW_MAX_S
from dmn.lab.demo import wait_settled
from dmn.lab.node import policies as lab_policies
from dmn.lab.upstream import build, configs
from dmn.lab.upstream.cluster import UpstreamLab
from dmn.lab.upstream.configs import DRIVER_NAMESPACE
from dmn.lab.upstream.driver import NODE_SA, sa_user
from tests.fixtures.sysfs_layouts import build_synthetic_node

GROUP = "networking.dra-multi-network.schseba.github.io"
API = f"{GROUP}/v1alpha1"
D = DRIVER
PLAIN_CLASS = "scale-plain"
SIM_LABEL = "dmn-scale/simulated"
PCIE_ROOT = "resource.kubernetes.io/pcieRoot"
Obj = dict[str, Any]
IDENTITY = "agent-service-account-token"
log = logging.getLogger("scale")

SUMMARY = ("nodes", "devices", "publish_s", "republish_s", "bytesPerNode", "claims_per_s",
           "bound_p50_ms", "bound_p99_ms", "baseline_claims_per_s",
           "controller_ready_p99_ms")  # fmt: skip


def _topology(name: str, plugin: str, config: Obj, allow: list[str]) -> Obj:
    return {
        "apiVersion": API,
        "kind": "NetworkTopology",
        "metadata": {"name": name},
        "spec": {
            "effectBudget": {"allow": allow},
            "steps": [{"id": "net", "kind": "Allocation", "pluginRef": {"name": plugin},
                       "config": config}],
        },
    }  # fmt: skip


def macvlan_topology(name: str) -> Obj:
    config = {"mode": "bridge", "ifName": "net1", "mtu": 1500, "up": True}
    return _topology(name, "macvlan-cni", config,
                     ["share/hold-parent/v1", "linux/create-macvlan/v2"])  # fmt: skip


def vf_topology(name: str) -> Obj:
    config = {"mode": "kernel", "linkType": "ethernet", "ifName": "net2", "mtu": 1500, "up": True}
    return _topology(name, "sriov-cni", config, ["linux/link-move/v1", "linux/link-configure/v1"])


def policies(children: int) -> list[Obj]:
    """PFs as shared macvlan parents, VFs as exclusive kernel VFs (design §5.5 domains)."""

    def one(name: str, kind: str, persona: str, plugin: str, mode: str, groups: tuple[str, str],
            shared: bool) -> Obj:  # fmt: skip
        exposure: Obj = {
            "persona": persona,
            "plugin": plugin,
            "mode": mode,
            "compatibility": [
                {"scope": "Interface", "domain": "interface", "groups": [groups[0]]},
                {"scope": "SriovFamily", "domain": "family", "groups": [groups[1]]},
            ],
        }
        if shared:
            exposure["allowMultipleAllocations"] = True
            exposure["capacity"] = {"children": {"value": str(children)}}
        return {
            "apiVersion": API,
            "kind": "DeviceExposurePolicy",
            "metadata": {"name": name},
            "spec": {
                "priority": 100,
                "action": "Expose",
                "selector": {"kind": kind, "vendors": ["0x15b3"]},
                "exposure": exposure,
            },
        }

    return [
        one("scale-pf-macvlan", "PF", "macvlan", "macvlan-cni", "bridge",
            ("macvlan", "host-retained"), True),
        one("scale-vf-kernel", "VF", "kernel", "sriov-cni", "kernel",
            ("kernel-handoff", "host-retained"), False),
    ]  # fmt: skip


def plain_class() -> Obj:
    expression = f'device.attributes["{D}"].persona == "kernel"'
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": PLAIN_CLASS},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def our_claim(name: str, namespace: str, macvlan: str, vf: str) -> Obj:
    requests = [
        {"name": "macvlan", "exactly": {"deviceClassName": macvlan}},
        {"name": "vf", "exactly": {"deviceClassName": vf}},
    ]
    constraints = [{"requests": ["macvlan", "vf"], "matchAttribute": PCIE_ROOT}]
    return _claim(name, namespace, {"requests": requests, "constraints": constraints})


def plain_claim(name: str, namespace: str) -> Obj:
    requests = [{"name": n, "exactly": {"deviceClassName": PLAIN_CLASS}} for n in ("a", "b")]
    return _claim(name, namespace, {"requests": requests})


def _claim(name: str, namespace: str, devices: Obj) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": devices},
    }


def pod(name: str, namespace: str, claim: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "automountServiceAccountToken": False,
            "containers": [{"name": "app", "image": "pause"}],
            "resourceClaims": [{"name": "net", "resourceClaimName": claim}],
        },
    }


def node_object(name: str, report: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, SIM_LABEL: "true"},
            "annotations": {ANNOTATION: report},
        },
    }


def node_status() -> Obj:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    capacity = {"cpu": "64", "memory": "256Gi", "pods": "250"}
    ready = {"type": "Ready", "status": "True", "reason": "Simulated",
             "lastHeartbeatTime": now, "lastTransitionTime": now}  # fmt: skip
    return {"status": {"capacity": capacity, "allocatable": capacity, "conditions": [ready]}}


def capability_report(node: str, revisions: Iterable[Obj]) -> str:
    """The report an agent running every contract the revisions pin would write."""
    opcodes: dict[str, str] = {}
    builtins: dict[str, str] = {}
    for rev in revisions:
        req = revision_requirement(rev)
        if req is not None:
            opcodes.update(dict(req.opcodes))
            builtins.update(dict(req.builtins))
    return CapabilityReport(
        node=node,
        boot_id="simulated",
        agent_version="scale-benchmark",
        observed_at=time.time(),
        refresh_s=MAX_REFRESH_S,
        nri_registered=True,
        nri_synchronized=True,
        opcodes=opcodes,
        builtins=builtins,
    ).to_annotation()


# --- measurement helpers ------------------------------------------------------------------


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))
    return ordered[k]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory_kib(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


_METRIC = re.compile(
    r"^(apiserver_request_total|apiserver_response_sizes_sum"
    r"|apiserver_watch_events_total|apiserver_watch_events_sizes_sum)\{(.*)\} (\S+)$"
)


def request_counters(admin: Cluster) -> dict[tuple[str, str, str], float]:
    """(metric, verb, resource) → value, from the API server's /metrics."""
    response = admin._send("GET", "/metrics", [])
    response.read()
    text = response.data.decode()
    out: dict[tuple[str, str, str], float] = {}
    for line in text.splitlines():
        m = _METRIC.match(line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
        resource = labels.get("resource") or labels.get("kind", "")
        key = (m.group(1), labels.get("verb", ""), resource)
        out[key] = out.get(key, 0.0) + float(m.group(3))
    return out


def counter_delta(before: dict[Any, float], after: dict[Any, float]) -> dict[str, Any]:
    """Requests and response bytes by ``"verb resource"`` between two readings."""
    requests: dict[str, float] = {}
    response_bytes: dict[str, float] = {}
    watch_events: dict[str, float] = {}
    watch_bytes: dict[str, float] = {}
    into_metric = {
        "apiserver_request_total": requests,
        "apiserver_response_sizes_sum": response_bytes,
        "apiserver_watch_events_total": watch_events,
        "apiserver_watch_events_sizes_sum": watch_bytes,
    }
    for key, value in after.items():
        delta = value - before.get(key, 0.0)
        if delta <= 0:
            continue
        metric, verb, resource = key
        into = into_metric[metric]
        label = f"{verb} {resource}" if verb else resource
        into[label] = into.get(label, 0.0) + delta
    return {
        "requests": requests,
        "responseBytes": response_bytes,
        "watchEvents": watch_events,
        "watchEventBytes": watch_bytes,
    }


class Watcher:
    """First time each object of ``res`` in ``namespace`` satisfies ``done``."""

    def __init__(
        self, cluster: Cluster, res: r.Resource, namespace: str | None, done: Callable[[Obj], bool]
    ) -> None:
        self.cluster, self.res, self.namespace, self.done = cluster, res, namespace, done
        self.seen: dict[str, float] = {}
        self._stream: Any = None
        self._stop = threading.Event()
        version = cluster.list(res, namespace, page_size=1).resource_version
        self._version = version
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._stream = self.cluster.watch(
                self.res, self.namespace, resource_version=self._version, timeout_seconds=600
            )
            with contextlib.suppress(Exception):
                for event in self._stream:
                    meta = event.object.get("metadata") or {}
                    if meta.get("resourceVersion"):
                        self._version = meta["resourceVersion"]
                    name = str(meta.get("name", ""))
                    if (
                        event.type != "BOOKMARK"
                        and name not in self.seen
                        and self.done(event.object)
                    ):
                        self.seen[name] = time.monotonic()

    def wait(self, names: set[str], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if names <= self.seen.keys():
                return True
            time.sleep(0.2)
        return False

    def stop(self) -> None:
        self._stop.set()
        if self._stream is not None:
            self._stream.stop()


# --- phases ---------------------------------------------------------------------------------


def synthetic_inventory(pfs: int, vfs: int) -> Inventory:
    with tempfile.TemporaryDirectory() as tmp:
        node = build_synthetic_node(Path(tmp), pfs=pfs, vfs=vfs)
        return scan(ScanConfig(node.sysfs, "scale-node", node.links, node.devlink,
                               node_ips=node.node_ips))  # fmt: skip


def agent_kubeconfig(lab: UpstreamLab, admin: Cluster, server: str) -> Path:
    """The node agent's service-account token as a kubeconfig (as the lab's agent uses)."""
    sa = {"apiVersion": "v1", "kind": "ServiceAccount",
          "metadata": {"name": NODE_SA, "namespace": DRIVER_NAMESPACE}}  # fmt: skip
    with contextlib.suppress(AlreadyExists):
        admin.create(r.SERVICE_ACCOUNTS, sa, DRIVER_NAMESPACE)
    path = f"/api/v1/namespaces/{DRIVER_NAMESPACE}/serviceaccounts/{NODE_SA}/token"
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": 86400}}  # fmt: skip
    token = str(admin.request("POST", path, body=body)["status"]["token"])
    out = lab.layout.kubeconfig("scale-agent")
    ca = lab.layout.pki / "ca.crt"
    out.write_text(configs.kubeconfig(server, ca, None, None, sa_user(NODE_SA), token))
    out.chmod(0o600)
    return out


class Agents:
    """One NodeSlicePublisher per simulated node; ``workers`` API connections serve them."""

    def __init__(self, kubeconfig: Path, names: list[str], inventory: Inventory, workers: int):
        self.workers = workers
        self.clusters = [Cluster(connect(kubeconfig=str(kubeconfig))) for _ in range(workers)]
        self.publishers = [
            NodeSlicePublisher(self.clusters[i % workers], name, lambda: inventory)
            for i, name in enumerate(names)
        ]
        self.watchers: list[NodeSlicePublisher] = []

    def publish_all(self) -> tuple[float, list[list[Obj]]]:
        """Every node's pass once; (seconds, stored slices per node)."""
        results: list[list[Obj]] = [[] for _ in self.publishers]

        def lane(w: int) -> None:
            for i in range(w, len(self.publishers), self.workers):
                results[i] = self.publishers[i].publish()

        start = time.monotonic()
        with ThreadPoolExecutor(self.workers) as pool:
            list(pool.map(lane, range(self.workers)))
        return time.monotonic() - start, results

    def watch_policies(self, kubeconfig: Path, names: list[str], inventory: Inventory) -> None:
        """Every simulated node's DeviceExposurePolicy watch, as the agent runs it (the
        publisher's own watch, each on a connection of its own): what every node's status
        write costs every node."""
        for name in names:
            watcher = NodeSlicePublisher(
                Cluster(connect(kubeconfig=str(kubeconfig))), name, lambda: inventory
            )
            watcher._watch(r.DEVICE_EXPOSURE_POLICIES, prompt=True)
            self.watchers.append(watcher)

    def forget_pools(self) -> None:
        """Each publisher's copies of its stored slices dropped: its next pass reads its
        pool whole, as every pass did before the metadata check (the side-by-side baseline
        of a rest pass)."""
        for publisher in self.publishers:
            publisher._stored_slices = None

    def watch_claims(self, timeout: float) -> float:
        """Every simulated node's ResourceClaim watch (the publisher's own, on the policy
        watcher's connection) feeding the view its passes read; seconds until all synced."""
        start = time.monotonic()
        for watcher, publisher in zip(self.watchers, self.publishers, strict=True):
            watcher.claim_pins = publisher.claim_pins
            watcher._watch(r.RESOURCE_CLAIMS)
        deadline = start + timeout
        while not all(p.claim_pins.synced for p in self.publishers):
            if time.monotonic() > deadline:
                raise RuntimeError("claim watches not synced")
            time.sleep(0.2)
        return time.monotonic() - start

    def close(self) -> None:
        for w in self.watchers:
            w.stop()
            w.cluster.close()
        for c in self.clusters:
            c.close()


class StatusWriteFailures(logging.Handler):
    """Counts the publishers' policy-status writes that gave up (``policy-status-failed``:
    the API refused, or the conflicts did not stop within the write's attempts)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "policy-status-failed" in record.getMessage():
            self.count += 1


def create_nodes(admin: Cluster, names: list[str], report: Callable[[str], str]) -> None:
    def one(name: str) -> None:
        admin.create(r.NODES, node_object(name, report(name)))
        admin.patch(r.NODES, name, node_status(), status=True)
        # admission taints a new Node not-ready; with no node lifecycle controller to lift it
        # once the node reports Ready, the benchmark does (a kubelet-less node never would)
        admin.patch(r.NODES, name, {"spec": {"taints": None}})

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(one, names))


def wait_labelled(admin: Cluster, count: int, timeout: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        nodes = admin.list(r.NODES, label_selector=f"{SIM_LABEL}=true").items
        if sum(1 for n in nodes if capability_labels(n)) >= count:
            return time.monotonic() - start
        time.sleep(0.5)
    raise RuntimeError(f"nodes not labelled capable after {timeout:.0f}s")


def ensure_namespace(admin: Cluster, name: str) -> None:
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    with contextlib.suppress(AlreadyExists):
        admin.create(r.NAMESPACES, ns)
    sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default"}}
    with contextlib.suppress(AlreadyExists):
        admin.create(r.SERVICE_ACCOUNTS, sa, name)


def schedule(
    admin: Cluster,
    kubeconfig: Path,
    namespace: str,
    claims: list[Obj],
    scheduler_pid: int,
    timeout: float,
) -> dict[str, Any]:
    """Create the claims, then one Pod per claim from 4 threads; wait until all are bound."""
    ensure_namespace(admin, namespace)
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda c: admin.create(r.RESOURCE_CLAIMS, c, namespace), claims))
    watcher = Watcher(
        admin, r.PODS, namespace, lambda p: bool((p.get("spec") or {}).get("nodeName"))
    )
    names = [f"p{i}" for i in range(len(claims))]
    created: dict[str, float] = {}
    cpu0 = cpu_seconds(scheduler_pid)
    clients = [Cluster(connect(kubeconfig=str(kubeconfig))) for _ in range(4)]

    def lane(w: int) -> None:
        for i in range(w, len(claims), 4):
            created[names[i]] = time.monotonic()
            clients[w].create(
                r.PODS, pod(names[i], namespace, claims[i]["metadata"]["name"]), namespace
            )

    start = time.monotonic()
    try:
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(lane, range(4)))
        created_s = time.monotonic() - start
        complete = watcher.wait(set(names), timeout)
    finally:
        watcher.stop()
        for c in clients:
            c.close()
    cpu = cpu_seconds(scheduler_pid) - cpu0
    bound = {n: watcher.seen[n] - created[n] for n in names if n in watcher.seen}
    last = max(watcher.seen[n] for n in bound) if bound else start
    stored = admin.list(r.RESOURCE_CLAIMS, namespace).items
    allocated = sum(1 for c in stored if (c.get("status") or {}).get("allocation"))
    latencies = [v * 1000 for v in bound.values()]
    nodes_used = len(
        {p["spec"].get("nodeName") for p in admin.list(r.PODS, namespace).items} - {None}
    )
    return {
        "pods": len(claims),
        "bound": len(bound),
        "allocated": allocated,
        "complete": complete,
        "createSeconds": round(created_s, 2),
        "claimsPerSecond": round(allocated / max(last - start, 1e-9), 2),
        "boundP50Ms": round(percentile(latencies, 50), 1),
        "boundP99Ms": round(percentile(latencies, 99), 1),
        "schedulerCpuSeconds": round(cpu, 2),
        "nodesUsed": nodes_used,
    }


def topologies(admin: Cluster, controller_pid: int, count: int, timeout: float) -> dict[str, Any]:
    """Apply ``count`` NetworkTopologies; apply → Ready=True per topology, controller CPU."""

    def ready(t: Obj) -> bool:
        meta = t.get("metadata") or {}
        for cond in (t.get("status") or {}).get("conditions") or ():
            if cond.get("type") == "Ready" and cond.get("status") == "True":
                observed = cond.get("observedGeneration", meta.get("generation"))
                return bool(observed == meta.get("generation"))
        return False

    watcher = Watcher(admin, r.NETWORK_TOPOLOGIES, None, ready)
    names = [f"scale-t{i}" for i in range(count)]
    applied: dict[str, float] = {}
    cpu0 = cpu_seconds(controller_pid)
    start = time.monotonic()
    try:
        for name in names:
            applied[name] = time.monotonic()
            admin.create(r.NETWORK_TOPOLOGIES, macvlan_topology(name))
        complete = watcher.wait(set(names), timeout)
    finally:
        watcher.stop()
    total = time.monotonic() - start
    cpu = cpu_seconds(controller_pid) - cpu0
    latencies = [(watcher.seen[n] - applied[n]) * 1000 for n in names if n in watcher.seen]
    return {
        "topologies": count,
        "ready": len(latencies),
        "complete": complete,
        "seconds": round(total, 2),
        "readyP50Ms": round(percentile(latencies, 50), 1),
        "readyP99Ms": round(percentile(latencies, 99), 1),
        "cpuSeconds": round(cpu, 2),
        "cpuMsPerTopology": round(cpu * 1000 / max(count, 1), 1),
        "memoryKiB": memory_kib(controller_pid),
    }


def at_rest(
    admin: Cluster, controller_pid: int, apiserver_pid: int, seconds: float
) -> dict[str, Any]:
    """The controller and the API server with nothing changing for ``seconds`` (every
    topology Ready, every node published): CPU per minute of each, and the API requests
    per minute the interval saw (the controller's resyncs, the simulated nodes' idle
    watches; no pass of theirs runs meanwhile)."""
    before = request_counters(admin)
    c0, a0 = cpu_seconds(controller_pid), cpu_seconds(apiserver_pid)
    time.sleep(seconds)
    per_min = 60.0 / seconds
    delta = counter_delta(before, request_counters(admin))
    return {
        "seconds": seconds,
        "controllerCpuSPerMin": round((cpu_seconds(controller_pid) - c0) * per_min, 2),
        "apiserverCpuSPerMin": round((cpu_seconds(apiserver_pid) - a0) * per_min, 2),
        "requestsPerMin": {k: round(v * per_min, 1) for k, v in sorted(delta["requests"].items())
                           if not k.startswith("WATCH")},
        "responseBytesPerMin": round(sum(delta["responseBytes"].values()) * per_min),
    }  # fmt: skip


def slice_figures(stored: list[list[Obj]]) -> dict[str, Any]:
    sizes = [len(json.dumps(s, separators=(",", ":"))) for node in stored for s in node]
    per_node = [sum(len(json.dumps(s, separators=(",", ":"))) for s in node) for node in stored]
    devices = sum(len(s["spec"].get("devices") or []) for node in stored for s in node)
    return {
        "slices": len(sizes),
        "slicesPerNode": round(len(sizes) / max(len(stored), 1), 1),
        "devices": devices,
        "bytesPerSliceMean": round(statistics.mean(sizes)) if sizes else 0,
        "bytesPerSliceMax": max(sizes) if sizes else 0,
        "bytesPerNode": round(statistics.mean(per_node)) if per_node else 0,
    }


def rest_pass(admin: Cluster, agents: Agents, nodes: int) -> dict[str, Any]:
    """One pass of every node with nothing to change (a resync), and the API server's count
    of requests and response bytes meanwhile, per node (the controller's and scheduler's
    own traffic during the pass included)."""
    before = request_counters(admin)
    seconds, _ = agents.publish_all()
    delta = counter_delta(before, request_counters(admin))
    return {
        "seconds": round(seconds, 2),
        "requestsPerNode": {k: round(v / nodes, 2) for k, v in sorted(delta["requests"].items())},
        "responseBytesPerNode": {
            k: round(v / nodes) for k, v in sorted(delta["responseBytes"].items())
        },
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    state = Path(args.state_dir or tempfile.mkdtemp(prefix="dmn-scale-"))
    lab = UpstreamLab(state, with_node=False, timeout=300)
    server = lab.up()
    out: dict[str, Any] = {"nodes": args.nodes, "pfs": args.pfs, "vfsPerPf": args.vfs,
                           "workers": args.workers, "identity": IDENTITY}  # fmt: skip
    agents: Agents | None = None
    admin = lab.admin()
    try:
        binary = build.bin_dir("kubernetes") / "kube-scheduler"
        lab.procs.start("kube-scheduler", configs.scheduler_argv(binary, lab.layout))
        for doc in lab_policies():  # the lab node's own (lab links): no simulated node has them
            admin.delete(r.DEVICE_EXPOSURE_POLICIES, doc["metadata"]["name"])
        for doc in policies(args.children):
            admin.apply(doc)
        admin.apply(macvlan_topology("scale-macvlan"))
        admin.apply(vf_topology("scale-vf"))
        admin.apply(plain_class())
        settled = wait_settled(admin, ["scale-macvlan", "scale-vf"], 120)
        if not all(t.ready == "True" for t in settled):
            raise RuntimeError(f"topologies not Ready: {settled}")
        classes = {t.name: t.device_classes[0] for t in settled}
        revisions = admin.list(r.NETWORK_TOPOLOGY_REVISIONS).items

        inventory = synthetic_inventory(args.pfs, args.vfs)
        names = [f"sim-{i:04d}" for i in range(args.nodes)]
        t = time.monotonic()
        create_nodes(admin, names, lambda n: capability_report(n, revisions))
        out["nodesCreateS"] = round(time.monotonic() - t, 2)
        out["nodesLabelledS"] = round(wait_labelled(admin, args.nodes, 300), 2)

        kubeconfig = agent_kubeconfig(lab, admin, server)
        agents = Agents(kubeconfig, names, inventory, args.workers)
        apiserver_pid = lab.procs.get("kube-apiserver").pid  # type: ignore[union-attr]
        cpu0 = cpu_seconds(apiserver_pid)
        failures = StatusWriteFailures()
        logging.getLogger("dmn.agent.personas.status_report").addHandler(failures)
        publish_s, stored = agents.publish_all()
        out["publish_s"] = round(publish_s, 2)
        out["publishStatusWriteFailures"] = failures.count
        out["publishApiserverCpuS"] = round(cpu_seconds(apiserver_pid) - cpu0, 2)
        out.update(slice_figures(stored))

        # what a pass read before the publisher listed by field selector (every node's pool)
        everything = admin._send("GET", r.RESOURCE_SLICES.path(None), [])
        everything.read()
        out["listAllSlicesBytes"] = len(everything.data)
        out["restPass"] = rest_pass(admin, agents, args.nodes)

        agents.watch_policies(kubeconfig, names, inventory)
        time.sleep(5)  # the watches' first lists
        admin.apply(policies(args.children // 2)[0])
        cpu0 = cpu_seconds(apiserver_pid)
        failures.count = 0
        counters = request_counters(admin)
        republish_s, again = agents.publish_all()
        # the controller's last status write (its window) and its events delivered
        time.sleep(REPORT_WINDOW_MAX_S + 5)
        delta = counter_delta(counters, request_counters(admin))
        out["republishNodeWatchEvents"] = round(
            sum(v for k, v in delta["watchEvents"].items() if k.lower() in ("node", "nodes"))
        )
        out["republishNodeWatchBytes"] = round(
            sum(v for k, v in delta["watchEventBytes"].items() if k.lower() in ("node", "nodes"))
        )
        out["republishPolicyStatus"] = {
            p["metadata"]["name"]: {
                k: (p.get("status") or {}).get(k)
                for k in ("reportingNodes", "readyNodes", "exposedDevices")
            }
            | {"listed": len((p.get("status") or {}).get("nodes") or [])}
            for p in admin.list(r.DEVICE_EXPOSURE_POLICIES).items
        }
        policy = r.DEVICE_EXPOSURE_POLICIES.plural
        out["republishPolicyWatchEvents"] = round(
            sum(v for k, v in delta["watchEvents"].items() if policy in k.lower()
                or "deviceexposurepolicy" in k.lower())
        )  # fmt: skip
        out["republishPolicyWatchBytes"] = round(
            sum(v for k, v in delta["watchEventBytes"].items() if policy in k.lower()
                or "deviceexposurepolicy" in k.lower())
        )  # fmt: skip
        out["republishPolicyRequests"] = {
            k: round(v) for k, v in delta["requests"].items() if policy in k
        }
        out["republish_s"] = round(republish_s, 2)
        out["republishStatusWriteFailures"] = failures.count
        out["republishApiserverCpuS"] = round(cpu_seconds(apiserver_pid) - cpu0, 2)
        generations = {s["spec"]["pool"]["generation"] for node in again for s in node}
        out["republishGenerations"] = sorted(generations)

        scheduler_pid = lab.procs.get("kube-scheduler").pid  # type: ignore[union-attr]
        ours = [our_claim(f"c{i}", "scale-ours", classes["scale-macvlan"], classes["scale-vf"])
                for i in range(args.pods)]  # fmt: skip
        plain = [plain_claim(f"c{i}", "scale-plain") for i in range(args.pods)]
        out["ours"] = schedule(admin, kubeconfig_admin(lab), "scale-ours", ours, scheduler_pid,
                               args.timeout)  # fmt: skip
        out["baseline"] = schedule(admin, kubeconfig_admin(lab), "scale-plain", plain,
                                   scheduler_pid, args.timeout)  # fmt: skip
        # side by side: a pass as before the claim view and the pool's metadata check (the
        # pool read whole, the claims listed: no claim watch yet), then as every pass now
        # runs, with each node's own claim watch synced
        agents.forget_pools()
        out["restPassWithClaims"] = rest_pass(admin, agents, args.nodes)
        counters = request_counters(admin)
        out["claimWatchesSyncedS"] = round(agents.watch_claims(args.timeout), 2)
        delta = counter_delta(counters, request_counters(admin))
        out["claimWatchStart"] = {
            "watchEvents": round(sum(v for k, v in delta["watchEvents"].items()
                                     if "resourceclaim" in k.lower())),
            "listBytesPerNode": round(sum(v for k, v in delta["responseBytes"].items()
                                          if "resourceclaims" in k) / args.nodes),
        }  # fmt: skip
        out["restPassWithClaimsWatched"] = rest_pass(admin, agents, args.nodes)
        controller_pid = lab.procs.get("dmn-controller").pid  # type: ignore[union-attr]
        out["controller"] = topologies(admin, controller_pid, args.topologies, args.timeout)
        time.sleep(30.0)  # the topologies' last reconciles after their own status writes
        out["controllerAtRest"] = at_rest(admin, controller_pid, apiserver_pid, 60.0)
        out["controllerAtEndKiB"] = memory_kib(controller_pid)
        out["apiserverAtEndKiB"] = memory_kib(apiserver_pid)
    except Exception as exc:  # the figures measured so far are still reported
        log.exception("event=scale-run-failed")
        out["error"] = repr(exc)
    finally:
        if agents is not None:
            agents.close()
        admin.close()
        problems = lab.down()
        if problems:
            out["downProblems"] = problems
        elif not args.state_dir:
            shutil.rmtree(state, ignore_errors=True)
    out["claims_per_s"] = out.get("ours", {}).get("claimsPerSecond")
    out["bound_p50_ms"] = out.get("ours", {}).get("boundP50Ms")
    out["bound_p99_ms"] = out.get("ours", {}).get("boundP99Ms")
    out["baseline_claims_per_s"] = out.get("baseline", {}).get("claimsPerSecond")
    out["controller_ready_p99_ms"] = out.get("controller", {}).get("readyP99Ms")
    return out


def kubeconfig_admin(lab: UpstreamLab) -> Path:
    return lab.admin_kubeconfig


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--pods", type=int, default=200)
    parser.add_argument("--topologies", type=int, default=100)
    parser.add_argument("--pfs", type=int, default=4)
    parser.add_argument("--vfs", type=int, default=64)
    parser.add_argument("--children", type=int, default=64)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--state-dir")
    parser.add_argument("--json", action="store_true")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    result = run(args)
    if args.json:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
    else:
        for key in SUMMARY:
            sys.stdout.write(f"{key:<24} {result.get(key)}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
