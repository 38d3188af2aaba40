"""Beyond one node: three real kubelets, three containerds, three agents, one scheduler.

The module adds ``lab-node-1`` and ``lab-node-2`` to the session's lab
(:meth:`UpstreamLab.add_node`: each its own kubelet, containerd with NRI and node agent,
its two NICs on the lab's shared fabric bridge) and takes them out again at its end, so
the other modules keep their one node. Proven here against the real kube-scheduler,
kubelets, containerds and garbage collector:

* every node's agent reports on each lab policy on its own Node, and the controller sums
  the three reports into the policy's status;
* Pods on two nodes, each with a shared-macvlan claim (net1 addressed from the pool
  ``macvlan-v4`` by our IPAM), reach each other over net1 — through the fabric — and over
  the primary Pod network;
* the scheduler places claims by device availability: once one node's parents are full,
  the next Pods go to the other node; the exclusive host-device class fills each node
  exactly once per link;
* a killed agent holds only its own node's new Pods (fail closed), the other node's start;
  restarted, it recovers and its Pod starts;
* cordon and drain of a node moves a Deployment's Pods to the other node and leaves, on
  the drained node, no attachment or preparation in the journal that is not undone, no
  namespace pin, no link on its NICs and no address held in the pool;
* a node deleted from the API loses its ResourceSlices (they are owned by their Node).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dmn.api.cluster import Cluster, NotFound
from dmn.api.cluster import resources as r
from dmn.api.identity import DRIVER
from dmn.api.policy_report import ANNOTATION as POLICY_REPORT
from dmn.api.policy_report import decode_reports
from dmn.lab.pod_demo import NAMESPACE
from dmn.lab.upstream.cluster import UpstreamLab
from dmn.lab.upstream.demo import Kubectl, pod, pod_phase
from dmn.lab.upstream.lab_nodes import LabNode
from dmn.lab.upstream.workloads import DEPLOYMENTS
from tests.e2e import lab_pods, lab_pools
from tests.e2e.conftest import Session
from tests.e2e.lab_pods import WAIT
from tests.waiting import wait_for

pytestmark = [pytest.mark.e2e]

ONE, TWO = LabNode(1), LabNode(2)
HOSTNAME = "kubernetes.io/hostname"
#: the lab policies' macvlan capacity of one link (children per parent)
CHILDREN = 4


@pytest.fixture(scope="module")
def further(upstream_session: Session, classes: dict[str, str]) -> Iterator[UpstreamLab]:
    """The session's lab with ``lab-node-1`` and ``lab-node-2`` added for this module."""
    lab = upstream_session.lab
    try:
        for node in (ONE, TWO):
            lab.add_node(node.index)
        yield lab
    finally:
        problems = []
        for node in (TWO, ONE):
            if node.index in [n.index for n in lab.further_nodes()]:
                problems += lab.remove_node(node.index)
        assert not problems, problems


def on_nodes(
    manifest: dict[str, Any], *nodes: LabNode, prefer: LabNode | None = None
) -> dict[str, Any]:
    """``manifest`` (a Pod or a Pod template) allowed only on ``nodes``, preferring one."""
    spec = manifest["spec"]
    affinity: dict[str, Any] = {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": HOSTNAME, "operator": "In", "values": [n.name for n in nodes]}
                    ]
                }
            ]
        }
    }
    if prefer is not None:
        affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {
                "weight": 100,
                "preference": {
                    "matchExpressions": [
                        {"key": HOSTNAME, "operator": "In", "values": [prefer.name]}
                    ]
                },
            }
        ]
    spec["affinity"] = {"nodeAffinity": affinity}
    return manifest


def run_on(
    admin: Cluster, created: list[str], name: str, template: str, *nodes: LabNode, **kw: Any
) -> None:
    admin.create(r.PODS, on_nodes(pod(name, template), *nodes, **kw), NAMESPACE)
    created.append(name)


def node_of(admin: Cluster, name: str) -> str:
    return str((admin.get(r.PODS, name, NAMESPACE).get("spec") or {}).get("nodeName") or "")


