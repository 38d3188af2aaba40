"""The real controller and the official client against the lab API server."""

from __future__ import annotations

import contextlib
import copy
from typing import Any

import pytest

from dmn.api.cluster import AlreadyExists, Cluster, NotFound
from dmn.api.cluster import resources as r
from dmn.api.identity import API_VERSION, DRIVER, REVISION_FINALIZER
from dmn.controller.manager import Controller
from dmn.lab.apiserver import LabApiServer
from dmn.opcodes.registry import default_registry
from tests.controller.support import (
    client_for,
    example,
    ready,
    topology_settled,
    wait_for,
)

EXAMPLE_NAMES = [
    "dual-vf-bond-vlan",
    "shared-macvlan",
    "shared-ipvlan",
    "host-device",
    "vfio",
    "rdma-kernel-vf",
]


@pytest.mark.parametrize("name", EXAMPLE_NAMES)
def test_example_becomes_ready(cluster: Cluster, controller: Controller, name: str) -> None:
    created = cluster.create(r.NETWORK_TOPOLOGIES, example(name))
    topo = wait_for(topology_settled(cluster, name), what=f"{name} Ready")
    cond = ready(topo)
    assert cond and cond["status"] == "True", topo.get("status")
    status = topo["status"]
    rev = cluster.get(r.NETWORK_TOPOLOGY_REVISIONS, status["revision"]["name"])
    assert rev["status"]["phase"] == "Ready"
    assert REVISION_FINALIZER in rev["metadata"]["finalizers"]
    assert rev["spec"]["topologyRef"]["uid"] == created["metadata"]["uid"]
    assert status["revision"] == {
        "name": rev["metadata"]["name"],
        "uid": rev["metadata"]["uid"],
        "digest": rev["spec"]["digest"],
    }
    roots = {s["id"] for s in example(name)["spec"]["steps"] if s["kind"] == "Allocation"}
    assert {x["rootStep"] for x in status["roots"]} == roots
    for root in status["roots"]:
        cls = cluster.get(r.DEVICE_CLASSES, root["deviceClassName"])
        params = cls["spec"]["config"][0]["opaque"]["parameters"]
        assert params["revisionRef"] == status["revision"]
        assert params["rootStep"] == root["rootStep"]
        assert f'device.driver == "{DRIVER}"' in cls["spec"]["selectors"][0]["cel"]["expression"]


def _update_spec(cluster: Cluster, name: str, edit: Any) -> dict[str, Any]:
    topo = cluster.get(r.NETWORK_TOPOLOGIES, name)
    edit(topo["spec"])
    return cluster.replace(r.NETWORK_TOPOLOGIES, topo)


def _claim(cluster: Cluster, name: str, revision: dict[str, Any]) -> dict[str, Any]:
    claim = cluster.create(
        r.RESOURCE_CLAIMS,
        {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "primary",
                            "exactly": {
                                "deviceClassName": "x",
                                "allocationMode": "ExactCount",
                                "count": 1,
                            },
                        }
                    ]
                }
            },
        },
    )
    claim["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "primary", "driver": DRIVER, "pool": "n1", "device": "vf0"}
                ],
                "config": [
                    {
                        "source": "FromClass",
                        "requests": ["primary"],
                        "opaque": {
                            "driver": DRIVER,
                            "parameters": {
                                "apiVersion": API_VERSION,
                                "kind": "TopologyRootConfiguration",
                                "revisionRef": {
                                    "name": revision["metadata"]["name"],
                                    "uid": revision["metadata"]["uid"],
                                    "digest": revision["spec"]["digest"],
                                },
                                "rootStep": "left",
                                "pluginContractDigest": revision["spec"]["roots"][0][
                                    "pluginContractDigest"
                                ],
                            },
                        },
                    }
                ],
            }
        }
    }
    return cluster.replace(r.RESOURCE_CLAIMS, claim, status=True)


