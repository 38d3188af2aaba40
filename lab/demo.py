"""``dmn lab demo``: the main job — the lab up, the example IPPools and every example topology
through the controller, one claim allocated against the lab node's slices, one negative
example rejected, the lab down.

:func:`run_demo` returns a :class:`DemoReport` (data only; the CLI renders it). The demo
holds when every topology became Ready=True, the claim was allocated, and the negative
topology was refused with the reason code its ``# expect: CODE`` comment names. Every wait
is bounded by ``timeout`` seconds; a timeout is a failed check, never a hang.
"""

from __future__ import annotations

import logging
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dmn.api.cluster import ApiFailure, Cluster, NotFound
from dmn.api.cluster import resources as r
from dmn.lab import manifests
from dmn.lab.allocator import AllocationError
from dmn.lab.cluster import LabCluster
from dmn.lab.shipped import data_root, examples_dir
from dmn.lab.state_dir import StateDir

log = logging.getLogger(__name__)

TOPOLOGIES = examples_dir() / "topologies"
#: The IPPools the example topologies address their interfaces from (shared-macvlan's net1
#: from macvlan-v4): applied before the topologies, since a Pod's connect fails with
#: E_IPAM_UNKNOWN_POOL when its pool does not exist yet.
POOLS = examples_dir() / "ipam" / "pool.yaml"
NEGATIVE = examples_dir() / "negative" / "topologies" / "effect-denied.yaml"
CLAIM_TOPOLOGY = "shared-macvlan"
CLAIM_NAME = "lab-demo-claim"
CLAIM_NAMESPACE = "default"
_EXPECT = re.compile(r"^#\s*expect:\s*(\S+)", re.MULTILINE)


@dataclass
class TopologyResult:
    name: str
    ready: str = "Unknown"  # the Ready condition's status, "Unknown" until observed
    reason: str = ""  # the Ready condition's reason
    revision: str = ""
    device_classes: list[str] = field(default_factory=list)
    codes: list[str] = field(default_factory=list)  # diagnostic reason codes


@dataclass
class AllocationResult:
    claim: str
    device_class: str
    results: list[dict[str, Any]] = field(default_factory=list)
    config: list[dict[str, Any]] = field(default_factory=list)  # status.allocation config
    error: str = ""


@dataclass
class NegativeResult:
    source: str
    name: str
    expected: str
    result: TopologyResult | None = None
    api_error: str = ""

    @property
    def rejected(self) -> bool:
        return (
            self.result is not None
            and self.result.ready == "False"
            and (self.expected in self.result.codes)
        )


@dataclass
class DemoReport:
    url: str = ""
    links: str = ""  # the lab node's link mode (recorded | netns:<namespace>)
    slices: int = 0
    devices: int = 0
    pools: list[str] = field(default_factory=list)  # the example IPPools applied
    topologies: list[TopologyResult] = field(default_factory=list)
    allocation: AllocationResult | None = None
    negative: NegativeResult | None = None
    pods: list[str] = field(default_factory=list)  # the Pod part's lines (--links netns)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _ready(obj: dict[str, Any]) -> dict[str, Any] | None:
    status = obj.get("status") or {}
    for cond in status.get("conditions") or []:
        current = cond.get("observedGeneration") == obj["metadata"].get("generation")
        if cond.get("type") == "Ready" and current:
            return dict(cond)
    return None


def observe(cluster: Cluster, name: str) -> TopologyResult:
    """The topology's current result (Ready "Unknown" until the controller reported)."""
    result = TopologyResult(name)
    try:
        topo = cluster.get(r.NETWORK_TOPOLOGIES, name)
    except NotFound:
        return result
    cond = _ready(topo)
    if cond is None:
        return result
    status = topo.get("status") or {}
    result.ready, result.reason = str(cond.get("status")), str(cond.get("reason", ""))
    if result.ready == "True":
        result.revision = str((status.get("revision") or {}).get("name", ""))
        result.device_classes = [str(x["deviceClassName"]) for x in status.get("roots") or []]
    result.codes = sorted({str(d["code"]) for d in status.get("diagnostics") or []})
    return result


def apply_pools(cluster: Cluster, path: Path = POOLS) -> list[str]:
    """Apply the example IPPools (``examples/ipam/pool.yaml``); returns their names. Call
    it before any Pod of an example topology attaches."""
    docs = manifests.load(path)
    for doc in docs:
        cluster.apply(doc.doc)
    return [d.name for d in docs]


def wait_settled(cluster: Cluster, names: list[str], timeout: float) -> list[TopologyResult]:
    """Poll until every topology has a Ready condition for its generation, or timeout.

    The pause between polls grows from 0.1 s to 1 s: every poll is an API read per topology,
    and on a slow machine a fixed 10 per second took the CPU from the controller it waited for.
    """
    deadline = time.monotonic() + timeout
    pause = 0.1
    while True:
        results = [observe(cluster, name) for name in names]
        if all(x.ready != "Unknown" for x in results) or time.monotonic() >= deadline:
            return results
        time.sleep(pause)
        pause = min(pause * 1.5, 1.0)