def journal(lab: UpstreamLab, node: LabNode) -> dict[str, Any]:
    """``dmn journal show`` of that node's agent (read-only)."""
    state = node.layout(lab.layout.root).agent_state
    argv = [sys.executable, "-m", "dmn", "journal", "show", "--state-dir", str(state)]
    out = subprocess.run(
        [*argv, "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    doc: dict[str, Any] = json.loads(out.stdout)
    return doc


def children_on(node: LabNode) -> list[str]:
    """Links in the host namespace whose parent is one of the node's NICs (a macvlan or
    ipvlan child left behind; a child in a Pod's namespace is not listed here)."""
    from pyroute2 import IPRoute

    with IPRoute() as ip:
        nics = {ip.link_lookup(ifname=n)[0] for n in node.nics}
        out = []
        for link in ip.get_links():
            info = link.get_attr("IFLA_LINKINFO")
            kind = info.get_attr("IFLA_INFO_KIND") if info else ""
            if kind in ("macvlan", "ipvlan") and link.get_attr("IFLA_LINK") in nics:
                out.append(link.get_attr("IFLA_IFNAME"))
        return out


def allocated_pool(admin: Cluster, pod_name: str) -> str:
    (claim,) = lab_pods.claims_of(admin, lab_pods.uid(admin, pod_name))
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    return str(result["pool"])


def test_pods_on_two_nodes_reach_each_other_over_net1_and_the_pod_network(
    further: UpstreamLab, admin: Cluster, pods: list[str]
) -> None:
    run_on(admin, pods, "mn-a", "shared-macvlan", ONE)
    run_on(admin, pods, "mn-b", "shared-macvlan", TWO)
    lab_pods.wait_running(admin, "mn-a", "mn-b")
    assert (node_of(admin, "mn-a"), node_of(admin, "mn-b")) == (ONE.name, TWO.name)
    # each claim was allocated a device of its own node's pool (our slices per node)
    assert (allocated_pool(admin, "mn-a"), allocated_pool(admin, "mn-b")) == (ONE.name, TWO.name)
    a = wait_for(lambda: lab_pools.network_data(admin, NAMESPACE, "mn-a"), timeout=WAIT)
    b = wait_for(lambda: lab_pools.network_data(admin, NAMESPACE, "mn-b"), timeout=WAIT)
    assert a is not None and b is not None
    assert set(a["ips"]).isdisjoint(b["ips"]), (a, b)
    kubectl = Kubectl(further.admin_kubeconfig)
    for address in (ip.split("/")[0] for ip in b["ips"]):
        ping = kubectl.exec("mn-a", "ping", "-c", "2", "-W", "3", "-I", "net1", address)
        assert ping.returncode == 0, (address, ping.stdout + ping.stderr)
    pod_ip = admin.get(r.PODS, "mn-b", NAMESPACE)["status"]["podIP"]
    ping = kubectl.exec("mn-a", "ping", "-c", "2", "-W", "3", pod_ip)
    assert ping.returncode == 0, (pod_ip, ping.stdout + ping.stderr)


def test_every_nodes_agent_reports_on_the_policies_on_its_own_node(
    further: UpstreamLab, admin: Cluster
) -> None:
    """Each node's agent reports on the lab policies in the annotation of its own Node, and
    the controller sums the three nodes into each policy's status: three reporting, three
    ready, every node's devices summed, and no node listed (none needs attention)."""
    names = {"lab-node", ONE.name, TWO.name}

    def reported() -> list[dict[str, Any]]:
        entries: dict[str, dict[str, dict[str, Any]]] = {}
        for name in names:
            node = admin.get(r.NODES, name)
            value = (node["metadata"].get("annotations") or {}).get(POLICY_REPORT)
            entries[name] = decode_reports(name, value) if value is not None else {}
        out = []
        for policy in admin.list(r.DEVICE_EXPOSURE_POLICIES).items:
            pname = policy["metadata"]["name"]
            if not pname.startswith("lab-link-"):
                continue
            mine = [entries[n].get(pname) for n in sorted(names)]
            if not all(e is not None and e.get("exposedDevices") == 2 for e in mine):
                return []
            status = policy.get("status") or {}
            if (status.get("reportingNodes"), status.get("readyNodes")) != (3, 3):
                return []
            if status.get("exposedDevices") != sum(int(e["exposedDevices"]) for e in mine if e):
                return []
            if status.get("nodes"):  # a report needing attention (e.g. a generation behind)
                return []
            out.append(policy)
        return out

    policies = wait_for(reported, timeout=WAIT, interval=1.0, what="every node's report")
    assert len(policies) == 3, [p["metadata"]["name"] for p in policies]


def test_the_scheduler_moves_on_when_one_nodes_parents_are_full(
    further: UpstreamLab, admin: Cluster, pods: list[str]
) -> None:
    """Every Pod prefers node 1; node 1's two parents take ``CHILDREN`` each, so the Pods
    beyond that go to node 2 — only because node 1 has no capacity left."""
    full = 2 * CHILDREN
    names = [f"mn-fill-{i}" for i in range(full + 2)]
    for name in names:
        run_on(admin, pods, name, "shared-macvlan", ONE, TWO, prefer=ONE)
    lab_pods.wait_running(admin, *names)
    placed = [node_of(admin, n) for n in names]
    assert placed.count(ONE.name) == full and placed.count(TWO.name) == 2, placed


def test_the_exclusive_host_device_class_fills_each_node_once_per_link(
    further: UpstreamLab, admin: Cluster, pods: list[str]
) -> None:
    names = [f"mn-whole-{i}" for i in range(5)]
    for name in names:
        run_on(admin, pods, name, "lab-host-device", ONE, TWO)

    def settled() -> bool:
        running = [n for n in names if pod_phase(admin, n) == "Running"]
        return len(running) == 4 and any(lab_pods.unschedulable(admin, n) for n in names)

    wait_for(settled, timeout=WAIT, interval=1.0, what="four Pods Running, one unschedulable")
    running = [n for n in names if pod_phase(admin, n) == "Running"]
    placed = sorted(node_of(admin, n) for n in running)
    assert placed == [ONE.name, ONE.name, TWO.name, TWO.name], placed
    devices = set()
    for name in running:
        (claim,) = lab_pods.claims_of(admin, lab_pods.uid(admin, name))
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        devices.add((result["pool"], result["device"]))
    assert len(devices) == 4, devices


def _agent_pid(lab: UpstreamLab, node: LabNode) -> int:
    record = lab.procs.get(node.agent_process)
    assert record is not None and record.alive(), node.agent_process
    return record.pid


def ready_on(admin: Cluster, node: LabNode) -> bool:
    """Every device the node publishes is ready for a new claim (a device released by an
    earlier test stays ``allocationReady: false`` until the agent has cleaned up and
    republished)."""
    devices = [
        d
        for s in admin.list(r.RESOURCE_SLICES).items
        if s["spec"].get("nodeName") == node.name and s["spec"].get("driver") == DRIVER
        for d in s["spec"].get("devices") or []
    ]
    ready = f"{DRIVER}/allocationReady"
    return bool(devices) and all(
        (d.get("attributes") or {}).get(ready, {}).get("bool", True) for d in devices
    )


def test_a_killed_agent_holds_only_its_own_nodes_new_pods(
    further: UpstreamLab, admin: Cluster, pods: list[str]
) -> None:
    # killed only once it has republished what earlier tests released: else its devices
    # stay not ready and the Pod is never placed there at all
    wait_for(lambda: ready_on(admin, ONE), timeout=WAIT, interval=0.5, what="node 1 ready")
    os.kill(_agent_pid(further, ONE), signal.SIGKILL)
    try:
        run_on(admin, pods, "mn-held", "shared-macvlan", ONE)
        run_on(admin, pods, "mn-free", "shared-macvlan", TWO)
        lab_pods.wait_running(admin, "mn-free")
        # node 1's Pod is scheduled there (its slices stay published) but cannot start:
        # kubelet has no plugin to prepare its claim, says so, and creates no container
        wait_for(lambda: node_of(admin, "mn-held") == ONE.name, timeout=WAIT, what="placed")
        failed = wait_for(
            lambda: [
                e for e in lab_pods.events(admin, "mn-held") if "Failed" in str(e.get("reason"))
            ],
            timeout=WAIT,
            interval=0.5,
            what="kubelet's failure Event on the held Pod",
        )
        assert any("DynamicResources" in str(e.get("reason")) for e in failed), failed
        statuses = (admin.get(r.PODS, "mn-held", NAMESPACE).get("status") or {}).get(
            "containerStatuses"
        ) or []
        assert pod_phase(admin, "mn-held") == "Pending", lab_pods.describe(admin, "mn-held")
        assert not any("running" in (s.get("state") or {}) for s in statuses), statuses
    finally:
        further.procs.restart(ONE.agent_process)
    lab_pods.wait_running(admin, "mn-held")
    states = {a["state"] for a in journal(further, ONE)["attachments"]}
    assert "Ready" in states, states


def test_drain_moves_the_pods_and_leaves_nothing_on_the_drained_node(
    further: UpstreamLab, admin: Cluster
) -> None:
    name = "mn-drained"
    manifest = on_nodes(pod(name, "shared-macvlan"), ONE, TWO)
    template = {"metadata": {"labels": {"app": name}}, "spec": manifest["spec"]}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": name}},
            "template": template,
        },
    }

    def replicas() -> list[dict[str, Any]]:
        return [
            p
            for p in admin.list(r.PODS, NAMESPACE).items
            if (p["metadata"].get("labels") or {}).get("app") == name
        ]

    def running_on(node: LabNode) -> list[str]:
        return [
            p["metadata"]["name"]
            for p in replicas()
            if p["spec"].get("nodeName") == node.name
            and (p.get("status") or {}).get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")
        ]

    # both replicas on node 2 first: node 1 cordoned while they are placed
    admin.patch(r.NODES, ONE.name, {"spec": {"unschedulable": True}})
    try:
        admin.create(DEPLOYMENTS, deployment, NAMESPACE)
        wait_for(lambda: len(running_on(TWO)) == 2, timeout=WAIT, what="two replicas on node 2")
        admin.patch(r.NODES, ONE.name, {"spec": {"unschedulable": False}})
        drained = {p["metadata"]["uid"] for p in replicas()}
        claims = {c["metadata"]["uid"] for uid in drained for c in lab_pods.claims_of(admin, uid)}
        assert len(claims) == 2, claims
        admin.patch(r.NODES, TWO.name, {"spec": {"unschedulable": True}})
        for pod_doc in replicas():
            admin.request(
                "POST",
                f"/api/v1/namespaces/{NAMESPACE}/pods/{pod_doc['metadata']['name']}/eviction",
                body={
                    "apiVersion": "policy/v1",
                    "kind": "Eviction",
                    "metadata": {"name": pod_doc["metadata"]["name"], "namespace": NAMESPACE},
                },
            )
        wait_for(lambda: len(running_on(ONE)) == 2, timeout=WAIT, what="two replicas on node 1")
        wait_for(
            lambda: not (drained & {p["metadata"]["uid"] for p in replicas()}),
            timeout=WAIT,
            what="the evicted Pods gone",
        )
        lab_pods.wait_claims_gone(admin, drained)
        doc = journal(further, TWO)
        left = [a for a in doc["attachments"] if a["identity"]["podUID"] in drained]
        assert left and all(a["state"] == "Removed" for a in left), left
        prepared = [p for p in doc["preparations"] if p["claimUID"] in claims]
        assert prepared and all(p["state"] == "Released" for p in prepared), prepared
        pins = TWO.layout(further.layout.root).agent_state / "netns"
        assert not pins.is_dir() or not any(pins.iterdir()), sorted(pins.iterdir())
        assert children_on(TWO) == []

        def held_by_drained() -> list[str]:
            return [
                a["metadata"]["name"]
                for a in admin.list(r.IP_ALLOCATIONS).items
                if ((a.get("spec") or {}).get("owner") or {}).get("claimUID") in claims
            ]

        wait_for(lambda: held_by_drained() == [], timeout=WAIT, what="their addresses released")
    finally:
        for node in (ONE, TWO):
            with contextlib.suppress(NotFound):
                admin.patch(r.NODES, node.name, {"spec": {"unschedulable": False}})
        with contextlib.suppress(NotFound):
            admin.delete(DEPLOYMENTS, name, NAMESPACE)
        wait_for(lambda: replicas() == [], timeout=WAIT, what="the Deployment's Pods gone")


def test_a_node_deleted_from_the_api_loses_its_slices(further: UpstreamLab, admin: Cluster) -> None:
    def slices_of(node: LabNode) -> list[str]:
        return [
            s["metadata"]["name"]
            for s in admin.list(r.RESOURCE_SLICES).items
            if s["spec"].get("nodeName") == node.name and s["spec"].get("driver") == DRIVER
        ]

    assert slices_of(TWO), "node 2 published no slices"
    # its kubelet, containerd and agent stopped first (else kubelet registers it again)
    problems = further.remove_node(TWO.index)
    assert not problems, problems
    with contextlib.suppress(NotFound):
        admin.get(r.NODES, TWO.name)
        pytest.fail(f"{TWO.name} still exists")
    wait_for(lambda: slices_of(TWO) == [], timeout=WAIT, what="node 2's slices deleted")
    assert slices_of(ONE), "node 1 lost its slices too"
    assert not Path(TWO.layout(further.layout.root).root).exists()
