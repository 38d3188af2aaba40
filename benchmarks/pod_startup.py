"""Pod startup and teardown on the upstream lab node: this driver beside dranet and Multus.

What a user sees is Pod startup on a real node, so every system runs on the same upstream
lab (kube-apiserver, scheduler, kubelet v1.37.2, containerd 2.3.7), in one run:

* ``floor``: a busybox Pod with no secondary interface (the node's own cost);
* ``dmn``: one claim of this driver's ``shared-macvlan`` (a macvlan ``net1`` on a shared
  lab link, its address from the IPPool ``macvlan-v4`` through the API server);
* ``dranet``: one claim of dranet v1.0.1 (:class:`~dmn.lab.upstream.dranet.DranetPeer`),
  renamed ``net1`` by its opaque config. dranet has no shared-parent mode: it moves a whole
  link into the Pod, so its figures are of its native mode. Its whole-link mode is also
  compared with ours (``lab-host-device``, ``host-cni`` mode ``kernel``) one Pod at a time
  under ``whole_link``: our agent is given two lab links, so at most two such Pods run;
* ``multus``: Multus thin (the lab's ``--multus``) with a NetworkAttachmentDefinition of
  the reference ``macvlan`` plugin (bridge mode on the lab link ``dmnlab0``) and
  ``host-local`` IPAM (its data directory below the lab). Multus is in the Pod path only
  while this system runs: a user who picks Multus pays for the thin plugin on every Pod, so
  its added latency is over the same floor as the others (Multus off).

Each round runs every system twice: ``--pods`` Pods created at once (a burst), then
``--serial`` Pods one at a time (each waits for the previous to run and go). Rounds
rotate the order of the systems so machine noise falls on each alike; figures are medians
over rounds, with the spread ``(max - min) / median`` of the round values.

Per Pod: **startup** = from just before its create call to the first watch event showing
it ``Running``; **teardown** = from just before its delete call to its ``DELETED`` event
(``terminationGracePeriodSeconds: 1``; busybox ``sleep`` ignores SIGTERM, so every system
pays the same second). **added** = a system's percentile minus the floor's of the same
round. **CPU per Pod** = the CPU time (user + system, with reaped children: the CNI
plugins containerd runs) of kubelet, containerd, our node agent and dranet over the
system's burst (start and teardown), divided by the Pods; every system's figure includes
the others' idle daemons alike. **left behind** after each burst's teardown: for ``dmn``
IPAllocations above the baseline, for ``dranet`` peer links missing from the host, for
``multus`` host-local reservations; for all, ResourceClaims generated for the Pods.

Runs on a lab of its own (``--lab-root``, torn down at the end); bring it up under the
machine's heavy lock, which the whole run holds::

    flock /tmp/dmn-heavy.lock .venv/bin/python benchmarks/pod_startup.py --pods 20 --json

``--json`` prints one object: ``systems`` maps ``floor``, ``dmn``, ``dranet``, ``multus``
to ``startup_p50_ms``, ``startup_p90_ms``, ``startup_p99_ms``, ``added_p50_ms``,
``added_p99_ms``, ``teardown_p50_ms``, ``cpu_ms_per_pod`` (burst), ``serial`` (the same of
the one-at-a-time Pods), ``spread`` and ``left_behind``; ``whole_link`` maps ``dmn_whole``
and ``dranet`` to the one-at-a-time figures. ``--keep-logs DIR`` keeps the lab's logs and
``--trace FILE`` each Pod's wall-clock marks, to set against containerd's and kubelet's
log lines. Never a timed test: the e2e smoke
(``tests/e2e/test_upstream_pod_startup.py``) runs a few Pods and asserts only that each
system's Pods get their interface and that the object has its keys.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dmn.api.cluster import Cluster, NotFound  # noqa: E402
from dmn.api.cluster import resources as r  # noqa: E402
from dmn.api.identity import DRIVER as OUR_DRIVER  # noqa: E402
from dmn.lab import manifests  # noqa: E402
from dmn.lab.demo import TOPOLOGIES, apply_pools, wait_settled  # noqa: E402
from dmn.lab.node import HOST_DEVICE_TOPOLOGY, policies  # noqa: E402
from dmn.lab.pod_demo import NAMESPACE, claim_template, pod_manifest  # noqa: E402
from dmn.lab.upstream import build  # noqa: E402
from dmn.lab.upstream.cluster import UpstreamLab  # noqa: E402
from dmn.lab.upstream.dranet import DranetPeer  # noqa: E402
from dmn.lab.upstream.driver import LAB_LINKS  # noqa: E402
from dmn.lab.upstream.images import BUSYBOX_IMAGE  # noqa: E402
from dmn.lab.upstream.multus_configs import (  # noqa: E402
    NETWORK_ATTACHMENT_DEFINITIONS,
    NETWORKS_ANNOTATION,
    network_attachment_definition,
)

SYSTEMS = ("floor", "dmn", "dranet", "multus")
WHOLE = ("dmn_whole", "dranet")
LABEL = "dmn-bench"
IF_NAME = "net1"
DMN_TEMPLATE = "shared-macvlan"
WHOLE_TEMPLATE = "lab-host-device"
DRANET_TEMPLATE = "bench-dranet"
NAD = "bench-macvlan"
NAD_RANGE = "10.72.0.0/24"
NODE_LAB_LOCK = Path("/run/lock/dmn-upstream-node.lock")
NODE_PROCESSES = ("kubelet", "containerd", "dmn-node", "dranet")
WAIT = 300.0


# --- the lab -----------------------------------------------------------------------------


@dataclass
class Bench:
    """A running lab prepared for every system (classes, templates, the NAD, dranet)."""

    lab: UpstreamLab
    admin: Cluster
    peer: DranetPeer
    host_local_dir: Path
    multus_on: bool = False
    ip_baseline: int = 0

    def kubectl(self, *args: str) -> subprocess.CompletedProcess[str]:
        binary = build.bin_dir("kubernetes") / "kubectl"
        argv = [str(binary), "--kubeconfig", str(self.lab.admin_kubeconfig), "-n", NAMESPACE]
        return subprocess.run([*argv, *args], capture_output=True, text=True, timeout=60)


def macvlan_policy(children: int) -> dict[str, Any]:
    """The lab's macvlan exposure with ``children`` per link: a burst of N Pods needs N/2
    children on each of the two lab links (the lab ships 4)."""
    doc = next(p for p in policies() if p["metadata"]["name"] == "lab-link-macvlan")
    doc["spec"]["exposure"]["capacity"] = {"children": {"value": str(children)}}
    return doc


def _children_published(admin: Cluster, children: int) -> bool:
    values = [
        (d.get("capacity") or {}).get(f"{OUR_DRIVER}/children", {}).get("value")
        for s in admin.list(r.RESOURCE_SLICES).items
        if s["spec"].get("driver") == OUR_DRIVER
        for d in s["spec"].get("devices") or []
    ]
    return values.count(str(children)) >= len(LAB_LINKS)


def prepare(lab: UpstreamLab, pods: int) -> Bench:
    """Pools, topologies (``shared-macvlan`` with enough children, ``lab-host-device``),
    their claim templates, dranet with a link per Pod, its template, the Multus NAD."""
    admin = lab.admin()
    apply_pools(admin)
    docs = manifests.load(TOPOLOGIES)
    for doc in docs:
        if doc.doc["metadata"]["name"] == DMN_TEMPLATE:
            admin.apply(doc.doc)
    admin.apply(HOST_DEVICE_TOPOLOGY)
    settled = wait_settled(admin, [DMN_TEMPLATE, WHOLE_TEMPLATE], 120.0)
    if not all(t.ready == "True" for t in settled):
        raise RuntimeError(f"topologies not Ready: {settled}")
    for t in settled:
        admin.apply(claim_template(t.name, t.device_classes[0]))
    children = max(4, math.ceil(pods / len(LAB_LINKS)))
    admin.apply(macvlan_policy(children))
    _wait(lambda: _children_published(admin, children), 120.0, "children in our slices")
    peer = DranetPeer(lab, pairs=max(1, math.ceil(pods / 2)))
    peer.start()
    peer.add_claim_template(DRANET_TEMPLATE, NAMESPACE, if_name=IF_NAME)
    host_local = lab.layout.root / "bench-host-local"
    bench = Bench(lab, admin, peer, host_local)
    bench.ip_baseline = len(admin.list(r.IP_ALLOCATIONS).items)
    return bench


def set_multus(bench: Bench, on: bool) -> None:
    """Multus in (or out of) every Pod's path; the NAD is created once its CRD exists."""
    if on == bench.multus_on:
        return
    if on:
        bench.lab.enable_multus()
        if not _nad_exists(bench.admin):
            config = _nad_config(bench)
            bench.admin.apply(network_attachment_definition(NAD, NAMESPACE, config))
    else:
        bench.lab.disable_multus()
    bench.multus_on = on


