"""End to end on real Kubernetes: kube-apiserver, kube-scheduler, kubelet and containerd.

One upstream lab per session (``conftest.py``); each test cleans up its own Pods, claims
and templates. Runs as root (kubelet, containerd, links in the host namespace).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from dmn.api.cluster import Cluster, NotFound
from dmn.api.cluster import resources as r
from dmn.api.identity import DRIVER
from dmn.lab import manifests
from dmn.lab.demo import TOPOLOGIES, wait_settled
from dmn.lab.node import HOST_DEVICE_TOPOLOGY
from dmn.lab.pod_demo import NAMESPACE, claim_template
from dmn.lab.upstream import build
from dmn.lab.upstream.cluster import UpstreamLab
from dmn.lab.upstream.configs import NODE_NAME
from dmn.lab.upstream.demo import (
    Kubectl,
    pod,
    pod_phase,
    wait_for,
)
from dmn.lab.upstream.driver import LAB_LINKS
from tests.e2e.conftest import Session, host_snapshot

pytestmark = [pytest.mark.e2e]
WAIT = 120.0


@pytest.fixture(scope="module")
def classes(upstream_session: Session) -> dict[str, str]:
    upstream_lab = upstream_session.lab
    """Every example topology plus the lab host-device one applied; name → DeviceClass."""
    admin = upstream_lab.admin()
    try:
        docs = manifests.load(TOPOLOGIES)
        for doc in docs:
            admin.apply(doc.doc)
        admin.apply(HOST_DEVICE_TOPOLOGY)
        names = [d.name for d in docs if d.kind == "NetworkTopology"] + ["lab-host-device"]
        results = wait_settled(admin, names, WAIT)
        assert all(t.ready == "True" for t in results), results
        for name in ("shared-macvlan", "lab-host-device"):
            device_class = next(t for t in results if t.name == name).device_classes[0]
            admin.apply(claim_template(name, device_class))
        return {t.name: t.device_classes[0] for t in results if t.device_classes}
    finally:
        admin.close()


@pytest.fixture
def pods(admin: Cluster) -> Iterator[list[str]]:
    """Names of Pods the test creates; deleted (and waited for) afterwards."""
    created: list[str] = []
    yield created
    for name in created:
        with contextlib.suppress(NotFound):
            admin.delete(r.PODS, name, NAMESPACE)
    # not waited for here (test_pod_deletion_... proves deletion); `down` stops what is left


def _run(admin: Cluster, pods: list[str], name: str, template: str) -> None:
    admin.create(r.PODS, pod(name, template), NAMESPACE)
    pods.append(name)


def _running(admin: Cluster, names: list[str]) -> bool:
    return wait_for(lambda: all(pod_phase(admin, n) == "Running" for n in names), WAIT)


def _unschedulable(admin: Cluster, name: str) -> str:
    """The scheduler's message when it keeps the Pod Pending, else ''."""
    status = admin.get(r.PODS, name, NAMESPACE).get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("reason") == "Unschedulable":
            return str(cond.get("message", ""))
    return ""


def test_components_report_their_pinned_versions(upstream_lab: UpstreamLab, admin: Cluster) -> None:
    binary = build.bin_dir("kubernetes") / "kube-apiserver"
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "Kubernetes v1.37.2"
    version = Kubectl(upstream_lab.admin_kubeconfig).run("version", "-o", "json")
    assert json.loads(version.stdout)["serverVersion"]["gitVersion"] == "v1.37.2"
    node = admin.get(r.NODES, NODE_NAME)
    assert node["status"]["nodeInfo"]["kubeletVersion"] == "v1.37.2"


def test_slices_are_accepted_by_real_validation(upstream_lab: UpstreamLab, admin: Cluster) -> None:
    slices = [
        s
        for s in admin.list(r.RESOURCE_SLICES).items
        if s["spec"]["driver"] == DRIVER and s["spec"].get("nodeName") == NODE_NAME
    ]
    devices = [d for s in slices for d in s["spec"].get("devices") or []]
    # two lab links, each as kernel, macvlan and ipvlan persona
    assert len(devices) == 3 * len(LAB_LINKS), [d["name"] for d in devices]
    shared = [d for d in devices if d.get("allowMultipleAllocations")]
    assert shared and all("capacity" in d for d in shared)