def test_invalid_update_then_semantic_change_and_gc(
    cluster: Cluster, controller: Controller
) -> None:
    name = "lifecycle"
    topo = example("dual-vf-bond-vlan")
    topo["metadata"]["name"] = name
    cluster.create(r.NETWORK_TOPOLOGIES, topo)
    first = wait_for(topology_settled(cluster, name), what="first Ready")
    old_ref = first["status"]["revision"]
    old_rev = cluster.get(r.NETWORK_TOPOLOGY_REVISIONS, old_ref["name"])
    old_classes = {
        x["deviceClassName"]: cluster.get(r.DEVICE_CLASSES, x["deviceClassName"])
        for x in first["status"]["roots"]
    }

    # invalid update: failure status, old revision and classes untouched
    def bad(spec: dict[str, Any]) -> None:
        spec["steps"][3]["config"]["vlanId"] = 5000

    updated = _update_spec(cluster, name, bad)
    failed = wait_for(
        topology_settled(cluster, name, updated["metadata"]["generation"]), what="failure"
    )
    cond = ready(failed)
    assert cond is not None and cond["status"] == "False" and cond["reason"] == "CompileFailed"
    assert failed["status"]["diagnostics"][0]["code"] == "E_SCHEMA"
    assert failed["status"]["diagnostics"][0]["path"] == "spec.steps[3].config.vlanId"
    events = [
        e
        for e in cluster.list(r.EVENTS, namespace="default").items
        if e["involvedObject"].get("uid") == failed["metadata"]["uid"]
        # no node publishes slices here: the first Ready revision's classes match nothing
        and e["reason"] != "E_NO_MATCHING_DEVICES"
    ]
    assert [(e["type"], e["reason"], e["involvedObject"]["kind"]) for e in events] == [
        ("Warning", "E_SCHEMA", "NetworkTopology")
    ]
    assert "vlanId" in events[0]["message"]
    assert failed["status"]["revision"] == old_ref
    again = cluster.get(r.NETWORK_TOPOLOGY_REVISIONS, old_ref["name"])
    assert again["metadata"]["resourceVersion"] == old_rev["metadata"]["resourceVersion"]
    for cname, cls in old_classes.items():
        assert (
            cluster.get(r.DEVICE_CLASSES, cname)["metadata"]["resourceVersion"]
            == cls["metadata"]["resourceVersion"]
        )

    # a claim is allocated against the old revision
    _claim(cluster, "pinned", old_rev)

    # semantic change: a new revision; the old one is retained while the claim exists
    def good(spec: dict[str, Any]) -> None:
        spec["steps"][3]["config"]["vlanId"] = 200

    updated = _update_spec(cluster, name, good)
    second = wait_for(
        topology_settled(cluster, name, updated["metadata"]["generation"]), what="second Ready"
    )
    assert ready(second)["status"] == "True"  # type: ignore[index]
    new_ref = second["status"]["revision"]
    assert new_ref["name"] != old_ref["name"] and new_ref["digest"] != old_ref["digest"]
    retained = wait_for(
        lambda: (
            (c := ready_retained(cluster, old_ref["name"]))
            and c["reason"] == "AllocationReference"
            and c
        ),
        what="retained",
    )
    assert retained["status"] == "True"
    for cname in old_classes:
        cluster.get(r.DEVICE_CLASSES, cname)  # still there

    # release: the claim goes away -> old revision and its classes are collected
    cluster.delete(r.RESOURCE_CLAIMS, "pinned", "default")
    wait_for(
        lambda: gone(cluster, r.NETWORK_TOPOLOGY_REVISIONS, old_ref["name"]),
        what="old revision collected",
    )
    for cname in old_classes:
        assert gone(cluster, r.DEVICE_CLASSES, cname)
    # the current revision is untouched
    assert cluster.get(r.NETWORK_TOPOLOGY_REVISIONS, new_ref["name"])["status"]["phase"] == "Ready"


def ready_retained(cluster: Cluster, name: str) -> dict[str, Any] | None:
    rev = cluster.get(r.NETWORK_TOPOLOGY_REVISIONS, name)
    for c in (rev.get("status") or {}).get("conditions") or []:
        if c["type"] == "Retained":
            return c  # type: ignore[no-any-return]
    return None