def claim_body(
    device_class: str, name: str = CLAIM_NAME, namespace: str = CLAIM_NAMESPACE
) -> dict[str, Any]:
    """A ResourceClaim for one device of ``device_class`` (request ``net1``)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "net1",
                        "exactly": {
                            "deviceClassName": device_class,
                            "allocationMode": "ExactCount",
                            "count": 1,
                        },
                    }
                ]
            }
        },
    }


def _allocate(lab: LabCluster, report: DemoReport) -> None:
    source = next((t for t in report.topologies if t.name == CLAIM_TOPOLOGY), None)
    if source is None or not source.device_classes:
        report.problems.append(f"no DeviceClass from topology {CLAIM_TOPOLOGY} to claim")
        return
    device_class = source.device_classes[0]
    result = AllocationResult(f"{CLAIM_NAMESPACE}/{CLAIM_NAME}", device_class)
    report.allocation = result
    cluster = lab.client()
    try:
        claim = cluster.create(r.RESOURCE_CLAIMS, claim_body(device_class), CLAIM_NAMESPACE)
        updated = lab.allocate([claim])[0]
    except (AllocationError, ApiFailure) as exc:
        result.error = str(exc)
        report.problems.append(f"claim {result.claim} not allocated: {exc}")
        return
    allocation = (updated.get("status") or {}).get("allocation") or {}
    result.results = list((allocation.get("devices") or {}).get("results") or [])
    result.config = list((allocation.get("devices") or {}).get("config") or [])
    if not result.results:
        report.problems.append(f"claim {result.claim} has no allocated device")
    # the allocation carries the class's root configuration: the pinned revision
    pinned = {
        ((c.get("opaque") or {}).get("parameters") or {}).get("revisionRef", {}).get("name")
        for c in result.config
    }
    if source.revision not in pinned:
        report.problems.append(
            f"claim {result.claim} config pins {sorted(map(str, pinned))}, "
            f"not the topology's revision {source.revision}"
        )


def _negative(cluster: Cluster, path: Path, timeout: float, report: DemoReport) -> None:
    match = _EXPECT.search(path.read_text())
    docs = manifests.load(path)
    name = docs[0].name
    root = data_root()
    shown = path.relative_to(root) if path.is_relative_to(root) else path
    neg = NegativeResult(str(shown), name, match.group(1) if match else "")
    report.negative = neg
    try:
        cluster.apply(docs[0].doc)
    except ApiFailure as exc:
        neg.api_error = str(exc)
        report.problems.append(f"negative {name} refused by the API server, not the controller")
        return
    neg.result = wait_settled(cluster, [name], timeout)[0]
    if not neg.rejected:
        report.problems.append(
            f"negative {name}: expected Ready=False with {neg.expected}, got "
            f"Ready={neg.result.ready} codes={neg.result.codes}"
        )


def run_demo(
    *,
    timeout: float = 60.0,
    topologies: Path = TOPOLOGIES,
    negative: Path = NEGATIVE,
    state_root: Path | None = None,
    links: str = "recorded",
) -> DemoReport:
    """Run the whole demo in a temporary state directory (or ``state_root``)."""
    report = DemoReport()
    with tempfile.TemporaryDirectory(prefix="dmn-lab-demo-") as tmp:
        lab = LabCluster(StateDir(state_root or Path(tmp)), resync=5.0, links=links)
        report.url = lab.start()
        report.links = f"netns:{lab.netns}" if lab.netns else links
        try:
            cluster = lab.client()
            slices = cluster.list(r.RESOURCE_SLICES).items
            report.slices = len(slices)
            report.devices = sum(len(s["spec"].get("devices") or []) for s in slices)
            report.pools = apply_pools(cluster)
            docs = manifests.load(topologies)
            for doc in docs:
                cluster.apply(doc.doc)
            names = [d.name for d in docs if d.kind == "NetworkTopology"]
            report.topologies = wait_settled(cluster, names, timeout)
            for t in report.topologies:
                if t.ready != "True":
                    report.problems.append(
                        f"topology {t.name} not Ready (Ready={t.ready} reason={t.reason} "
                        f"codes={t.codes})"
                    )
            _allocate(lab, report)
            _negative(cluster, negative, timeout, report)
            if lab.netns:
                from dmn.lab.pod_demo import run_pods

                run_pods(lab, Path(tmp) / "pods", report, timeout)
        finally:
            lab.stop()
    log.info("lab demo finished ok=%s problems=%d", report.ok, len(report.problems))
    return report
