"""End to end with our driver installed by the real ``helm install`` of the chart.

The lab (``helm_session``: the session's node lab when ``DMN_E2E_INSTALL=helm``, else one
of this module's own) imports the image ``image/build.py`` builds for this checkout into
the lab's containerd and installs ``charts/dra-multi-network`` with the pinned Helm
(:class:`~dmn.lab.upstream.helm_driver.HelmDriver`): the node agent runs as the
DaemonSet's Pod and the controller as the Deployment's two replicas on the Pod network,
under the chart's RBAC and its ResourceSlice admission policy. Then the same path as
``test_upstream.py`` — slices, two macvlan Pods that get ``net1`` and ping, a clean Pod
deletion — and the release's life: ``helm upgrade`` to a changed value with the webhook
judging writes throughout the controller's rollout, the agent unprivileged
(``nodeAgent.privileged=false``: only the chart's capabilities, a real attach, pins that do
not outlive its container) and back, ``helm uninstall`` (no webhook left to
block the API server; on the session's lab that runs in ``test_upstream_zz_down.py``,
after every other module), and the lab's ``down`` leaving the host as before. Tests run in
file order.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import ipaddress
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509

from dmn.agent.coordinator.multus_plan import NODE_NAME_ANNOTATION
from dmn.api.attachment import NetworkAttachmentStatus, NetworkAttachmentStatusSpec
from dmn.api.cluster import ApiFailure, Cluster, NotFound, connect
from dmn.api.cluster import resources as r
from dmn.api.identity import DRIVER
from dmn.api.ipam.ipallocation import Owner, allocation_manifest
from dmn.api.node_capability import ANNOTATION as CAPABILITY_ANNOTATION
from dmn.api.node_capability import LABEL_PREFIX as CAPABILITY_PREFIX
from dmn.api.node_capability import capability_labels, parse_report, revision_requirement
from dmn.api.policy_report import ANNOTATION as POLICY_REPORT
from dmn.api.policy_report import decode_reports
from dmn.lab import manifests
from dmn.lab.cluster import PLUGIN_DIR, chart_manifests
from dmn.lab.demo import TOPOLOGIES, apply_pools, wait_settled
from dmn.lab.node import HOST_DEVICE_TOPOLOGY
from dmn.lab.pod_demo import NAMESPACE, claim_template
from dmn.lab.pod_network import wait_reported
from dmn.lab.upstream import build
from dmn.lab.upstream.cluster import UpstreamLab
from dmn.lab.upstream.configs import DRIVER_NAMESPACE, NODE_NAME, POD_CIDR
from dmn.lab.upstream.demo import Kubectl, pod, pod_phase, wait_for
from dmn.lab.upstream.driver import LAB_LINKS, DriverError
from dmn.lab.upstream.helm_driver import RELEASE, Helm, HelmDriver, image_ref
from dmn.lab.upstream.images import PINNED_LABEL
from tests import capabilities
from tests.e2e import installed_driver, lab_pods, real_operators
from tests.e2e.conftest import Session, host_snapshot
from tests.e2e.installed_driver import driver_pods
from tests.fixtures.multus import nad, nad_crd

pytestmark = [pytest.mark.e2e]
log = logging.getLogger(__name__)
WAIT = 120.0
AGENT = "app.kubernetes.io/name=dra-multi-network-node"
CONTROLLER = "app.kubernetes.io/name=dra-multi-network-controller"


@pytest.fixture
def lab(helm_session: Session) -> UpstreamLab:
    return helm_session.lab


@pytest.fixture
def admin(lab: UpstreamLab) -> Iterator[Cluster]:
    cluster = lab.admin()
    try:
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(scope="module")
def macvlan_template(helm_session: Session) -> None:
    """The example IPPools (shared-macvlan's net1 is addressed from macvlan-v4 by the agent
    Pod, under the chart's RBAC and IPAllocation admission policy), the shared-macvlan
    example topology compiled by the controller Pod (through the webhook the API server
    calls at the Pod), and its claim template."""
    admin = helm_session.lab.admin()
    try:
        apply_pools(admin)
        docs = [d for d in manifests.load(TOPOLOGIES) if d.name == "shared-macvlan"]
        for doc in docs:
            admin.apply(doc.doc)
        (result,) = wait_settled(admin, ["shared-macvlan"], WAIT)
        assert result.ready == "True", result
        admin.apply(claim_template("shared-macvlan", result.device_classes[0]))
    finally:
        admin.close()


@pytest.fixture
def pods(admin: Cluster) -> Iterator[list[str]]:
    """Pods the test creates; deleted and waited for, with their generated claims (the next
    test counts links and shares)."""
    created: list[str] = []
    yield created
    lab_pods.remove(admin, *created)


def _host_processes(lab: UpstreamLab) -> list[str]:
    return [n for n in lab.running() if n.startswith("dmn-")]


def test_driver_runs_as_pods_from_the_imported_image(lab: UpstreamLab, admin: Cluster) -> None:
    """The agent Pod on the host network, the controller's two replicas on the Pod network
    (as the chart's defaults run them), all from the imported image; the webhook Service's
    endpoints are exactly the two replicas' Pod addresses (the API server calls one)."""
    assert _host_processes(lab) == []  # no host process of ours: the Pods do the work
    (agent,) = driver_pods(admin, AGENT)
    controllers = driver_pods(admin, CONTROLLER)
    assert len(controllers) == 2
    for p in (agent, *controllers):
        assert installed_driver.pod_ready(p), p.get("status")
        assert p["spec"]["nodeName"] == NODE_NAME
        (status,) = p["status"]["containerStatuses"]
        assert status["image"] == image_ref(), status
    assert agent["spec"]["hostNetwork"] is True
    addresses = set()
    for p in controllers:
        assert not p["spec"].get("hostNetwork")
        assert ipaddress.ip_address(p["status"]["podIP"]) in ipaddress.ip_network(POD_CIDR)
        addresses.add(p["status"]["podIP"])
    endpoints = _webhook_endpoints(lab)
    assert {a for e in endpoints if e["conditions"].get("ready") for a in e["addresses"]} == (
        addresses
    )
    ctr = build.bin_dir("containerd") / "ctr"
    base = [str(ctr), "--address", str(lab.layout.containerd_socket), "-n", "k8s.io"]
    listing = subprocess.run(
        [*base, "images", "ls", f"name=={image_ref()}"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert PINNED_LABEL in listing.stdout, listing.stdout
    plugins = {p["metadata"]["name"] for p in admin.list(r.NETWORK_PLUGINS).items}
    assert {"macvlan-cni", "ipvlan-cni", "host-cni"} <= plugins
    release = json.loads(
        Helm(lab.layout).check("status", RELEASE, "-n", DRIVER_NAMESPACE, "-o", "json")
    )
    assert release["info"]["status"] == "deployed" and release["version"] == 1


def test_the_agent_pod_publishes_its_nodes_slices(admin: Cluster) -> None:
    """Written under the DaemonSet's service account, whose token the API server bound to
    this node: the chart's ValidatingAdmissionPolicy lets it write only lab-node's slices."""

    def devices() -> list[str]:
        return [
            d["name"]
            for s in admin.list(r.RESOURCE_SLICES).items
            if s["spec"]["driver"] == DRIVER and s["spec"].get("nodeName") == NODE_NAME
            for d in s["spec"].get("devices") or []
        ]

    # the policies reach the agent one by one: a busy machine saw the ipvlan personas late
    assert wait_for(lambda: len(devices()) == 3 * len(LAB_LINKS), WAIT), devices()


def test_pods_get_networks_and_traffic_flows(
    lab: UpstreamLab, admin: Cluster, macvlan_template: None, pods: list[str]
) -> None:
    for name in ("helm-a", "helm-b"):
        admin.create(r.PODS, pod(name, "shared-macvlan"), NAMESPACE)
        pods.append(name)
    running = wait_for(lambda: all(pod_phase(admin, n) == "Running" for n in pods), WAIT)
    assert running, [(n, pod_phase(admin, n)) for n in pods]
    kubectl = Kubectl(lab.admin_kubeconfig)
    for name in ("helm-a", "helm-b"):
        assert kubectl.exec(name, "ip", "link", "show", "net1").returncode == 0
    # the agent Pod addressed each net1 from the pool (its IPAllocations admitted under the
    # chart's policy for its node-bound token): the test adds none
    target = _pool_address(admin, "helm-b")
    ping = kubectl.exec("helm-a", "ping", "-c", "2", "-W", "3", target)
    assert ping.returncode == 0, ping.stdout + ping.stderr


def _pool_address(admin: Cluster, name: str) -> str:
    """The address the agent gave the Pod's net1 from the example pool (its claim's
    networkData)."""
    net = wait_reported(admin, NAMESPACE, name, "net1", WAIT)
    assert net is not None, lab_pods.describe(admin, name)
    (address,) = net.addresses
    assert ipaddress.ip_address(address) in ipaddress.ip_network("10.56.0.0/24"), address
    return address


def test_pod_deletion_is_clean(
    lab: UpstreamLab, admin: Cluster, macvlan_template: None, pods: list[str]
) -> None:
    """The Pod goes away, its claim with it; the Pod agent's journal (in the hostPath state
    directory) keeps only terminal records and no namespace pin stays mounted."""
    admin.create(r.PODS, pod("helm-del", "shared-macvlan"), NAMESPACE)
    pods.append("helm-del")
    assert wait_for(lambda: pod_phase(admin, "helm-del") == "Running", WAIT)
    pod_uid = admin.get(r.PODS, "helm-del", NAMESPACE)["metadata"]["uid"]
    admin.delete(r.PODS, "helm-del", NAMESPACE)
    assert wait_for(lambda: not _exists(admin, r.PODS, "helm-del", NAMESPACE), WAIT)
    journal = _journal(lab)
    attachments = [a for a in journal["attachments"] if a["identity"]["podUID"] == pod_uid]
    assert attachments and {a["state"] for a in attachments} == {"Removed"}, attachments
    pins = str(lab.layout.agent_state / "netns") + "/"
    assert not [m for m in _mounts() if m.startswith(pins)]


def test_the_charts_rbac_refused_neither_component(lab: UpstreamLab) -> None:
    """Everything the agent and the controller asked of the API server so far (slices,
    claims, Pods, statuses, Events, policies, the Lease) was allowed: no refusal in their
    logs."""
    kubectl = Kubectl(lab.admin_kubeconfig)
    for workload in ("daemonset/dra-multi-network-node", "deployment/dra-multi-network-controller"):
        logs = kubectl.run("logs", "-n", DRIVER_NAMESPACE, workload, "--tail=-1")
        assert logs.returncode == 0, logs.stderr
        refused = [line for line in logs.stdout.splitlines() if "forbidden" in line.lower()]
        assert refused == [], refused[:5]


def _agent_token_cluster(lab: UpstreamLab, admin: Cluster) -> Cluster:
    """The agent's identity as the API server gives it to the agent's Pod: a service
    account token bound to that Pod (kubelet's projected token is one), which the API server
    extends with the Pod's node (``authentication.kubernetes.io/node-name``)."""
    (agent,) = driver_pods(admin, "app.kubernetes.io/name=dra-multi-network-node")
    made = Kubectl(lab.admin_kubeconfig).run(
        "create", "token", "dra-multi-network-node", "-n", DRIVER_NAMESPACE,
        "--bound-object-kind", "Pod", "--bound-object-name", agent["metadata"]["name"],
        "--duration", "10m",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    cluster = yaml.safe_load(lab.admin_kubeconfig.read_text())["clusters"][0]["cluster"]
    return Cluster(
        connect(
            url=cluster["server"],
            token=made.stdout.strip(),
            ca_cert=cluster["certificate-authority"],
        )
    )


def _attachment_status(node: str) -> dict[str, Any]:
    spec = NetworkAttachmentStatusSpec.model_validate(
        {
            "podUID": "u-1",
            "podName": "p",
            "sandboxID": "s",
            "nodeName": node,
            "bootID": "b",
            "claimUID": "c-1",
            "claimFingerprint": "f",
            "revisionRef": {"name": "r", "uid": "r-1", "digest": "sha256:" + "0" * 64},
        }
    )
    return NetworkAttachmentStatus(metadata={"name": f"node-authority-{node}"}, spec=spec).to_api()


def _allocation(node: str) -> dict[str, Any]:
    owner = Owner(NAMESPACE, "c", "c-1", node, "op")
    return allocation_manifest("macvlan-v4", "10.56.0.250", 4, "Dynamic", owner)


@pytest.mark.adversarial
def test_the_agents_node_bound_token_writes_only_its_own_nodes_objects(
    lab: UpstreamLab, admin: Cluster, macvlan_template: None
) -> None:
    """With the agent's own credential (bound to lab-node), the real API server and the
    chart's admission policies refuse a ResourceSlice, an IPAllocation and a
    NetworkAttachmentStatus in another node's name, and let the same writes for its own node
    through (dry run: nothing is stored)."""
    agent = _agent_token_cluster(lab, admin)
    own_slice = next(
        s
        for s in admin.list(r.RESOURCE_SLICES).items
        if s["spec"]["driver"] == DRIVER and s["spec"].get("nodeName") == NODE_NAME
    )
    foreign_slice = copy.deepcopy(own_slice)
    foreign_slice["metadata"] = {"name": "node-authority-foreign"}
    foreign_slice["spec"]["nodeName"] = "other-node"
    cases = [
        (r.RESOURCE_SLICES, foreign_slice, None, "may write only ResourceSlices of its own node"),
        (r.IP_ALLOCATIONS, _allocation("other-node"), None, "only IP allocations its own node"),
        (r.NETWORK_ATTACHMENT_STATUSES, _attachment_status("other-node"), NAMESPACE,
         "only NetworkAttachmentStatuses of its own node"),
    ]  # fmt: skip
    for resource, body, namespace, message in cases:
        with pytest.raises(ApiFailure) as refused:
            agent.create(resource, body, namespace, dry_run=True)
        assert refused.value.code == 403, (resource.plural, refused.value)
        assert message in str(refused.value), (resource.plural, str(refused.value))
    agent.create(r.IP_ALLOCATIONS, _allocation(NODE_NAME), dry_run=True)
    agent.create(
        r.NETWORK_ATTACHMENT_STATUSES, _attachment_status(NODE_NAME), NAMESPACE, dry_run=True
    )
    agent.replace(r.RESOURCE_SLICES, own_slice, dry_run=True)


@pytest.mark.adversarial
def test_the_agents_token_writes_only_its_own_nodes_shadows_and_pods(
    lab: UpstreamLab, admin: Cluster, macvlan_template: None
) -> None:
    """Multus automatic mode's writes (design §6.8, §9.2) with the agent's own credential,
    on the real API server with the chart's policies (dry run: nothing is stored): a shadow
    NetworkAttachmentDefinition in its own node's name passes; one in another node's name, or
    a NetworkAttachmentDefinition without a node (an administrator's template), is refused;
    a patch of a Pod bound to another node is refused, of one bound to it passes."""
    with contextlib.suppress(ApiFailure):
        admin.create(r.CUSTOM_RESOURCE_DEFINITIONS, nad_crd())
    assert wait_for(lambda: _lists(admin, r.NETWORK_ATTACHMENT_DEFINITIONS), WAIT)
    agent = _agent_token_cluster(lab, admin)

    def shadow(node: str | None) -> dict[str, Any]:
        annotations = {NODE_NAME_ANNOTATION: node} if node else {}
        return nad(NAMESPACE, f"dmn-multus-{node or 'none'}", "{}", annotations=annotations)

    agent.create(r.NETWORK_ATTACHMENT_DEFINITIONS, shadow(NODE_NAME), NAMESPACE, dry_run=True)
    for body in (shadow("other-node"), shadow(None)):
        with pytest.raises(ApiFailure) as refused:
            agent.create(r.NETWORK_ATTACHMENT_DEFINITIONS, body, NAMESPACE, dry_run=True)
        assert refused.value.code == 403, refused.value
        assert "only the shadow NetworkAttachmentDefinitions of its own node" in str(refused.value)
    elsewhere = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "node-authority-elsewhere", "namespace": NAMESPACE},
        "spec": {
            "nodeName": "other-node",
            "containers": [{"name": "c", "image": "example.invalid/pause:1"}],
        },
    }
    admin.create(r.PODS, elsewhere, NAMESPACE)
    try:
        change = {"metadata": {"annotations": {"example.com/probe": "1"}}}
        with pytest.raises(ApiFailure) as refused:
            agent.patch(r.PODS, "node-authority-elsewhere", change, NAMESPACE, dry_run=True)
        assert refused.value.code == 403, refused.value
        assert "may patch only Pods bound to it" in str(refused.value)
        (own, *_) = driver_pods(admin, "app.kubernetes.io/name=dra-multi-network-node")
        agent.patch(r.PODS, own["metadata"]["name"], change, DRIVER_NAMESPACE, dry_run=True)
    finally:
        with contextlib.suppress(NotFound):
            admin.delete(r.PODS, "node-authority-elsewhere", NAMESPACE, grace_period_seconds=0)


def _lists(admin: Cluster, res: r.Resource) -> bool:
    try:
        admin.list(res, NAMESPACE)
    except ApiFailure:
        return False
    return True


@pytest.mark.adversarial
def test_only_the_agent_and_the_controller_write_the_nodes_capability(
    lab: UpstreamLab, admin: Cluster, macvlan_template: None
) -> None:
    """Design §9.3 on the real API server with the chart's policies: the agent Pod wrote its
    Node's capability report and the controller Pod labelled the Node for every live
    revision; a cluster admin may change neither the report nor a label, the agent's own
    bound token may rewrite its report but not a label (dry run: nothing is stored)."""
    wanted = {
        req.key
        for req in map(revision_requirement, admin.list(r.NETWORK_TOPOLOGY_REVISIONS).items)
        if req is not None
    }
    assert wanted
    labelled = wait_for(
        lambda: set(capability_labels(admin.get(r.NODES, NODE_NAME))) == wanted, lab_pods.WAIT
    )
    node = admin.get(r.NODES, NODE_NAME)
    assert labelled, node["metadata"].get("labels")
    report = node["metadata"]["annotations"][CAPABILITY_ANNOTATION]
    assert parse_report(report).node == NODE_NAME
    label = sorted(wanted)[0]
    agent = _agent_token_cluster(lab, admin)
    cases = [
        (admin, {"annotations": {CAPABILITY_ANNOTATION: report.replace('"v":1', '"v":1 ')}},
         "node agent running on this Node"),
        (admin, {"labels": {label: None}}, "only the dra-multi-network controller"),
        (admin, {"labels": {f"{CAPABILITY_PREFIX}/{'0' * 16}": "true"}},
         "only the dra-multi-network controller"),
        # both Node policies refuse this one; either may answer first
        (agent, {"labels": {label: None}}, "only the dra-multi-network controller|"
         "may change nothing of a Node but its annotation"),
    ]  # fmt: skip
    for who, metadata, message in cases:
        with pytest.raises(ApiFailure) as refused:
            who.patch(r.NODES, NODE_NAME, {"metadata": metadata}, dry_run=True)
        assert refused.value.code == 403, (metadata, refused.value)
        assert any(m in str(refused.value) for m in message.split("|")), (metadata, refused.value)
    agent.patch(
        r.NODES, NODE_NAME, {"metadata": {"annotations": {CAPABILITY_ANNOTATION: report}}},
        dry_run=True,
    )  # fmt: skip


@pytest.mark.adversarial
def test_the_agent_reports_on_policies_on_its_own_node_only(
    lab: UpstreamLab, admin: Cluster
) -> None:
    """Design §5.2 on the real API server with the chart's RBAC and policies: the agent Pod
    reported on the lab's DeviceExposurePolicies in the policy-status annotation of its own
    Node, and the controller Pod turned that report into the policy's status (one node: its
    counts are the node's). The agent's own bound token may not write a policy's status at
    all (RBAC); a cluster admin may not write the annotation (the Node policy), the agent may
    (dry run: nothing is stored)."""
    own: dict[str, Any] = {}

    def reported() -> bool:
        node = admin.get(r.NODES, NODE_NAME)
        value = (node["metadata"].get("annotations") or {}).get(POLICY_REPORT)
        if value is None:
            return False
        entries = decode_reports(NODE_NAME, value)
        exposing = sorted(n for n, e in entries.items() if (e.get("exposedDevices") or 0) > 0)
        if not exposing:
            return False
        own.update(value=value, name=exposing[0], entry=entries[exposing[0]])
        return True

    assert wait_for(reported, WAIT), "the agent reported no policy exposing devices"
    name = own["name"]

    def summarized() -> bool:
        # the node's report and the policy's status, read again together (either may move)
        value = admin.get(r.NODES, NODE_NAME)["metadata"]["annotations"][POLICY_REPORT]
        entry = decode_reports(NODE_NAME, value).get(name)
        policy = admin.get(r.DEVICE_EXPOSURE_POLICIES, name)
        status = policy.get("status") or {}
        conds = {c["type"]: c for c in status.get("conditions") or []}
        own.update(value=value, policy=policy, status=status)
        return (
            entry is not None
            and conds.get("Validated", {}).get("status") == "True"
            and (status.get("readyNodes") or 0) >= 1
            and (status.get("reportingNodes") or 0) >= 1
            and status.get("exposedDevices") == entry.get("exposedDevices")
        )

    assert wait_for(summarized, WAIT), own.get("status")

    agent = _agent_token_cluster(lab, admin)
    policy = copy.deepcopy(own["policy"])
    policy["status"]["exposedDevices"] = 12345
    with pytest.raises(ApiFailure) as refused:
        agent.replace(r.DEVICE_EXPOSURE_POLICIES, policy, status=True, dry_run=True)
    assert refused.value.code == 403, refused.value
    assert "deviceexposurepolicies/status" in str(refused.value), str(refused.value)
    status_change = {"status": {"exposedDevices": 12345}}
    with pytest.raises(ApiFailure) as refused:
        agent.patch(r.DEVICE_EXPOSURE_POLICIES, name, status_change, status=True, dry_run=True)
    assert refused.value.code == 403, refused.value
    assert "deviceexposurepolicies/status" in str(refused.value), str(refused.value)

    value = own["value"]
    forged = {"metadata": {"annotations": {POLICY_REPORT: value + " "}}}
    with pytest.raises(ApiFailure) as refused:
        admin.patch(r.NODES, NODE_NAME, forged, dry_run=True)
    assert refused.value.code == 403, refused.value
    assert "dra-multi-network-node-capabilities" in str(refused.value), str(refused.value)
    assert "node agent running on this Node" in str(refused.value), str(refused.value)
    # the agent of this very Node: its report as it holds it, and changed
    for held in (value, value + " "):
        change = {"metadata": {"annotations": {POLICY_REPORT: held}}}
        agent.patch(r.NODES, NODE_NAME, change, dry_run=True)


def test_helm_upgrade_rolls_the_controller_with_the_webhook_judging_throughout(
    lab: UpstreamLab, admin: Cluster
) -> None:
    """``helm upgrade`` with the controller's and the agent's log level changed: both
    controller replicas and the agent Pod are replaced, the new Pods carry the new argument
    and become Ready, the agent registers with kubelet again. All the while a probe writes
    through the webhook (a server-side dry run the webhook must refuse with its reason
    code) every 0.2 s: not one probe failed — the Deployment surges a new replica before it
    retires an old one, the PodDisruptionBudget keeps one, and a retiring replica serves on
    for the chart's ``shutdownDelaySeconds`` while the API server's endpoint view drops it.
    The builtin NetworkPlugins are not patched at all — their manifests did not change,
    and the chart renders Helm's ownership metadata, so Helm's merge patch of each is empty
    (before, Helm patched all of them on every upgrade, through the webhook). Release
    revision 2, deployed."""
    assert isinstance(lab.driver, HelmDriver)
    old_agents = {p["metadata"]["uid"] for p in driver_pods(admin, AGENT)}
    old_controllers = {p["metadata"]["uid"] for p in driver_pods(admin, CONTROLLER)}
    revision = _release(lab)["version"]
    with _webhook_probe(lab) as verdicts:
        helm_log = lab.driver.upgrade(
            {"controller": {"logLevel": "DEBUG"}, "nodeAgent": {"logLevel": "DEBUG"}}
        )
    failed = [(at, verdict) for at, verdict in verdicts if verdict]
    assert failed == [], failed[:3]
    assert len(verdicts) >= 20, verdicts  # the probe ran through the whole rollout
    controllers = driver_pods(admin, CONTROLLER)
    assert len(controllers) == 2
    assert not {p["metadata"]["uid"] for p in controllers} & old_controllers
    (agent,) = driver_pods(admin, AGENT)
    assert agent["metadata"]["uid"] not in old_agents
    for new in (agent, *controllers):
        assert installed_driver.pod_ready(new), new.get("status")
        assert "--log-level=DEBUG" in new["spec"]["containers"][0]["command"]
    patched = sorted(re.findall(r'Patch (\w+) "([^"]+)"', helm_log))
    # the PodDisruptionBudget's patch is apimachinery's: a strategic merge patch always
    # carries a map whose patch strategy is "replace" (its spec.selector), equal or not —
    # a no-op write of a builtin kind that our webhook does not judge
    assert patched == [
        ("DaemonSet", "dra-multi-network-node"),
        ("Deployment", "dra-multi-network-controller"),
        ("PodDisruptionBudget", "dra-multi-network-controller"),
    ], patched
    # the chart's own plugins only: the shared lab may hold an administrator's too
    builtins = {d["metadata"]["name"] for d in chart_manifests(PLUGIN_DIR)}
    released = {
        p["metadata"]["name"]
        for p in admin.list(r.NETWORK_PLUGINS).items
        if (p["metadata"].get("annotations") or {}).get("meta.helm.sh/release-name") == RELEASE
    }
    assert released == builtins, released ^ builtins
    unchanged = set(re.findall(r'no changes for NetworkPlugin "([^"]+)"', helm_log))
    assert unchanged == builtins, unchanged ^ builtins
    release = _release(lab)
    assert release["version"] == revision + 1 and release["info"]["status"] == "deployed"
    sock = lab.layout.kubelet_root / "plugins_registry" / f"{DRIVER}-reg.sock"
    assert wait_for(sock.exists, WAIT)


def test_the_unprivileged_agent_attaches_with_only_the_charts_capabilities(
    lab: UpstreamLab, admin: Cluster, macvlan_template: None, pods: list[str]
) -> None:
    """``helm upgrade`` to ``nodeAgent.privileged=false``: the new agent Pod's process holds
    exactly the chart's ``nodeAgent.capabilities`` (effective, permitted and bounding sets,
    read from the kernel's ``/proc/<pid>/status`` on the host) with ``no_new_privs`` set
    and the runtime's default seccomp filter, and its state directory is mounted
    ``HostToContainer``. That agent attaches two macvlan
    Pods that ping each other: its setns into the sandbox namespaces, its rtnetlink and its
    namespace pins (bind mounts) all work with those two capabilities. The pins live in the
    agent container's mount namespace only — none reaches the host's (the price the chart's
    values document: they do not survive a restart of the agent's container) — and the Pods'
    deletion removes every attachment (journal: Removed) and every pin. The same agent then
    hands a whole lab link to a Pod (host-cni) and gives it back. Then ``helm upgrade`` back
    to the privileged default."""
    assert isinstance(lab.driver, HelmDriver)
    granted = {"NET_ADMIN", "SYS_ADMIN"}
    try:
        lab.driver.upgrade({"nodeAgent": {"privileged": False}})
        (agent,) = driver_pods(admin, AGENT)
        (container,) = agent["spec"]["containers"]
        assert container["securityContext"]["privileged"] is False
        assert set(container["securityContext"]["capabilities"]["add"]) == granted
        state = next(m for m in container["volumeMounts"] if m["name"] == "state")
        assert state["mountPropagation"] == "HostToContainer"
        pid = _container_pid(agent)
        status = capabilities.status(pid)
        for field in ("CapEff", "CapPrm", "CapBnd"):
            assert capabilities.names(status[field]) == granted, (field, status[field])
        assert int(status["CapInh"], 16) == 0 and int(status["CapAmb"], 16) == 0, status
        assert status["NoNewPrivs"] == "1", status
        assert status["Seccomp"] == "2", status  # filter mode: the runtime's default profile

        for name in ("unpriv-a", "unpriv-b"):
            admin.create(r.PODS, pod(name, "shared-macvlan"), NAMESPACE)
            pods.append(name)
        running = wait_for(lambda: all(pod_phase(admin, n) == "Running" for n in pods), WAIT)
        assert running, [(n, pod_phase(admin, n)) for n in pods]
        kubectl = Kubectl(lab.admin_kubeconfig)
        for name in ("unpriv-a", "unpriv-b"):
            shown = kubectl.exec(name, "ip", "link", "show", "net1")
            assert shown.returncode == 0, shown.stdout + shown.stderr
        # the unprivileged agent addressed net1 from the pool too
        target = _pool_address(admin, "unpriv-b")
        ping = kubectl.exec("unpriv-a", "ping", "-c", "2", "-W", "3", target)
        assert ping.returncode == 0, ping.stdout + ping.stderr

        pins = str(lab.layout.agent_state / "netns") + "/"
        uids = {admin.get(r.PODS, n, NAMESPACE)["metadata"]["uid"] for n in pods}
        records = [a for a in _journal(lab)["attachments"] if a["identity"]["podUID"] in uids]
        # a sandbox whose hook passed its deadline on a loaded machine is Removed with that
        # error, and kubelet's next sandbox of the Pod is attached: count the attached ones
        live = [a for a in records if a["state"] != "Removed"]
        assert len(live) == 2 and {a["state"] for a in live} == {"Ready"}, records
        assert all(a["error"] for a in records if a["state"] == "Removed"), records
        in_agent = [m for m in _mounts(pid) if m.startswith(pins)]
        assert len(in_agent) == 2, in_agent
        assert not [m for m in _mounts() if m.startswith(pins)]  # HostToContainer: not ours

        installed_driver.restart_agent(lab, admin)  # a new agent container: the pins died
        (agent,) = driver_pods(admin, AGENT)
        pid = _container_pid(agent)
        assert not [m for m in _mounts(pid) if m.startswith(pins)]
        os.kill(_container_pid(admin.get(r.PODS, "unpriv-b", NAMESPACE)), signal.SIGKILL)
        refused = wait_for(lambda: bool(_waiting_message(admin, "unpriv-b", "E_PIN_MISSING")), WAIT)
        assert refused, admin.get(r.PODS, "unpriv-b", NAMESPACE).get("status")
        log.info("event=refused message=%s", _waiting_message(admin, "unpriv-b", "E_PIN"))

        lab_pods.delete(admin, *pods)
        lab_pods.wait_gone(admin, *pods)
        done = [a for a in _journal(lab)["attachments"] if a["identity"]["podUID"] in uids]
        assert len(done) == len(records) and {a["state"] for a in done} == {"Removed"}, done
        assert not [m for m in _mounts(pid) if m.startswith(pins)]
        lab_pods.wait_claims_gone(admin, uids)  # their shares free the links for a handoff
        _whole_link_handoff(lab, admin, kubectl, pods)
    finally:
        lab.driver.upgrade({"nodeAgent": {"privileged": True}})
    (agent,) = driver_pods(admin, AGENT)
    assert agent["spec"]["containers"][0]["securityContext"]["privileged"] is True


def _whole_link_handoff(
    lab: UpstreamLab, admin: Cluster, kubectl: Kubectl, pods: list[str]
) -> None:
    """The unprivileged agent hands a whole lab link to a Pod (host-cni: the link moved into
    the sandbox under ``net1``, its MTU and state set) and gives it back on deletion: the
    same links on the host, the moved one with its MAC, the attachment Removed."""
    admin.apply(HOST_DEVICE_TOPOLOGY)
    (result,) = wait_settled(admin, ["lab-host-device"], WAIT)
    assert result.ready == "True", result
    admin.apply(claim_template("lab-host-device", result.device_classes[0]))
    before = lab_pods.host_links()
    lab_pods.run(admin, pods, "unpriv-host", "lab-host-device")
    lab_pods.wait_running(admin, "unpriv-host")
    pod_uid = lab_pods.uid(admin, "unpriv-host")
    (moved,) = [n for n in LAB_LINKS if n not in lab_pods.host_links()]
    shown = kubectl.exec("unpriv-host", "ip", "-o", "link", "show", "net1")
    assert shown.returncode == 0 and before[moved]["address"] in shown.stdout, shown.stdout
    lab_pods.delete(admin, "unpriv-host")
    lab_pods.wait_gone(admin, "unpriv-host")
    after = lab_pods.host_links()
    assert set(after) == set(before), sorted(set(after) ^ set(before))
    assert after[moved]["address"] == before[moved]["address"]
    assert lab_pods.attachment_states(lab, pod_uid) == {"Removed"}


def test_the_service_monitor_is_scraped_through_the_real_prometheus_operator(
    lab: UpstreamLab, admin: Cluster
) -> None:
    """``metrics.serviceMonitor`` against the real prometheus-operator: with its CRDs in the
    API server, ``helm upgrade`` creates the chart's ServiceMonitor and metrics Services
    (strict field validation: the real schema). The real operator, reconciling a Prometheus
    that selects it by the chart's extra label, turns it into one scrape job keeping exactly
    the chart's Services (release instance, metrics label) and their ``metrics`` port, at
    ``/metrics`` every 5 s. A Prometheus server scraping with that job is not run here
    (a v3.5.0 server built from its module found no target in the one try made). Then the values go
    back."""
    assert isinstance(lab.driver, HelmDriver)
    monitor = {"enabled": True, "interval": "5s", "labels": {"dmn-lab/prometheus": "e2e"}}
    spec = {
        "replicas": 0,  # no Prometheus Pod (no image here): the host's prometheus scrapes
        "version": real_operators.PROMETHEUS_VERSION,
        "serviceMonitorSelector": {"matchLabels": {"dmn-lab/prometheus": "e2e"}},
    }
    cr = {"metadata": {"name": "e2e", "namespace": DRIVER_NAMESPACE}, "spec": spec}
    with real_operators.installed_crds(admin, "prometheus-operator"):
        try:
            lab.driver.upgrade({"metrics": {"serviceMonitor": monitor}})
            (sm,) = admin.list(real_operators.SERVICE_MONITORS, DRIVER_NAMESPACE).items
            assert sm["spec"]["endpoints"][0]["port"] == "metrics", sm
            with real_operators.prometheus_operator(lab, DRIVER_NAMESPACE) as oplog:
                admin.create(real_operators.PROMETHEUSES, cr, DRIVER_NAMESPACE)
                config: dict[str, Any] = {}

                def generated() -> bool:
                    found = real_operators.generated_config(admin, "e2e", DRIVER_NAMESPACE)
                    config.update(found or {})
                    return any(
                        j["job_name"].startswith(f"serviceMonitor/{DRIVER_NAMESPACE}/")
                        for j in config.get("scrape_configs") or []
                    )

                assert wait_for(generated, WAIT), oplog.read_text()[-3000:]
            (job,) = config["scrape_configs"]
            assert job["job_name"] == f"serviceMonitor/{DRIVER_NAMESPACE}/dra-multi-network/0"
            assert job["metrics_path"] == "/metrics" and job["scrape_interval"] == "5s", job
            keeps = [k["regex"] for k in job["relabel_configs"] if k.get("action") == "keep"]
            assert keeps[:3] == ["(dmn);true", "(true);true", "metrics"], keeps  # then sharding
            log.info("event=scrape-job job=%s", job["job_name"])
        finally:
            with contextlib.suppress(NotFound):
                admin.delete(real_operators.PROMETHEUSES, "e2e", DRIVER_NAMESPACE)
            lab.driver.upgrade({"metrics": {"serviceMonitor": {"enabled": False}}})


def test_the_cert_manager_objects_fit_cert_managers_real_schemas(
    lab: UpstreamLab, admin: Cluster
) -> None:
    """``webhook.certificates.source=certManager`` against cert-manager's real CRDs (only
    those: its commands cannot be built here, so nothing issues them). The chart renders,
    with the lab's values, its own CA chain (two Issuers, two Certificates) or, with an
    ``issuerRef``, one Certificate; each is accepted by a server-side dry run with strict
    field validation, and a misspelled field is refused by the same schema. The
    ValidatingWebhookConfiguration passes the same dry run, and its injection annotation
    names the rendered serving Certificate, whose Secret is the one the controller mounts."""
    assert isinstance(lab.driver, HelmDriver)
    own: dict[str, Any] = {}
    corp = {"issuerRef": {"name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}}
    with real_operators.installed_crds(admin, "cert-manager"):
        cases = ((own, ["Certificate"] * 2 + ["Issuer"] * 2), (corp, ["Certificate"]))
        for certmanager, kinds in cases:
            certificates = {"source": "certManager", "certManager": certmanager}
            docs = lab.driver.render({"webhook": {"certificates": certificates}})
            issued = [d for d in docs if d["apiVersion"].startswith("cert-manager.io/")]
            assert sorted(d["kind"] for d in issued) == kinds, issued
            for doc in issued:
                res = admin.resource_for(doc["apiVersion"], doc["kind"])
                admin.create(res, doc, DRIVER_NAMESPACE, dry_run=True)
            serving = next(d for d in issued if d["metadata"]["name"].endswith("-webhook"))
            wrong = {**serving, "spec": {**serving["spec"], "dnsName": ["x"]}}
            certificate = admin.resource_for(serving["apiVersion"], "Certificate")
            with pytest.raises(ApiFailure) as refused:
                admin.create(certificate, wrong, DRIVER_NAMESPACE, dry_run=True)
            assert "dnsName" in str(refused.value), refused.value
            (hook,) = [
                d
                for d in docs
                if d["kind"] == "ValidatingWebhookConfiguration"
                and d["metadata"]["name"] == "dra-multi-network"
            ]
            renamed = {**hook, "metadata": {**hook["metadata"], "name": "dmn-certmanager-check"}}
            admin.create(r.VALIDATING_WEBHOOK_CONFIGURATIONS, renamed, dry_run=True)
            inject = hook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
            assert inject == f"{DRIVER_NAMESPACE}/{serving['metadata']['name']}"
            assert all("caBundle" not in w["clientConfig"] for w in hook["webhooks"]), hook
            (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
            volumes = deployment["spec"]["template"]["spec"]["volumes"]
            secrets = [v["secret"]["secretName"] for v in volumes if "secret" in v]
            assert serving["spec"]["secretName"] in secrets, (serving["spec"], secrets)


def _controller_pods_state(admin: Cluster) -> str:
    """Each controller Pod's phase, container states and Events: why a rollout is stuck."""
    events = admin.list(r.EVENTS, DRIVER_NAMESPACE).items
    lines = []
    for controller in driver_pods(admin, CONTROLLER, terminating=True):
        name = controller["metadata"]["name"]
        status = controller.get("status") or {}
        containers = [
            (c.get("name"), c.get("state")) for c in status.get("containerStatuses") or []
        ]
        said = [
            (e.get("reason"), e.get("message"))
            for e in events
            if (e.get("involvedObject") or {}).get("name") == name
        ]
        lines.append(f"pod {name}: phase={status.get('phase')} {containers} events={said}")
    return "\n".join(lines)


def _secrets_present(admin: Cluster, names: tuple[str, ...]) -> str:
    present = {s["metadata"]["name"] for s in admin.list(r.SECRETS, DRIVER_NAMESPACE).items}
    return f"secrets present: {sorted(n for n in names if n in present)} of {sorted(names)}"


def test_cert_manager_issues_the_webhook_certificate_and_injects_its_ca(
    lab: UpstreamLab, admin: Cluster
) -> None:
    """``helm upgrade`` to ``webhook.certificates.source=certManager`` (the chart's own CA
    chain) with cert-manager's real controller and cainjector running: its Issuers and
    Certificates become Ready, the serving certificate in the Secret the controller mounts
    is signed by the chart's self-signed CA certificate for the webhook Service's names, cainjector
    writes that CA into every webhook of our configuration, and the API server's calls to
    the webhook verify against it: the webhook judges again once the controller Pods have
    rolled to cert-manager's Secret (a name of its own, see ``dmn.webhookSecret``). Then
    back to ``source=chart`` (cert-manager stopped and the Secrets it leaves behind
    removed), and the webhook judges again."""
    assert isinstance(lab.driver, HelmDriver)
    serving = "dra-multi-network-webhook"
    secrets = ("dra-multi-network-webhook-cert-manager-tls", "dra-multi-network-ca")
    with real_operators.installed_crds(admin, "cert-manager"):
        try:
            with real_operators.cert_manager(lab, DRIVER_NAMESPACE) as cmlog:
                try:
                    lab.driver.upgrade({"webhook": {"certificates": {"source": "certManager"}}})
                except DriverError as exc:  # once in a repeat run: its 4-min wait ran out
                    pytest.fail(
                        f"{exc}\n{_controller_pods_state(admin)}\n"
                        f"{_secrets_present(admin, secrets)}\n{cmlog.tail()}"
                    )
                for resource, name in (
                    (real_operators.ISSUERS, "dra-multi-network-selfsigned"),
                    (real_operators.CERTIFICATES, "dra-multi-network-ca"),
                    (real_operators.ISSUERS, "dra-multi-network-ca"),
                    (real_operators.CERTIFICATES, serving),
                ):
                    assert wait_for(
                        lambda res=resource, n=name: real_operators.ready(
                            admin, res, n, DRIVER_NAMESPACE
                        ),
                        WAIT,
                    ), f"{name} not Ready\n{cmlog.tail()}"
                certificate = admin.get(real_operators.CERTIFICATES, serving, DRIVER_NAMESPACE)
                tls = admin.get(r.SECRETS, certificate["spec"]["secretName"], DRIVER_NAMESPACE)
                # the CA Issuer writes the CA that signed the leaf into its Secret's ca.crt:
                # the chart's self-signed CA certificate. Not compared with the CA Secret as
                # it is now: cert-manager once issued the CA twice in a run (the second
                # replaces the first in its Secret; a leaf signed before keeps its CA)
                leaf = x509.load_pem_x509_certificate(base64.b64decode(tls["data"]["tls.crt"]))
                ca = x509.load_pem_x509_certificate(base64.b64decode(tls["data"]["ca.crt"]))
                leaf.verify_directly_issued_by(ca)
                ca.verify_directly_issued_by(ca)
                assert ca.subject.rfc4514_string() == "CN=dra-multi-network-webhook-ca"
                assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
                names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName)
                assert sorted(names.value.get_values_for_type(x509.DNSName)) == sorted(
                    certificate["spec"]["dnsNames"]
                )

                def injected() -> list[str]:
                    hook = admin.get(r.VALIDATING_WEBHOOK_CONFIGURATIONS, "dra-multi-network")
                    return [w["clientConfig"].get("caBundle", "") for w in hook["webhooks"]]

                assert wait_for(lambda: set(injected()) == {tls["data"]["ca.crt"]}, WAIT), (
                    f"caBundles {injected()}\n{cmlog.tail()}"
                )
                verdicts: list[str] = []

                def judged() -> bool:
                    verdicts.append(installed_driver.webhook_verdict(admin))
                    return verdicts[-1] == ""

                assert wait_for(judged, 2 * WAIT), verdicts[-3:]
                log.info("event=cert-manager-issued probes=%d", len(verdicts))
        finally:
            for name in secrets:
                with contextlib.suppress(NotFound):
                    admin.delete(r.SECRETS, name, DRIVER_NAMESPACE)
            lab.driver.upgrade({"webhook": {"certificates": {"source": "chart"}}})
    assert wait_for(lambda: installed_driver.webhook_verdict(admin) == "", 2 * WAIT)


def uninstall_leaves_nothing_that_blocks_the_api_server(lab: UpstreamLab, admin: Cluster) -> None:
    """After ``helm uninstall``: no webhook configuration or admission policy of ours, no
    Pods, the kubelet registration socket gone, and writes the webhook guarded (topologies,
    our DeviceClasses) are not refused by a webhook that no longer answers."""
    for name in ("e2e-after", "e2e-after-class"):
        with contextlib.suppress(NotFound):
            admin.delete(r.DEVICE_CLASSES, name)
    Helm(lab.layout).check("uninstall", RELEASE, "-n", DRIVER_NAMESPACE, "--wait")
    hooks = admin.list(r.VALIDATING_WEBHOOK_CONFIGURATIONS).items
    hooks += admin.list(r.MUTATING_WEBHOOK_CONFIGURATIONS).items
    assert [h["metadata"]["name"] for h in hooks] == []
    policies = admin.request("GET", VAP_PATH)["items"]
    assert [p["metadata"]["name"] for p in policies] == []
    assert wait_for(
        lambda: not driver_pods(admin, "app.kubernetes.io/part-of", terminating=True), WAIT
    )
    sock = lab.layout.kubelet_root / "plugins_registry" / f"{DRIVER}-reg.sock"
    assert wait_for(lambda: not sock.exists(), WAIT)
    ours = {"app.kubernetes.io/managed-by": "dra-multi-network-controller"}
    device_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "e2e-after-class", "labels": ours},
        "spec": {},
    }
    admin.create(r.DEVICE_CLASSES, device_class)
    admin.delete(r.DEVICE_CLASSES, "e2e-after-class")
    topology = yaml.safe_load(
        "apiVersion: networking.dra-multi-network.schseba.github.io/v1alpha1\n"
        "kind: NetworkTopology\nmetadata: {name: e2e-after}\n"
    )
    # the CRDs stay (Helm leaves crds/): the object is judged by its schema alone
    topology["spec"] = next(
        d.doc["spec"] for d in manifests.load(TOPOLOGIES) if d.name == "shared-macvlan"
    )
    admin.create(r.NETWORK_TOPOLOGIES, topology)
    admin.delete(r.NETWORK_TOPOLOGIES, "e2e-after")


if not installed_driver.HELM:  # this module's own lab: the release and the lab end here

    def test_helm_uninstall_leaves_nothing_that_blocks_the_api_server(
        lab: UpstreamLab, admin: Cluster
    ) -> None:
        uninstall_leaves_nothing_that_blocks_the_api_server(lab, admin)

    def test_zz_down_leaves_the_host_as_before(helm_session: Session) -> None:
        lab = helm_session.lab
        assert lab.down() == []
        assert not lab.layout.root.exists()
        assert host_snapshot() == helm_session.before


# --- helpers -------------------------------------------------------------------------------

VAP_PATH = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"


def _release(lab: UpstreamLab) -> dict[str, Any]:
    out = Helm(lab.layout).check("status", RELEASE, "-n", DRIVER_NAMESPACE, "-o", "json")
    release: dict[str, Any] = json.loads(out)
    return release


def _webhook_endpoints(lab: UpstreamLab) -> list[dict[str, Any]]:
    """The webhook Service's EndpointSlice endpoints (what the API server resolves it to)."""
    got = Kubectl(lab.admin_kubeconfig).run(
        "get",
        "endpointslices",
        "-n",
        DRIVER_NAMESPACE,
        "-l",
        "kubernetes.io/service-name=dra-multi-network-webhook",
        "-o",
        "json",
    )
    assert got.returncode == 0, got.stderr
    return [e for s in json.loads(got.stdout)["items"] for e in s.get("endpoints") or []]


@contextlib.contextmanager
def _webhook_probe(lab: UpstreamLab, interval: float = 0.2) -> Iterator[list[tuple[float, str]]]:
    """While the block runs, :func:`installed_driver.webhook_verdict` every ``interval``
    seconds from a thread of its own (its own API connection); yields the growing list of
    (seconds since start, verdict) — a verdict is '' when the webhook judged."""
    verdicts: list[tuple[float, str]] = []
    stop = threading.Event()
    started = time.monotonic()

    def probe() -> None:
        admin = lab.admin()
        try:
            while not stop.is_set():
                try:
                    verdict = installed_driver.webhook_verdict(admin)
                except Exception as exc:  # the API server itself failed us: a failed probe
                    verdict = f"{type(exc).__name__}: {exc}"
                verdicts.append((round(time.monotonic() - started, 2), verdict))
                stop.wait(interval)
        finally:
            admin.close()

    thread = threading.Thread(target=probe, name="webhook-probe", daemon=True)
    thread.start()
    try:
        yield verdicts
    finally:
        stop.set()
        thread.join(timeout=30)


def _exists(admin: Cluster, resource: Any, name: str, namespace: str) -> bool:
    try:
        admin.get(resource, name, namespace)
    except NotFound:
        return False
    return True


def _mounts(pid: int | str = "self") -> list[str]:
    """Mount points in the mount namespace of ``pid`` (this process's by default)."""
    with open(f"/proc/{pid}/mountinfo") as fh:
        return [line.split()[4] for line in fh]


def _container_pid(p: dict[str, Any]) -> int:
    """The host pid of the Pod's (only) container's first process: the process whose cgroup
    path names the container's id (kubelet's cgroupfs layout ends in it)."""
    (status,) = p["status"]["containerStatuses"]
    cid = status["containerID"].split("://", 1)[1]
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cgroups = (proc / "cgroup").read_text()
        except OSError:
            continue
        if any(line.rstrip().endswith("/" + cid) for line in cgroups.splitlines()):
            found.append(int(proc.name))
    assert found, f"no process in container {cid}"
    return min(found)


def _waiting_message(admin: Cluster, name: str, code: str) -> str:
    """The message of the Pod's container waiting to be created again, if it names ``code``
    (kubelet passes on the runtime's error, which carries our NRI hook's refusal)."""
    statuses = (admin.get(r.PODS, name, NAMESPACE).get("status") or {}).get("containerStatuses")
    for status in statuses or []:
        message = str(((status.get("state") or {}).get("waiting") or {}).get("message", ""))
        if code in message:
            return message
    return ""


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
