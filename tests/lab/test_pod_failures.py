"""The embedded lab's scheduler and kubelet stand-ins report a Pod they cannot start the way
kube-scheduler 1.37 and kubelet 1.37 with containerd 2.3 do on the upstream lab
(``tests/e2e/test_upstream_scheduling.py``, ``tests/e2e/test_upstream_connect.py``).

* Claims the allocator cannot satisfy: PodScheduled=False, reason Unschedulable, the
  scheduler's "cannot allocate all claims" message, a FailedScheduling Event.
* A connect that fails at RunPodSandbox (a macvlan MTU above the parent's): no container is
  created, each waits in ContainerCreating, kubelet's FailedCreatePodSandBox Event quotes
  our reason code, and our own Warning Event carries it as its reason.
* Deletion: the sandbox's namespace is gone at StopPodSandbox, before NodeUnprepare.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dmn.api.cluster import Cluster
from dmn.api.cluster import resources as r
from dmn.lab import manifests
from dmn.lab.cluster import LabCluster, LabError
from dmn.lab.demo import apply_pools, wait_settled
from dmn.lab.node import CHILDREN
from dmn.lab.pod_demo import NAMESPACE, claim_template, pod_manifest
from dmn.lab.pods import UNSCHEDULABLE, LabPods
from dmn.lab.shipped import examples_dir
from dmn.lab.state_dir import StateDir
from tests.e2e.lab_pods import MTU_CODE, MTU_TOO_BIG, devices, pinned_template
from tests.waiting import wait_for

pytestmark = pytest.mark.netns


@pytest.fixture
def lab_pods(tmp_path: Path) -> Iterator[tuple[LabCluster, Cluster, LabPods]]:
    lab = LabCluster(StateDir(tmp_path / "lab"), links="netns")
    lab.start()
    short = tempfile.TemporaryDirectory(prefix="dmnf-")  # unix socket paths are short
    try:
        cluster = lab.client()
        apply_pools(cluster)  # shared-macvlan's Pods get net1's address from macvlan-v4
        for doc in manifests.load(examples_dir() / "topologies" / "shared-macvlan.yaml"):
            cluster.apply(doc.doc)
        cluster.apply(MTU_TOO_BIG)
        settled = wait_settled(cluster, ["shared-macvlan", "e2e-mtu-too-big"], 60)
        assert all(t.ready == "True" for t in settled), settled
        for t in settled:
            cluster.apply(claim_template(t.name, t.device_classes[0]))
        pods = LabPods(lab, Path(short.name))
        pods.start()
        try:
            yield lab, cluster, pods
        finally:
            pods.stop()
    finally:
        short.cleanup()
        lab.stop()


def _events(cluster: Cluster, name: str) -> list[dict[str, Any]]:
    return [
        e
        for e in cluster.list(r.EVENTS, NAMESPACE).items
        if (e.get("involvedObject") or {}).get("name") == name
    ]


def test_a_failed_connect_is_reported_like_kubelet_and_containerd(
    lab_pods: tuple[LabCluster, Cluster, LabPods],
) -> None:
    _, cluster, pods = lab_pods
    with pytest.raises(LabError):
        pods.run(pod_manifest("too-big", "e2e-mtu-too-big"))
    status = cluster.get(r.PODS, "too-big", NAMESPACE)["status"]
    assert status["phase"] == "Pending"
    (container,) = status["containerStatuses"]
    assert container["state"] == {"waiting": {"reason": "ContainerCreating"}}
    events = wait_for(
        lambda: (
            {e["reason"]: e for e in _events(cluster, "too-big")}
            if len(_events(cluster, "too-big")) >= 2
            else None
        ),
        what="kubelet's and our Events",
    )
    assert MTU_CODE in events["FailedCreatePodSandBox"]["message"]
    assert events["FailedCreatePodSandBox"]["source"]["component"] == "kubelet"
    assert events[MTU_CODE]["source"]["component"] == "dra-multi-network-node"
    pods.delete(NAMESPACE, "too-big")


def test_claims_over_capacity_are_unschedulable_like_kube_scheduler(
    lab_pods: tuple[LabCluster, Cluster, LabPods],
) -> None:
    _, cluster, pods = lab_pods
    link = min(d.inventory_id for d in devices(cluster) if d.persona == "macvlan")
    device_class = cluster.get(r.RESOURCE_CLAIM_TEMPLATES, "shared-macvlan", NAMESPACE)["spec"][
        "spec"
    ]["devices"]["requests"][0]["exactly"]["deviceClassName"]
    cluster.apply(pinned_template("one-link", device_class, link))
    names = [f"share-{i}" for i in range(CHILDREN)]
    for name in names:
        pods.run(pod_manifest(name, "one-link"))
    with pytest.raises(LabError):
        pods.run(pod_manifest("share-over", "one-link"))
    status = cluster.get(r.PODS, "share-over", NAMESPACE)["status"]
    assert status["phase"] == "Pending"
    assert status["conditions"] == [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": UNSCHEDULABLE,
        }
    ]
    assert "cannot allocate all claims" in UNSCHEDULABLE
    reasons = wait_for(
        lambda: {e["reason"] for e in _events(cluster, "share-over")},
        what="the FailedScheduling Event",
    )
    assert reasons == {"FailedScheduling"}
    for name in [*names, "share-over"]:
        pods.delete(NAMESPACE, name)