def _nad_config(bench: Bench) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": NAD,
        "type": "macvlan",
        "master": LAB_LINKS[0],
        "mode": "bridge",
        "ipam": {"type": "host-local", "subnet": NAD_RANGE, "dataDir": str(bench.host_local_dir)},
    }


def _nad_exists(admin: Cluster) -> bool:
    try:
        admin.get(NETWORK_ATTACHMENT_DEFINITIONS, NAD, NAMESPACE)
    except NotFound:
        return False
    return True


def pod_for(system: str, name: str) -> dict[str, Any]:
    if system == "dmn":
        doc = pod_manifest(name, DMN_TEMPLATE, BUSYBOX_IMAGE)
    elif system == "dmn_whole":
        doc = pod_manifest(name, WHOLE_TEMPLATE, BUSYBOX_IMAGE)
    elif system == "dranet":
        doc = pod_manifest(name, DRANET_TEMPLATE, BUSYBOX_IMAGE)
    else:
        doc = pod_manifest(name, "unused", BUSYBOX_IMAGE)
        del doc["spec"]["resourceClaims"]
        del doc["spec"]["containers"][0]["resources"]
        if system == "multus":
            doc["metadata"]["annotations"] = {NETWORKS_ANNOTATION: NAD}
    doc["metadata"]["labels"] = {LABEL: system}
    return doc


