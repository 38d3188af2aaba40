"""``dmn lab demo --backend upstream``: Pods getting networks on real Kubernetes.

In a fresh upstream lab: the example IPPools applied and every example topology compiled to
Ready by our controller; the negative example refused (by the webhook or the controller,
with its reason code); two Pods, each with a ResourceClaim from the shared-macvlan class,
scheduled by the real scheduler, prepared by the real kubelet and connected through
containerd's NRI; ``net1`` shown from inside each Pod (``kubectl exec``) with the address
the node agent gave it from the IPPool ``macvlan-v4`` (read from the claim's
``networkData``: the demo assigns none) and the pool's route, one pings the other's pool
address over it; both deleted and their addresses released (no IPAllocation left); a
host-device Pod gets a whole lab link as ``net1``; deleted; the node's links are as before.
Then the lab goes down. Every step's outcome is a line; the demo holds (exit 0) only if all
of them held.
"""

from __future__ import annotations

import logging
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dmn.api.cluster import ApiFailure, Cluster, NotFound
from dmn.api.cluster import resources as r
from dmn.lab import manifests
from dmn.lab.demo import _EXPECT, NEGATIVE, TOPOLOGIES, apply_pools, wait_settled
from dmn.lab.node import HOST_DEVICE_TOPOLOGY
from dmn.lab.pod_demo import NAMESPACE, claim_template, pod_manifest
from dmn.lab.pod_network import ReportedNetwork, wait_reported
from dmn.lab.upstream import build
from dmn.lab.upstream.cluster import UpstreamLab
from dmn.lab.upstream.driver import LAB_LINKS, DriverDeployment
from dmn.lab.upstream.images import BUSYBOX_IMAGE

log = logging.getLogger(__name__)


@dataclass
class UpstreamDemoReport:
    lines: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def say(self, line: str) -> None:
        self.lines.append(line)
        log.info("demo %s", line)

    def check(self, ok: bool, line: str, problem: str = "") -> bool:
        self.say(("ok   " if ok else "FAIL ") + line)
        if not ok:
            self.problems.append(problem or line)
        return ok


