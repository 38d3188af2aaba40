"""The plugin author's path to a Pod on the embedded lab (issue 37.6), from the shipped
manifests in ``examples/workloads`` as ``dmn lab apply -f`` reads them: a new plugin, its
exposure policy, a topology, a claim template naming the root's *stable* DeviceClass and a
Pod that gets ``net1`` with exactly the plugin's settings. Then the plugin is edited (a new
revision): the same template, unedited, gives a new Pod the new revision's behaviour while
the first Pod's allocation keeps the revision it got."""

from __future__ import annotations

import copy
import tempfile
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from dmn.api.cluster import resources as r
from dmn.controller.stable_classes import bound_revision
from dmn.lab import manifests
from dmn.lab.cluster import LabCluster
from dmn.lab.demo import wait_settled
from dmn.lab.pods import LabPods
from dmn.lab.state_dir import StateDir
from tests.waiting import wait_for

pytestmark = pytest.mark.netns

WORKLOADS = Path(__file__).resolve().parents[2] / "examples" / "workloads"
STABLE = "vepa-macvlan-net1"


def _docs() -> dict[str, dict[str, Any]]:
    return {m.kind: m.doc for m in manifests.load(WORKLOADS)}


def test_the_shipped_manifests_are_valid_kubernetes_objects() -> None:
    docs = _docs()
    assert set(docs) == {
        "NetworkPlugin",
        "DeviceExposurePolicy",
        "NetworkTopology",
        "ResourceClaimTemplate",
        "Pod",
    }
    for kind in ("ResourceClaimTemplate", "Pod"):
        kubernetes_validate.validate(docs[kind], "1.37.0", strict=True)
    template = docs["ResourceClaimTemplate"]["spec"]["spec"]["devices"]["requests"][0]
    assert template["exactly"]["deviceClassName"] == STABLE


def _net1(pods: LabPods, pod: str) -> str:
    shown = pods.exec("default", pod, ["ip", "-d", "-o", "link", "show", "net1"])
    assert shown.returncode == 0, shown.stderr
    return shown.stdout


def _allocated_revision(cluster: Any, pod: str) -> str:
    claims = [
        c
        for c in cluster.list(r.RESOURCE_CLAIMS, namespace="default").items
        if any(o.get("name") == pod for o in c["metadata"].get("ownerReferences") or [])
    ]
    (claim,) = claims
    (config,) = claim["status"]["allocation"]["devices"]["config"]
    return str(config["opaque"]["parameters"]["revisionRef"]["name"])


def test_a_pod_through_the_stable_class_across_a_plugin_edit(tmp_path: Path) -> None:
    docs = _docs()
    lab = LabCluster(StateDir(tmp_path / "lab"), links="netns")
    lab.start()
    try:
        cluster = lab.client()
        for kind in ("NetworkPlugin", "DeviceExposurePolicy", "NetworkTopology"):
            cluster.apply(docs[kind])
        (first,) = wait_settled(cluster, ["vepa-macvlan"], 60)
        assert first.ready == "True", first
        cluster.apply(docs["ResourceClaimTemplate"])
        short = tempfile.TemporaryDirectory(prefix="dmnp-")  # unix socket paths are short
        pods = LabPods(lab, Path(short.name))
        pods.start()
        try:
            pods.run(docs["Pod"])
            shown = _net1(pods, "vepa-a")
            assert "macvlan mode vepa" in shown and "mtu 1400" in shown, shown
            assert _allocated_revision(cluster, "vepa-a") == first.revision

            # the plugin edited: connect now sets MTU 1300 whatever the config says
            edited = copy.deepcopy(docs["NetworkPlugin"])
            (create,) = edited["spec"]["hooks"]["connect"]["effects"]
            del create["parameterBindings"]["mtu"]
            create["parameters"] = {"mtu": 1300}
            cluster.apply(edited)

            def recompiled() -> Any:
                (now,) = wait_settled(cluster, ["vepa-macvlan"], 60)
                follows = bound_revision(cluster.get(r.DEVICE_CLASSES, STABLE)).get("name")
                moved = now.revision != first.revision and follows == now.revision
                return now if moved else None

            second = wait_for(recompiled, interval=0.2, what="the stable class follows")
            assert second.ready == "True"

            pod_b = copy.deepcopy(docs["Pod"])
            pod_b["metadata"]["name"] = "vepa-b"
            pods.run(pod_b)
            shown_b = _net1(pods, "vepa-b")
            assert "macvlan mode vepa" in shown_b and "mtu 1300" in shown_b, shown_b
            assert _allocated_revision(cluster, "vepa-b") == second.revision
            # the first Pod keeps what its allocation pinned
            assert "mtu 1400" in _net1(pods, "vepa-a")
            assert _allocated_revision(cluster, "vepa-a") == first.revision
            cluster.get(r.NETWORK_TOPOLOGY_REVISIONS, first.revision)  # retained
            pods.delete("default", "vepa-a")
            pods.delete("default", "vepa-b")
        finally:
            pods.stop()
            short.cleanup()
    finally:
        lab.stop()