# --- timing ------------------------------------------------------------------------------


class PodWatch:
    """First ``Running`` and ``DELETED`` time (monotonic) of each benchmark Pod, from one
    watch the whole run (re-listed when the server ends it)."""

    def __init__(self, lab: UpstreamLab) -> None:
        self.admin = lab.admin()
        self.running: dict[str, float] = {}
        self.gone: dict[str, float] = {}
        self._lock = threading.Lock()
        self._stream: Any = None
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._ready.wait(30)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                listed = self.admin.list(r.PODS, NAMESPACE, label_selector=LABEL)
                now = time.monotonic()
                present = {p["metadata"]["name"] for p in listed.items}
                with self._lock:
                    for name in set(self.running) - present:
                        self.gone.setdefault(name, now)
                for pod in listed.items:
                    self._saw("MODIFIED", pod, now)
                self._stream = self.admin.watch(
                    r.PODS,
                    NAMESPACE,
                    resource_version=listed.resource_version,
                    label_selector=LABEL,
                )
                self._ready.set()
                for event in self._stream:
                    if event.type != "BOOKMARK":
                        self._saw(event.type, event.object, time.monotonic())
            except Exception:  # a broken watch is re-listed
                time.sleep(0.2)

    def _saw(self, kind: str, pod: dict[str, Any], now: float) -> None:
        name = pod["metadata"]["name"]
        with self._lock:
            if kind == "DELETED":
                self.gone.setdefault(name, now)
            elif (pod.get("status") or {}).get("phase") == "Running":
                self.running.setdefault(name, now)

    def forget(self, names: Sequence[str]) -> None:
        with self._lock:
            for n in names:
                self.running.pop(n, None)
                self.gone.pop(n, None)

    def wait(self, table: str, names: Sequence[str], what: str) -> None:
        seen = self.running if table == "running" else self.gone
        _wait(lambda: all(n in seen for n in names), WAIT, what)

    def stop(self) -> None:
        self._stop.set()
        if self._stream is not None:
            self._stream.stop()
        self._thread.join(10)
        self.admin.close()


def _wait(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.1)