class Kubectl:
    def __init__(self, kubeconfig: Path) -> None:
        self.binary = build.bin_dir("kubernetes") / "kubectl"
        self.kubeconfig = kubeconfig

    def run(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        argv = [str(self.binary), "--kubeconfig", str(self.kubeconfig), *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)

    def exec(self, pod: str, *command: str) -> subprocess.CompletedProcess[str]:
        return self.run("exec", "-n", NAMESPACE, pod, "--", *command)


def pod(name: str, template: str) -> dict[str, Any]:
    """A busybox Pod (the lab's own image, never pulled) with one claim from ``template``."""
    return pod_manifest(name, template, BUSYBOX_IMAGE)


def wait_for(check: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return True
        except ApiFailure:
            pass
        time.sleep(0.5)
    return False


def pod_phase(cluster: Cluster, name: str) -> str:
    try:
        return str((cluster.get(r.PODS, name, NAMESPACE).get("status") or {}).get("phase", ""))
    except NotFound:
        return "Gone"


def _phase_is(cluster: Cluster, name: str, phase: str) -> Callable[[], bool]:
    return lambda: pod_phase(cluster, name) == phase


def pod_events(cluster: Cluster, name: str) -> str:
    events = cluster.list(r.EVENTS, NAMESPACE).items
    mine = [e for e in events if (e.get("involvedObject") or {}).get("name") == name]
    return " | ".join(f"{e.get('reason')}: {e.get('message')}" for e in mine[-4:])


def node_links() -> dict[str, tuple[str, int, str]]:
    """Name → (kind, MTU, operstate) of the lab's NIC links and every macvlan on the host."""
    from pyroute2 import IPRoute

    out = {}
    with IPRoute() as ip:
        for link in ip.get_links():
            name = link.get_attr("IFLA_IFNAME")
            info = link.get_attr("IFLA_LINKINFO")
            kind = info.get_attr("IFLA_INFO_KIND") if info else ""
            if name in LAB_LINKS or kind == "macvlan":
                out[name] = (kind, link.get_attr("IFLA_MTU"), link.get_attr("IFLA_OPERSTATE"))
    return out


def _class_of(results: list[Any], topology: str) -> str:
    found = next((t for t in results if t.name == topology), None)
    return found.device_classes[0] if found and found.device_classes else ""


def run_pods(
    lab: UpstreamLab, cluster: Cluster, report: UpstreamDemoReport, timeout: float
) -> None:
    """The demo's steps on a running lab (``run_upstream_demo`` brings one up and down
    around them; the e2e suite runs them on its session lab)."""
    kubectl = Kubectl(lab.admin_kubeconfig)
    pools = apply_pools(cluster)
    report.say(f"pools applied: {', '.join(pools)}")
    topologies = manifests.load(TOPOLOGIES)
    for doc in topologies:
        cluster.apply(doc.doc)
    cluster.apply(HOST_DEVICE_TOPOLOGY)
    names = [d.name for d in topologies if d.kind == "NetworkTopology"] + ["lab-host-device"]
    results = wait_settled(cluster, names, timeout)
    for t in results:
        report.check(
            t.ready == "True",
            f"topology {t.name}: Ready={t.ready} revision={t.revision or '-'} "
            f"classes={','.join(t.device_classes) or '-'}",
        )
    _negative(cluster, report, timeout)
    before = node_links()
    report.say(f"node links before: {sorted(before)}")
    macvlan_class = _class_of(results, "shared-macvlan")
    host_class = _class_of(results, "lab-host-device")
    if not (macvlan_class and host_class):
        report.check(False, "device classes for shared-macvlan and lab-host-device exist")
        return
    cluster.apply(claim_template("shared-macvlan", macvlan_class))
    cluster.apply(claim_template("lab-host-device", host_class))
    pods = ["demo-a", "demo-b"]
    for name in pods:
        cluster.create(r.PODS, pod(name, "shared-macvlan"), NAMESPACE)
    for name in pods:
        running = wait_for(_phase_is(cluster, name, "Running"), timeout)
        if not report.check(
            running, f"pod {name} Running", f"pod {name}: {pod_events(cluster, name)}"
        ):
            return
    got: dict[str, ReportedNetwork] = {}
    for name in pods:
        shown = kubectl.exec(name, "ip", "-o", "link", "show", "net1")
        report.check(
            shown.returncode == 0,
            f"{name}: net1 inside: {shown.stdout.strip() or shown.stderr.strip()}",
        )
        # the node agent addressed net1 from the pool: the demo only reads what it reported
        net = wait_reported(cluster, NAMESPACE, name, "net1", timeout)
        if net is None:
            report.check(False, f"{name}: no address of net1 in its claim's networkData")
            continue
        got[name] = net
        addrs = kubectl.exec(name, "ip", "-o", "-4", "addr", "show", "net1")
        report.check(
            all(f" {cidr} " in addrs.stdout for cidr in net.ips),
            f"{name}: net1 {','.join(net.ips)} mac {net.mac} (claim {net.claim} networkData)",
            f"{name}: {net.ips} not on net1: {addrs.stdout.strip() or addrs.stderr.strip()}",
        )
        route = kubectl.exec(name, "ip", "route", "show", "dev", "net1")
        vias = [x.strip() for x in route.stdout.splitlines() if " via " in x]
        report.check(bool(vias), f"{name}: pool route on net1: {' / '.join(vias) or route.stderr}")
    if "demo-b" in got:
        target = got["demo-b"].addresses[0]
        pinged = kubectl.exec("demo-a", "ping", "-c", "2", "-W", "3", target)
        last = (pinged.stdout.strip().splitlines() or [pinged.stderr.strip()])[-2:]
        report.check(
            pinged.returncode == 0, f"demo-a pings demo-b over net1 ({target}): {' / '.join(last)}"
        )
    _show_claims(cluster, report)
    for name in pods:
        cluster.delete(r.PODS, name, NAMESPACE)
    gone = wait_for(lambda: all(pod_phase(cluster, n) == "Gone" for n in pods), timeout)
    report.check(gone, "shared-macvlan pods deleted")
    released = wait_for(lambda: not cluster.list(r.IP_ALLOCATIONS).items, timeout)
    held = [o["metadata"]["name"] for o in cluster.list(r.IP_ALLOCATIONS).items]
    report.check(released, f"their pool addresses released: IPAllocations left {held}")
    cluster.create(r.PODS, pod("demo-host", "lab-host-device"), NAMESPACE)
    running = wait_for(lambda: pod_phase(cluster, "demo-host") == "Running", timeout)
    if report.check(
        running, "pod demo-host Running", f"pod demo-host: {pod_events(cluster, 'demo-host')}"
    ):
        shown = kubectl.exec("demo-host", "ip", "-o", "link", "show", "net1")
        report.check(
            shown.returncode == 0,
            f"demo-host: net1 inside: {shown.stdout.strip() or shown.stderr.strip()}",
        )
        moved = sorted(set(before) - set(node_links()))
        report.check(len(moved) == 1, f"host-device: {moved} left the host namespace")
    cluster.delete(r.PODS, "demo-host", NAMESPACE)
    report.check(
        wait_for(lambda: pod_phase(cluster, "demo-host") == "Gone", timeout),
        "pod demo-host deleted",
    )
    claims_gone = wait_for(lambda: not cluster.list(r.RESOURCE_CLAIMS, NAMESPACE).items, timeout)
    report.check(claims_gone, "every ResourceClaim deleted")
    settled = wait_for(lambda: node_links() == before, timeout)
    report.check(settled, f"node links as before: {sorted(node_links())}")


def _show_claims(cluster: Cluster, report: UpstreamDemoReport) -> None:
    for claim in cluster.list(r.RESOURCE_CLAIMS, NAMESPACE).items:
        status = claim.get("status") or {}
        results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
        devices = [f"{x.get('pool')}/{x.get('device')}" for x in results]
        entries = status.get("devices") or []
        iface = [((e.get("networkData") or {}).get("interfaceName")) for e in entries]
        report.say(
            f"claim {claim['metadata']['name']}: devices={devices} "
            f"status.devices.interfaceName={iface}"
        )


def _negative(cluster: Cluster, report: UpstreamDemoReport, timeout: float) -> None:
    match = _EXPECT.search(NEGATIVE.read_text())
    expected = match.group(1) if match else ""
    doc = manifests.load(NEGATIVE)[0]
    try:
        cluster.apply(doc.doc)
    except ApiFailure as exc:
        report.check(
            expected in str(exc), f"negative {doc.name}: denied at admission ({expected})", str(exc)
        )
        return
    got = wait_settled(cluster, [doc.name], timeout)[0]
    report.check(
        got.ready == "False" and expected in got.codes,
        f"negative {doc.name}: Ready={got.ready} codes={','.join(got.codes)} (expect {expected})",
    )


def run_upstream_demo(
    *,
    timeout: float = 120.0,
    state_root: Path | None = None,
    driver: DriverDeployment | None = None,
) -> UpstreamDemoReport:
    """``driver``: how our driver is installed (default: host processes)."""
    report = UpstreamDemoReport()
    with tempfile.TemporaryDirectory(prefix="dmn-demo-", dir="/tmp") as tmp:
        lab = UpstreamLab(state_root or Path(tmp), driver=driver)
        started = time.monotonic()
        url = lab.up()
        report.say(f"lab up backend=upstream url={url} ({time.monotonic() - started:.0f}s)")
        try:
            cluster = lab.admin()
            try:
                run_pods(lab, cluster, report, timeout)
            finally:
                cluster.close()
        except (ApiFailure, OSError, subprocess.SubprocessError) as exc:
            report.check(False, f"demo aborted: {exc}")
        finally:
            problems = lab.down()
            report.check(not problems, f"lab down {'; '.join(problems)}".rstrip())
    return report
