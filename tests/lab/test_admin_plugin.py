"""An administrator's own EffectProgram plugin end to end on the embedded lab (issue 12.7):
the plugin, a DeviceExposurePolicy and a topology applied as an admin would; a Pod gets the
interface with the admin's settings (macvlan mode private, MTU 1400), made by the node
agent from the program the revision pinned (the agent has no copy of this plugin); editing
the plugin gives a new revision; deleting the Pod (attached under the old revision) removes
the interface from the journal's record and leaves the node's links as before."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from pyroute2 import IPRoute

from dmn.api.builtin_plugins import plugin_object
from dmn.api.cluster import resources as r
from dmn.interpreter.loader import load_plugins
from dmn.interpreter.source import load_yaml_documents
from dmn.lab.cluster import LabCluster, LabError
from dmn.lab.demo import wait_settled
from dmn.lab.pod_demo import NAMESPACE, claim_template, pod_manifest
from dmn.lab.pods import LabPods
from dmn.lab.state_dir import StateDir
from tests.fixtures.forged_revision import forged_class, forged_revision, ready_status
from tests.waiting import wait_for

pytestmark = pytest.mark.netns

ROOT = Path(__file__).resolve().parents[2]
ADMIN = ROOT / "examples" / "plugins"
GROUP = "networking.dra-multi-network.schseba.github.io/v1alpha1"

POLICY: dict[str, Any] = {
    "apiVersion": GROUP,
    "kind": "DeviceExposurePolicy",
    "metadata": {"name": "lab-link-private-macvlan"},
    "spec": {
        "priority": 200,  # above the lab's own macvlan policy (100): this one wins
        "action": "Expose",
        "selector": {"kind": "Link"},
        "exposure": {
            "persona": "macvlan",
            "plugin": "macvlan-modes",
            "mode": "private",
            "allowMultipleAllocations": True,
            "capacity": {"children": {"value": "8"}},
            "compatibility": [{"scope": "Interface", "domain": "interface", "groups": ["macvlan"]}],
        },
    },
}


def _links(lab: LabCluster) -> dict[str, tuple[str, int]]:
    with IPRoute(netns=lab.netns) as ip:
        return {
            link.get_attr("IFLA_IFNAME"): (link.get_attr("IFLA_ADDRESS"), link.get_attr("IFLA_MTU"))
            for link in ip.get_links()
        }


def _devices_matched(cluster: Any, name: str) -> list[dict[str, Any]] | None:
    status = cluster.get(r.NETWORK_TOPOLOGIES, name).get("status") or {}
    for cond in status.get("conditions") or []:
        if cond["type"] == "DevicesMatched" and cond["status"] == "True":
            return list(status["deviceMatches"])
    return None


def test_admin_plugin_gives_a_pod_its_interface_and_removes_it(tmp_path: Path) -> None:
    found, problems = load_plugins(str(ADMIN / "macvlan-modes" / "v1"))
    assert problems == []
    (topology,), problems = load_yaml_documents(
        (ADMIN / "macvlan-modes-topology.yaml").read_bytes(), "topology.yaml"
    )
    assert problems == []
    lab = LabCluster(StateDir(tmp_path / "lab"), links="netns")
    lab.start()
    try:
        cluster = lab.client()
        cluster.apply(plugin_object(found["macvlan-modes"]))
        cluster.apply(POLICY)
        cluster.apply(topology.data)
        (result,) = wait_settled(cluster, ["private-macvlan"], 60)
        assert result.ready == "True", result
        (device_class,) = result.device_classes
        # the controller counts the devices the class selects in the agent's slices: the
        # lab node's uplink, exposed by the admin's policy
        matched = wait_for(
            lambda: _devices_matched(cluster, "private-macvlan"), what="DevicesMatched True"
        )
        assert matched is not None
        assert [(m["deviceClassName"], m["nodes"]) for m in matched] == [(device_class, 1)]
        assert matched[0]["devices"] >= 1
        cluster.apply(claim_template("private-macvlan", device_class))
        before = _links(lab)
        short = tempfile.TemporaryDirectory(prefix="dmnp-")  # unix socket paths are short
        pods = LabPods(lab, Path(short.name))
        pods.start()
        try:
            pods.run(pod_manifest("admin-a", "private-macvlan"))
            shown = pods.exec(NAMESPACE, "admin-a", ["ip", "-d", "-o", "link", "show", "net1"])
            assert shown.returncode == 0, shown.stderr
            assert "macvlan mode private" in shown.stdout, shown.stdout
            assert "mtu 1400" in shown.stdout, shown.stdout
            # the admin edits the plugin: a new contract, so a new revision (and classes)
            edited = plugin_object(found["macvlan-modes"])
            schema = edited["spec"]["configSchema"]["properties"]
            schema["mtu"]["maximum"] = 8000
            cluster.apply(edited)

            def recompiled() -> Any:
                (now,) = wait_settled(cluster, ["private-macvlan"], 60)
                return now if now.revision != result.revision else None

            now = wait_for(recompiled, interval=0.2, what="a new revision after the edit")
            assert now.ready == "True" and now.revision != result.revision, now
            # the Pod attached under the old revision is undone from the journal as recorded
            pods.delete(NAMESPACE, "admin-a")
            assert _links(lab) == before
        finally:
            pods.stop()
            short.cleanup()
    finally:
        lab.stop()


def test_admin_operation_plugin_runs_after_the_root_and_is_undone(tmp_path: Path) -> None:
    """An administrator's Operation plugin (link-tune: MTU 1300 on the root's interface)
    runs on the node from the revision's pin, after the admin's root, and its undo restores
    the recorded MTU before the root's child is removed. Then the same admin plugin with a
    program outside its grants, pinned by a revision written by hand with the controller
    stopped, is refused by the node (E_EFFECT_DENIED) before anything changes."""
    plugins = {}
    for name in ("macvlan-modes", "link-tune"):
        found, problems = load_plugins(str(ADMIN / name / "v1"))
        assert problems == []
        plugins.update(found)
    (topology,), problems = load_yaml_documents(
        (ADMIN / "link-tune-topology.yaml").read_bytes(), "topology.yaml"
    )
    assert problems == []
    lab = LabCluster(StateDir(tmp_path / "lab"), links="netns")
    lab.start()
    try:
        cluster = lab.client()
        for plugin in plugins.values():
            cluster.apply(plugin_object(plugin))
        cluster.apply(POLICY)
        cluster.apply(topology.data)
        (result,) = wait_settled(cluster, ["tuned-macvlan"], 60)
        assert result.ready == "True", result
        (device_class,) = result.device_classes
        cluster.apply(claim_template("tuned-macvlan", device_class))
        before = _links(lab)
        short = tempfile.TemporaryDirectory(prefix="dmnp-")
        pods = LabPods(lab, Path(short.name))
        pods.start()
        try:
            pods.run(pod_manifest("tuned-a", "tuned-macvlan"))
            shown = pods.exec(NAMESPACE, "tuned-a", ["ip", "-d", "-o", "link", "show", "net1"])
            assert shown.returncode == 0, shown.stderr
            assert "macvlan mode private" in shown.stdout, shown.stdout
            assert "mtu 1300" in shown.stdout, shown.stdout  # the Operation step's MTU
            pods.delete(NAMESPACE, "tuned-a")
            assert _links(lab) == before

            # the controller bypassed: with it stopped, a revision and class written by
            # hand whose admin program also moves the held parent away (not granted), every
            # digest made consistent again; the node refuses it at NodePrepare, unchanged
            assert lab.controller is not None
            lab.controller.stop()
            real = cluster.get(r.NETWORK_TOPOLOGY_REVISIONS, result.revision)
            forged = cluster.create(
                r.NETWORK_TOPOLOGY_REVISIONS,
                forged_revision(real, "macvlan-modes", "forged-tuned"),
            )
            cluster.patch(
                r.NETWORK_TOPOLOGY_REVISIONS,
                "forged-tuned",
                ready_status(forged["metadata"]["generation"]),
                status=True,
            )
            cls = forged_class(cluster.get(r.DEVICE_CLASSES, device_class), forged, "forged")
            cluster.create(r.DEVICE_CLASSES, cls)
            cluster.apply(claim_template("forged", "forged"))
            with pytest.raises(LabError) as refused:
                pods.run(pod_manifest("forged-a", "forged"))
            assert refused.value.code == "E_PREPARE"
            assert "E_EFFECT_DENIED" in str(refused.value), refused.value
            assert "linux/link-move/v1" in str(refused.value)
            assert _links(lab) == before
        finally:
            pods.stop()
            short.cleanup()
    finally:
        lab.stop()