def node_cpu_ms(lab: UpstreamLab) -> float:
    """User + system CPU (with reaped children) of the node's processes, in ms."""
    ticks = 0
    hz = os.sysconf("SC_CLK_TCK")
    for record in lab.procs.load():
        if record.name not in NODE_PROCESSES or not record.alive():
            continue
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{record.pid}/stat").read_text().rsplit(")", 1)[1].split()
            ticks += sum(int(f) for f in fields[11:15])
    return ticks * 1000.0 / hz


#: per Pod: wall-clock seconds of create call, Running seen, delete call, DELETED seen
TRACE: list[dict[str, Any]] = []


def _wall(mono: float) -> float:
    return time.time() - (time.monotonic() - mono)


@dataclass
class Batch:
    startup_ms: list[float] = field(default_factory=list)
    teardown_ms: list[float] = field(default_factory=list)
    cpu_ms_per_pod: float = 0.0
    interfaces: dict[str, bool] = field(default_factory=dict)
    left_behind: list[str] = field(default_factory=list)


def has_interface(bench: Bench, name: str) -> bool:
    return bench.kubectl("exec", name, "--", "ip", "-o", "link", "show", IF_NAME).returncode == 0


def run_burst(
    bench: Bench, watch: PodWatch, system: str, names: Sequence[str], check: Sequence[str]
) -> Batch:
    """Create ``names`` at once, wait until all run, check ``check`` have ``net1``, delete
    all at once and wait until they (and their generated claims) are gone."""
    batch = Batch()
    watch.forget(names)
    created: dict[str, float] = {}
    cpu0 = node_cpu_ms(bench.lab)

    def create(name: str) -> None:
        created[name] = time.monotonic()
        bench.admin.create(r.PODS, pod_for(system, name), NAMESPACE)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, names))
    watch.wait("running", names, f"{system} Pods Running")
    batch.startup_ms = [(watch.running[n] - created[n]) * 1000 for n in names]
    if system != "floor":
        batch.interfaces = {n: has_interface(bench, n) for n in check}
    deleted: dict[str, float] = {}

    def delete(name: str) -> None:
        deleted[name] = time.monotonic()
        bench.admin.delete(r.PODS, name, NAMESPACE)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(delete, names))
    watch.wait("gone", names, f"{system} Pods gone")
    batch.teardown_ms = [(watch.gone[n] - deleted[n]) * 1000 for n in names]
    for n in names:
        TRACE.append(
            {
                "pod": n,
                "created": _wall(created[n]),
                "running": _wall(watch.running[n]),
                "deleted": _wall(deleted[n]),
                "gone": _wall(watch.gone[n]),
            }
        )
    batch.cpu_ms_per_pod = (node_cpu_ms(bench.lab) - cpu0) / len(names)
    batch.left_behind = left_behind(bench, system)
    return batch


def run_serial(bench: Bench, watch: PodWatch, system: str, names: Sequence[str]) -> Batch:
    """One Pod at a time: each is created, runs, is deleted and gone before the next."""
    batch = Batch()
    for name in names:
        one = run_burst(bench, watch, system, [name], [name] if name == names[0] else [])
        batch.startup_ms += one.startup_ms
        batch.teardown_ms += one.teardown_ms
        batch.interfaces.update(one.interfaces)
        batch.left_behind += one.left_behind
        batch.cpu_ms_per_pod += one.cpu_ms_per_pod / len(names)
    return batch


def _owned_claims(admin: Cluster) -> list[str]:
    return [
        c["metadata"]["name"]
        for c in admin.list(r.RESOURCE_CLAIMS, NAMESPACE).items
        if c["metadata"].get("ownerReferences")
    ]


def left_behind(bench: Bench, system: str) -> list[str]:
    """What the system left once its Pods are gone (waits a little for the garbage
    collector and asynchronous releases; what is still there then is reported)."""
    if system == "floor" or system == "multus":
        checks: list[Callable[[], list[str]]] = []
    else:
        checks = [lambda: [f"claim {c}" for c in _owned_claims(bench.admin)]]
    if system in ("dmn", "dmn_whole"):
        checks.append(
            lambda: [
                f"ipallocations {n}"
                for n in [len(bench.admin.list(r.IP_ALLOCATIONS).items)]
                if n > bench.ip_baseline
            ]
        )
    if system == "dranet":
        checks.append(
            lambda: [f"link {link} not in the host" for link in _missing(bench.peer.links)]
        )
    if system == "multus":
        checks.append(lambda: [f"host-local {p.name}" for p in _reservations(bench.host_local_dir)])
    found: list[str] = []
    deadline = time.monotonic() + 60
    while True:
        found = [item for check in checks for item in check()]
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.5)