def test_pods_get_networks_and_traffic_flows(
    upstream_lab: UpstreamLab, admin: Cluster, classes: dict[str, str], pods: list[str]
) -> None:
    for name in ("e2e-a", "e2e-b"):
        _run(admin, pods, name, "shared-macvlan")
    assert _running(admin, pods), [(n, pod_phase(admin, n)) for n in pods]
    kubectl = Kubectl(upstream_lab.admin_kubeconfig)
    for name, address in (("e2e-a", "10.93.0.1/24"), ("e2e-b", "10.93.0.2/24")):
        assert kubectl.exec(name, "ip", "link", "show", "net1").returncode == 0
        assert kubectl.exec(name, "ip", "addr", "add", address, "dev", "net1").returncode == 0
    ping = kubectl.exec("e2e-a", "ping", "-c", "2", "-W", "3", "10.93.0.2")
    assert ping.returncode == 0, ping.stdout + ping.stderr
    claims = admin.list(r.RESOURCE_CLAIMS, NAMESPACE).items
    assert len(claims) == 2
    for claim in claims:
        entries = claim["status"].get("devices") or []
        assert any((e.get("networkData") or {}).get("interfaceName") == "net1" for e in entries), (
            claim["status"]
        )
    statuses = kubectl.run("get", "networkattachmentstatuses", "-A", "-o", "json")
    assert statuses.returncode == 0, statuses.stderr
    assert json.loads(statuses.stdout)["items"]


def test_pod_deletion_leaves_no_link_pin_or_live_record(
    upstream_lab: UpstreamLab, admin: Cluster, classes: dict[str, str], pods: list[str]
) -> None:
    """kubelet stops the sandbox, unprepares the claim, then removes the sandbox: the Pod
    goes away, its claim with it, and the journal keeps only terminal records of both."""
    _run(admin, pods, "e2e-del", "shared-macvlan")
    assert _running(admin, ["e2e-del"]), pod_phase(admin, "e2e-del")
    pod_uid = admin.get(r.PODS, "e2e-del", NAMESPACE)["metadata"]["uid"]
    claim_uids = {
        c["metadata"]["uid"]
        for c in admin.list(r.RESOURCE_CLAIMS, NAMESPACE).items
        if any(o.get("uid") == pod_uid for o in c["metadata"].get("ownerReferences") or [])
    }
    assert claim_uids
    admin.delete(r.PODS, "e2e-del", NAMESPACE)
    assert wait_for(lambda: not _exists(admin, r.PODS, "e2e-del"), WAIT), admin.get(
        r.PODS, "e2e-del", NAMESPACE
    ).get("status")
    assert wait_for(
        lambda: (
            not any(
                c["metadata"]["uid"] in claim_uids
                for c in admin.list(r.RESOURCE_CLAIMS, NAMESPACE).items
            )
        ),
        WAIT,
    )
    journal = _journal(upstream_lab)
    attachments = [a for a in journal["attachments"] if a["identity"]["podUID"] == pod_uid]
    preparations = [p for p in journal["preparations"] if p["claimUID"] in claim_uids]
    assert attachments and {a["state"] for a in attachments} == {"Removed"}, attachments
    assert preparations and {p["state"] for p in preparations} == {"Released"}, preparations


def _claim_of(admin: Cluster, pod_name: str) -> dict[str, Any]:
    pod_uid = admin.get(r.PODS, pod_name, NAMESPACE)["metadata"]["uid"]
    (claim,) = [
        c
        for c in admin.list(r.RESOURCE_CLAIMS, NAMESPACE).items
        if any(o.get("uid") == pod_uid for o in c["metadata"].get("ownerReferences") or [])
    ]
    return claim


def _device_health(admin: Cluster, pod_name: str, resource_id: str) -> dict[str, Any]:
    """The kubelet's entry for ``resource_id`` in the Pod's allocatedResourcesStatus."""
    status = admin.get(r.PODS, pod_name, NAMESPACE).get("status") or {}
    for container in status.get("containerStatuses") or []:
        for entry in container.get("allocatedResourcesStatus") or []:
            if entry.get("name") != "claim:net":
                continue
            for res in entry.get("resources") or []:
                if res.get("resourceID") == resource_id:
                    return dict(res)
    return {}