def gone(cluster: Cluster, res: Any, name: str) -> bool:
    try:
        cluster.get(res, name)
    except NotFound:
        return True
    return False


def test_live_attachment_and_unready_node_retain(cluster: Cluster, controller: Controller) -> None:
    name = "retain-attach"
    topo = example("vfio")
    topo["metadata"]["name"] = name
    cluster.create(r.NETWORK_TOPOLOGIES, topo)
    first = wait_for(topology_settled(cluster, name), what="Ready")
    ref = first["status"]["revision"]
    cluster.create(
        r.NETWORK_ATTACHMENT_STATUSES,
        {
            "metadata": {"name": "att-1", "namespace": "default"},
            "spec": {
                "podUID": "p1",
                "podName": "pod",
                "sandboxID": "s1",
                "nodeName": "n1",
                "bootID": "b1",
                "claimUID": "c1",
                "claimFingerprint": "f1",
                "revisionRef": ref,
            },
        },
    )
    cluster.patch(
        r.NETWORK_ATTACHMENT_STATUSES,
        "att-1",
        {"status": {"phase": "CleanupPending"}},
        "default",
        status=True,
    )
    # delete the topology: the revision is no longer current but must be retained
    cluster.delete(r.NETWORK_TOPOLOGIES, name)
    wait_for(
        lambda: (c := ready_retained(cluster, ref["name"])) and c["reason"] == "LiveAttachment",
        what="attachment retains",
    )
    # the node finished cleanup, but the node publishing for the driver is unreachable
    cluster.create(r.NODES, {"metadata": {"name": "n1"}})
    cluster.patch(
        r.NODES,
        "n1",
        {"status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}},
        status=True,
    )
    cluster.create(
        r.RESOURCE_SLICES,
        {
            "metadata": {"name": "n1-slice"},
            "spec": {
                "driver": DRIVER,
                "nodeName": "n1",
                "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                "devices": [],
            },
        },
    )
    cluster.patch(
        r.NETWORK_ATTACHMENT_STATUSES,
        "att-1",
        {"status": {"phase": "Released"}},
        "default",
        status=True,
    )
    wait_for(
        lambda: (c := ready_retained(cluster, ref["name"])) and c["reason"] == "NodeUnreachable",
        what="node retains",
    )
    cluster.patch(
        r.NODES,
        "n1",
        {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
        status=True,
    )
    wait_for(
        lambda: gone(cluster, r.NETWORK_TOPOLOGY_REVISIONS, ref["name"]),
        what="collected after verified release",
    )


def test_conflicting_class_is_an_error_not_overwritten(
    cluster: Cluster, controller: Controller
) -> None:
    from dmn.controller.compile.compiler import compile_topology
    from dmn.controller.compile.plugin_sources import plugins_from_objects

    name = "conflicted"
    topo = example("host-device")
    topo["metadata"]["name"] = name
    # predict the class name from the compiler (it depends on the UID, so create first
    # with a foreign class in place is impossible); instead pre-create a foreign class
    # under the name the controller will want by compiling with the live UID.
    created = cluster.create(r.NETWORK_TOPOLOGIES, topo)
    plugins, _ = plugins_from_objects(cluster.list(r.NETWORK_PLUGINS).items)
    compiled = compile_topology(created, plugins, uid=created["metadata"]["uid"]).compiled
    assert compiled is not None
    wait_for(topology_settled(cluster, name), what="Ready")
    cls_name = compiled.device_classes("x")[0]["metadata"]["name"]
    # someone replaces the generated class with a foreign one
    cluster.delete(r.DEVICE_CLASSES, cls_name)
    foreign = {
        "metadata": {"name": cls_name},
        "spec": {"selectors": [{"cel": {"expression": "true"}}]},
    }
    # the controller may re-create it first; then it is made foreign by an edit below
    with contextlib.suppress(AlreadyExists):
        cluster.create(r.DEVICE_CLASSES, foreign)
    cls = cluster.get(r.DEVICE_CLASSES, cls_name)
    cls["spec"] = foreign["spec"]
    cls["metadata"]["labels"] = {}
    cluster.replace(r.DEVICE_CLASSES, cls)
    cluster.patch(r.NETWORK_TOPOLOGIES, name, {"metadata": {"annotations": {"touch": "1"}}})

    def conflict() -> dict[str, Any] | None:
        t = cluster.get(r.NETWORK_TOPOLOGIES, name)
        c = ready(t)
        return t if c and c["status"] == "False" and c["reason"] == "Conflict" else None

    failed = wait_for(conflict, what="conflict status")
    assert failed["status"]["diagnostics"][0]["code"] == "E_CONFLICT"
    assert cluster.get(r.DEVICE_CLASSES, cls_name)["spec"] == foreign["spec"]


def test_restart_adopts_identical_objects(
    lab: LabApiServer, cluster: Cluster, controller: Controller
) -> None:
    name = "restart"
    topo = example("shared-macvlan")
    topo["metadata"]["name"] = name
    cluster.create(r.NETWORK_TOPOLOGIES, topo)
    first = wait_for(topology_settled(cluster, name), what="Ready")
    rev_name = first["status"]["revision"]["name"]
    before = {
        "rev": cluster.get(r.NETWORK_TOPOLOGY_REVISIONS, rev_name)["metadata"]["resourceVersion"],
        "topo": first["metadata"]["resourceVersion"],
        "classes": {
            x["deviceClassName"]: cluster.get(r.DEVICE_CLASSES, x["deviceClassName"])["metadata"][
                "resourceVersion"
            ]
            for x in first["status"]["roots"]
        },
    }
    with client_for(lab.url) as c2:
        second = Controller(c2, default_registry(), resync=0.5)
        second.start()
        try:
            second.queue.add(("topology", name))
            wait_for(lambda: second.processed >= 3, what="second controller processed")
        finally:
            second.stop()
    assert (
        cluster.get(r.NETWORK_TOPOLOGY_REVISIONS, rev_name)["metadata"]["resourceVersion"]
        == before["rev"]
    )
    assert cluster.get(r.NETWORK_TOPOLOGIES, name)["metadata"]["resourceVersion"] == before["topo"]
    for cname, rv in before["classes"].items():
        assert cluster.get(r.DEVICE_CLASSES, cname)["metadata"]["resourceVersion"] == rv


def test_plugin_status(cluster: Cluster, controller: Controller) -> None:
    def valid() -> dict[str, Any] | None:
        p = cluster.get(r.NETWORK_PLUGINS, "vlan-cni")
        c = ready(p)
        return p if c and c["status"] == "True" else None

    plugin = wait_for(valid, what="vlan-cni validated")
    assert plugin["status"]["contractDigest"].startswith("sha256:")
    broken = copy.deepcopy(plugin)
    broken["metadata"] = {"name": "broken-vlan"}
    broken.pop("status")
    broken["spec"]["implementation"] = {"type": "EffectProgram"}
    broken["spec"]["allowedEffects"] = ["linux/create-vlan/v1"]  # link-configure not allowed
    cluster.create(r.NETWORK_PLUGINS, broken)

    def invalid() -> dict[str, Any] | None:
        p = cluster.get(r.NETWORK_PLUGINS, "broken-vlan")
        c = ready(p)
        return p if c and c["status"] == "False" else None

    bad = wait_for(invalid, what="broken plugin rejected")
    assert "E_EFFECT_DENIED" in {d["code"] for d in bad["status"]["diagnostics"]}


def test_policy_validation_status(cluster: Cluster, controller: Controller) -> None:
    from dmn.api.identity import GROUP

    policy = {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "DeviceExposurePolicy",
        "metadata": {"name": "pf-macvlan"},
        "spec": {
            "priority": 200,
            "selector": {"kind": "PF", "pciAddresses": ["0000:18:00.0"]},
            "action": "Expose",
            "exposure": {
                "persona": "macvlan",
                "plugin": "macvlan-cni",
                "mode": "bridge",
                "allowMultipleAllocations": True,
                "capacity": {"children": {"value": "64", "default": "1", "validValues": ["1"]}},
                "compatibility": [
                    {"scope": "Interface", "domain": "interface-mode", "groups": ["macvlan"]}
                ],
                "effectPermissions": ["linux/create-macvlan/v1"],
            },
        },
    }
    cluster.create(r.DEVICE_EXPOSURE_POLICIES, policy)

    def validated() -> dict[str, Any] | None:
        p = cluster.get(r.DEVICE_EXPOSURE_POLICIES, "pf-macvlan")
        for c in (p.get("status") or {}).get("conditions") or []:
            if c["type"] == "Validated":
                return c  # type: ignore[no-any-return]
        return None

    cond = wait_for(validated, what="policy validated")
    assert cond["status"] == "True", cond


def test_descriptor_update_creates_new_revision(cluster: Cluster, controller: Controller) -> None:
    import yaml

    from tests.controller.support import PLUGIN_DIR

    plugin = yaml.safe_load((PLUGIN_DIR / "vlan-cni.yaml").read_text())
    plugin["metadata"] = {"name": "site-vlan"}
    plugin["spec"]["implementation"] = {"type": "EffectProgram"}
    cluster.create(r.NETWORK_PLUGINS, plugin)
    topo = example("dual-vf-bond-vlan")
    topo["metadata"]["name"] = "site"
    topo["spec"]["steps"][3]["pluginRef"]["name"] = "site-vlan"
    cluster.create(r.NETWORK_TOPOLOGIES, topo)
    first = wait_for(topology_settled(cluster, "site"), what="Ready")
    old = first["status"]["revision"]
    locked = cluster.get(r.NETWORK_TOPOLOGY_REVISIONS, old["name"])["spec"]["plugins"]
    assert "site-vlan" in {p["name"] for p in locked}

    live = cluster.get(r.NETWORK_PLUGINS, "site-vlan")
    live["spec"]["configSchema"]["properties"]["mtu"]["maximum"] = 9216
    cluster.replace(r.NETWORK_PLUGINS, live)

    def moved() -> dict[str, Any] | None:
        t = cluster.get(r.NETWORK_TOPOLOGIES, "site")
        ref = (t.get("status") or {}).get("revision") or {}
        return t if ref.get("name") not in (None, old["name"]) else None

    second = wait_for(moved, what="new revision after descriptor update")
    new = cluster.get(r.NETWORK_TOPOLOGY_REVISIONS, second["status"]["revision"]["name"])
    site = next(p for p in new["spec"]["plugins"] if p["name"] == "site-vlan")
    assert (
        site["descriptor"]["descriptor"]["spec"]["configSchema"]["properties"]["mtu"]["maximum"]
        == 9216
    )
    # nothing references the old revision: it is collected
    wait_for(lambda: gone(cluster, r.NETWORK_TOPOLOGY_REVISIONS, old["name"]), what="old collected")


def test_non_semantic_edit_keeps_the_revision(cluster: Cluster, controller: Controller) -> None:
    topo = example("dual-vf-bond-vlan")
    topo["metadata"]["name"] = "reorder"
    cluster.create(r.NETWORK_TOPOLOGIES, topo)
    first = wait_for(topology_settled(cluster, "reorder"), what="Ready")

    def reorder(spec: dict[str, Any]) -> None:
        spec["steps"].reverse()
        spec["effectBudget"]["allow"].reverse()

    updated = _update_spec(cluster, "reorder", reorder)
    assert updated["metadata"]["generation"] > first["metadata"]["generation"]
    second = wait_for(
        topology_settled(cluster, "reorder", updated["metadata"]["generation"]), what="settled"
    )
    assert ready(second)["status"] == "True", second["status"]  # type: ignore[index]
    assert second["status"]["revision"] == first["status"]["revision"]