def _missing(links: Sequence[str]) -> list[str]:
    from pyroute2 import IPRoute

    with IPRoute() as ip:
        return [n for n in links if not ip.link_lookup(ifname=n)]


def _reservations(data_dir: Path) -> list[Path]:
    """host-local's files that name an address (not its lock or last-reserved marker)."""
    if not data_dir.is_dir():
        return []
    return [
        p
        for p in data_dir.rglob("*")
        if p.is_file() and p.name != "lock" and not p.name.startswith("last_reserved_ip")
    ]


# --- rounds and figures ------------------------------------------------------------------


def pct(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def figures(batch: Batch) -> dict[str, float]:
    return {
        "startup_p50_ms": pct(batch.startup_ms, 50),
        "startup_p90_ms": pct(batch.startup_ms, 90),
        "startup_p99_ms": pct(batch.startup_ms, 99),
        "teardown_p50_ms": pct(batch.teardown_ms, 50),
        "cpu_ms_per_pod": batch.cpu_ms_per_pod,
    }


def with_added(rounds: list[dict[str, float]], floors: list[dict[str, float]]) -> None:
    for fig, floor in zip(rounds, floors, strict=True):
        fig["added_p50_ms"] = fig["startup_p50_ms"] - floor["startup_p50_ms"]
        fig["added_p99_ms"] = fig["startup_p99_ms"] - floor["startup_p99_ms"]


def summary(rounds: list[dict[str, float]]) -> dict[str, Any]:
    """Median over rounds of each figure, and its spread ((max - min) / |median|)."""
    out: dict[str, Any] = {}
    spread: dict[str, float] = {}
    for key in rounds[0]:
        values = [r[key] for r in rounds]
        median = statistics.median(values)
        out[key] = round(median, 1)
        spread[key] = round((max(values) - min(values)) / abs(median), 3) if median else 0.0
    out["spread"] = spread
    return out


def order_for(round_no: int, systems: Sequence[str]) -> list[str]:
    """The systems rotated by the round number (round 0 keeps their order)."""
    k = round_no % len(systems)
    return [*systems[k:], *systems[:k]]


def measure(
    bench: Bench, pods: int, serial: int, rounds: int, log: Callable[[str], None]
) -> dict[str, Any]:
    watch = PodWatch(bench.lab)
    burst: dict[str, list[dict[str, float]]] = {s: [] for s in SYSTEMS}
    one: dict[str, list[dict[str, float]]] = {s: [] for s in (*SYSTEMS, "dmn_whole")}
    interfaces: dict[str, dict[str, bool]] = {s: {} for s in (*SYSTEMS, "dmn_whole")}
    leftovers: dict[str, list[str]] = {s: [] for s in (*SYSTEMS, "dmn_whole")}
    try:
        for rnd in range(rounds):
            for system in order_for(rnd, SYSTEMS):
                set_multus(bench, system == "multus")
                names = [f"b-{system.replace('_', '-')}-{rnd}-{i}" for i in range(pods)]
                batch = run_burst(bench, watch, system, names, names)
                burst[system].append(figures(batch))
                interfaces[system].update(batch.interfaces)
                leftovers[system] += batch.left_behind
                log(f"round {rnd} burst {system}: {burst[system][-1]}")
            set_multus(bench, False)
            for system in order_for(rnd, (*SYSTEMS, "dmn_whole")):
                set_multus(bench, system == "multus")
                names = [f"s-{system.replace('_', '-')}-{rnd}-{i}" for i in range(serial)]
                batch = run_serial(bench, watch, system, names)
                one[system].append(figures(batch))
                interfaces[system].update(batch.interfaces)
                leftovers[system] += batch.left_behind
                log(f"round {rnd} serial {system}: {one[system][-1]}")
            set_multus(bench, False)
    finally:
        watch.stop()
    for table in (burst, one):
        for figs in table.values():
            if figs:
                with_added(figs, table["floor"])
    systems: dict[str, Any] = {}
    for system in SYSTEMS:
        entry = summary(burst[system])
        entry["serial"] = summary(one[system])
        entry["interfaces_ok"] = all(interfaces[system].values())
        entry["interfaces_checked"] = len(interfaces[system])
        entry["left_behind"] = leftovers[system]
        systems[system] = entry
    whole = {
        "dmn_whole": {
            **summary(one["dmn_whole"]),
            "interfaces_ok": all(interfaces["dmn_whole"].values()),
            "interfaces_checked": len(interfaces["dmn_whole"]),
            "left_behind": leftovers["dmn_whole"],
        },
        "dranet": systems["dranet"]["serial"],
    }
    return {
        "pods": pods,
        "serial": serial,
        "rounds": rounds,
        "systems": systems,
        "whole_link": whole,
    }


# --- the run -----------------------------------------------------------------------------


@contextlib.contextmanager
def lab_turn() -> Iterator[None]:
    """The machine-wide node-lab lock the e2e sessions take (one node address per host)."""
    NODE_LAB_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with NODE_LAB_LOCK.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def teardown(bench: Bench) -> None:
    for pod in bench.admin.list(r.PODS, NAMESPACE, label_selector=LABEL).items:
        with contextlib.suppress(NotFound):
            bench.admin.delete(r.PODS, pod["metadata"]["name"], NAMESPACE)
    _wait(lambda: not bench.admin.list(r.PODS, NAMESPACE, label_selector=LABEL).items, 120, "Pods")
    set_multus(bench, False)
    bench.peer.stop()
    bench.admin.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--pods", type=int, default=100, help="Pods per burst")
    parser.add_argument("--serial", type=int, default=None, help="Pods one at a time (--pods)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--keep-logs", type=Path, help="copy the lab's logs here before down")
    parser.add_argument("--trace", type=Path, help="write each Pod's wall-clock marks here")
    args = parser.parse_args()
    serial = args.pods if args.serial is None else args.serial

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    started = time.monotonic()
    with lab_turn():
        root = Path(tempfile.mkdtemp(prefix="dmn-bench-", dir="/tmp"))
        lab = UpstreamLab(root, with_node=True)
        try:
            lab.up()
            log(f"lab up in {time.monotonic() - started:.0f} s")
            bench = prepare(lab, args.pods)
            try:
                result = measure(bench, args.pods, serial, args.rounds, log)
            finally:
                teardown(bench)
        finally:
            if args.keep_logs:
                shutil.copytree(lab.layout.root / "logs", args.keep_logs, dirs_exist_ok=True)
            problems = lab.down()
            shutil.rmtree(root, ignore_errors=True)
    if args.trace:
        args.trace.write_text("".join(json.dumps(t) + "\n" for t in TRACE))
    result["wall_s"] = round(time.monotonic() - started, 1)
    result["date"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    result["commit"] = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    result["lab_down_problems"] = problems
    if args.json:
        sys.stdout.write(json.dumps(result) + "\n")
    else:
        print_table(result)
    return 0


def print_table(result: dict[str, Any]) -> None:
    keys = (
        "startup_p50_ms",
        "startup_p90_ms",
        "startup_p99_ms",
        "added_p50_ms",
        "added_p99_ms",
        "teardown_p50_ms",
        "cpu_ms_per_pod",
    )
    print(f"{result['pods']} Pods at once, {result['rounds']} rounds (median; spread)")
    print("system  " + "  ".join(k.replace("_ms", "") for k in keys))
    for system, entry in result["systems"].items():
        cells = [f"{entry[k]:.0f} ({entry['spread'][k]:.2f})" for k in keys]
        print(f"{system:8}" + "  ".join(cells))
    print(f"one at a time ({result['serial']} Pods per round)")
    for system, entry in {
        **result["systems"],
        "dmn_whole": result["whole_link"]["dmn_whole"],
    }.items():
        e = entry.get("serial", entry)
        print(f"{system:10}" + "  ".join(f"{e[k]:.0f}" for k in keys))


if __name__ == "__main__":
    raise SystemExit(main())