def _dmn_lab(*argv: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "dmn", "lab", *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def _set_host_link(name: str, state: str) -> None:
    from pyroute2 import IPRoute

    with IPRoute() as ip:
        ip.link("set", index=ip.link_lookup(ifname=name)[0], state=state)


def test_pod_status_shows_device_health(
    upstream_lab: UpstreamLab, admin: Cluster, classes: dict[str, str], pods: list[str]
) -> None:
    """kubelet v1.37.2 watches our DRAResourceHealth stream (v1, chosen from the
    registration; gate ResourceHealthStatus on by default) and shows the allocated
    device's health in the Pod's status; the lab downs the device's link: Unhealthy, with
    our message; up again: Healthy."""
    # created with `dmn lab run -f` (which waits until it runs) and looked into with
    # `dmn lab exec` (kubectl exec on this backend)
    manifest = upstream_lab.layout.root.parent / "e2e-health.yaml"
    manifest.write_text(json.dumps(pod("e2e-health", "shared-macvlan")))
    pods.append("e2e-health")
    state = ["--state-dir", str(upstream_lab.layout.root.parent)]
    ran = _dmn_lab("run", "-f", str(manifest), *state)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == ["pod/e2e-health created", "pod/e2e-health running"]
    shown = _dmn_lab(
        "exec", "e2e-health", "-n", NAMESPACE, *state, "--", "ip", "link", "show", "net1"
    )
    assert shown.returncode == 0 and "net1" in shown.stdout, shown.stderr
    (result,) = _claim_of(admin, "e2e-health")["status"]["allocation"]["devices"]["results"]
    resource_id = f"{DRIVER}/{result['pool']}/{result['device']}"
    assert wait_for(
        lambda: _device_health(admin, "e2e-health", resource_id).get("health") == "Healthy", WAIT
    ), admin.get(r.PODS, "e2e-health", NAMESPACE)["status"]
    healthy = _device_health(admin, "e2e-health", resource_id)
    link = healthy["message"].split()[1]  # "link dmnlab0 is up"
    assert healthy["message"] == f"link {link} is up" and link in LAB_LINKS, healthy
    _set_host_link(link, "down")
    try:
        assert wait_for(
            lambda: _device_health(admin, "e2e-health", resource_id).get("health") == "Unhealthy",
            WAIT,
        ), _device_health(admin, "e2e-health", resource_id)
        unhealthy = _device_health(admin, "e2e-health", resource_id)
        assert unhealthy["message"] == f"link {link} is not usable (operstate DOWN)", unhealthy
    finally:
        _set_host_link(link, "up")
    assert wait_for(
        lambda: _device_health(admin, "e2e-health", resource_id).get("health") == "Healthy", WAIT
    ), _device_health(admin, "e2e-health", resource_id)


def _exists(admin: Cluster, resource: Any, name: str) -> bool:
    try:
        admin.get(resource, name, NAMESPACE)
    except NotFound:
        return False
    return True


def _journal(lab: UpstreamLab) -> dict[str, Any]:
    state = str(lab.layout.agent_state)
    out = subprocess.run(
        [sys.executable, "-m", "dmn", "journal", "show", "--state-dir", state, "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    doc: dict[str, Any] = json.loads(out.stdout)
    return doc


def test_zz_down_leaves_the_host_as_before(upstream_session: Session) -> None:
    """Last in the module: the session's lab goes down here and the host is compared."""
    lab = upstream_session.lab
    kubeconfig = subprocess.run(
        [
            sys.executable,
            "-m",
            "dmn",
            "lab",
            "kubeconfig",
            "--state-dir",
            str(lab.layout.root.parent),
        ],
        capture_output=True,
        text=True,
    )
    assert kubeconfig.stdout.strip() == str(lab.admin_kubeconfig)
    down = subprocess.run(
        [sys.executable, "-m", "dmn", "lab", "down", "--state-dir", str(lab.layout.root.parent)],
        capture_output=True,
        text=True,
    )
    assert down.returncode == 0, down.stderr
    assert not lab.layout.root.exists()
    assert not lab.running()
    assert host_snapshot() == upstream_session.before
