"""A topology root's stable DeviceClass (issue 37.6) with the real controller on the lab API
server: one name across revisions, following the newest Ready revision only; withdrawn with
the topology; a name another topology holds is refused with E_CONFLICT; the revision it
names is never collected."""

from __future__ import annotations

import contextlib
from typing import Any

import kubernetes_validate

from dmn.api.cluster import Cluster, NotFound
from dmn.api.cluster import resources as r
from dmn.api.identity import LABEL_STABLE_CLASS
from dmn.controller.manager import Controller
from dmn.controller.revision_gc import RevisionCollector
from dmn.controller.stable_classes import bound_revision, pinned_revisions
from tests.controller.support import example, ready, topology_settled, wait_for


def _topology(name: str, root: str = "net1") -> dict[str, Any]:
    topo = example("shared-macvlan")
    topo["metadata"] = {"name": name}
    topo["spec"]["steps"][0]["id"] = root
    return topo


def _settled(cluster: Cluster, name: str) -> dict[str, Any]:
    generation = cluster.get(r.NETWORK_TOPOLOGIES, name)["metadata"]["generation"]
    return wait_for(topology_settled(cluster, name, generation), what=f"{name} settled")


def _gone(cluster: Cluster, name: str) -> bool | None:
    try:
        cluster.get(r.DEVICE_CLASSES, name)
    except NotFound:
        return True
    return None


def _cleanup(cluster: Cluster, *names: str) -> None:
    for name in names:
        with contextlib.suppress(NotFound):
            cluster.delete(r.NETWORK_TOPOLOGIES, name)


def test_stable_class_follows_the_newest_ready_revision(
    cluster: Cluster, controller: Controller
) -> None:
    name = "stable-follow"
    cluster.create(r.NETWORK_TOPOLOGIES, _topology(name))
    first = _settled(cluster, name)
    assert ready(first)["status"] == "True"  # type: ignore[index]
    (root,) = first["status"]["roots"]
    assert root["stableDeviceClassName"] == "stable-follow-net1"
    stable = cluster.get(r.DEVICE_CLASSES, "stable-follow-net1")
    per_revision = cluster.get(r.DEVICE_CLASSES, root["deviceClassName"])
    kubernetes_validate.validate(
        {k: v for k, v in stable.items() if k != "status"}, "1.37.0", strict=True
    )
    assert stable["spec"] == per_revision["spec"]
    assert stable["metadata"]["labels"][LABEL_STABLE_CLASS] == "true"
    assert bound_revision(stable) == first["status"]["revision"]

    # an edit that does not compile: the stable class stays on the Ready revision
    topo = cluster.get(r.NETWORK_TOPOLOGIES, name)
    topo["spec"]["steps"][0]["config"]["mtu"] = 1
    cluster.replace(r.NETWORK_TOPOLOGIES, topo)
    failed = _settled(cluster, name)
    assert ready(failed)["status"] == "False"  # type: ignore[index]
    held = cluster.get(r.DEVICE_CLASSES, "stable-follow-net1")
    assert held["metadata"]["resourceVersion"] == stable["metadata"]["resourceVersion"]

    # a semantic edit: a new revision with a new per-revision class; the stable class keeps
    # its name and now binds the new revision
    topo = cluster.get(r.NETWORK_TOPOLOGIES, name)
    topo["spec"]["steps"][0]["config"]["mtu"] = 1400
    cluster.replace(r.NETWORK_TOPOLOGIES, topo)
    second = _settled(cluster, name)
    assert ready(second)["status"] == "True"  # type: ignore[index]
    (root2,) = second["status"]["roots"]
    assert root2["deviceClassName"] != root["deviceClassName"]
    assert root2["stableDeviceClassName"] == "stable-follow-net1"
    moved = cluster.get(r.DEVICE_CLASSES, "stable-follow-net1")
    assert bound_revision(moved) == second["status"]["revision"]
    assert moved["spec"] == cluster.get(r.DEVICE_CLASSES, root2["deviceClassName"])["spec"]

    # deleting the topology withdraws the stable class at once
    cluster.delete(r.NETWORK_TOPOLOGIES, name)
    wait_for(lambda: _gone(cluster, "stable-follow-net1"), what="stable class withdrawn")


def test_a_name_another_topology_holds_is_a_conflict(
    cluster: Cluster, controller: Controller
) -> None:
    cluster.create(r.NETWORK_TOPOLOGIES, _topology("meet-a", root="net1"))
    assert ready(_settled(cluster, "meet-a"))["status"] == "True"  # type: ignore[index]
    holder = cluster.get(r.DEVICE_CLASSES, "meet-a-net1")
    # "meet" + "a-net1" meets "meet-a" + "net1"
    cluster.create(r.NETWORK_TOPOLOGIES, _topology("meet", root="a-net1"))
    refused = _settled(cluster, "meet")
    cond = ready(refused)
    assert cond is not None and cond["status"] == "False" and cond["reason"] == "Conflict"
    (diag,) = refused["status"]["diagnostics"]
    assert diag["code"] == "E_CONFLICT"
    assert "'meet-a-net1'" in diag["message"] and "'meet-a'" in diag["message"]
    again = cluster.get(r.DEVICE_CLASSES, "meet-a-net1")
    assert again["metadata"]["resourceVersion"] == holder["metadata"]["resourceVersion"]
    _cleanup(cluster, "meet", "meet-a")
    wait_for(lambda: _gone(cluster, "meet-a-net1"), what="stable class withdrawn")


def test_a_revision_a_stable_class_names_is_retained(
    cluster: Cluster, controller: Controller
) -> None:
    name = "stable-pin"
    cluster.create(r.NETWORK_TOPOLOGIES, _topology(name))
    first = _settled(cluster, name)
    revision = cluster.get(r.NETWORK_TOPOLOGY_REVISIONS, first["status"]["revision"]["name"])
    stable = cluster.get(r.DEVICE_CLASSES, f"{name}-net1")
    assert pinned_revisions([stable]) == {revision["metadata"]["name"]: f"{name}-net1"}
    # a collector that sees the topology as gone still keeps the revision the stable
    # class names (in the window before the class is withdrawn)
    collector = RevisionCollector(cluster)
    gone_topology = dict(revision, spec=dict(revision["spec"], topologyRef={"name": "x"}))
    verdict = collector.retention(gone_topology)
    assert (verdict.retained, verdict.reason) == (True, "StableClass"), verdict
    _cleanup(cluster, name)
    wait_for(lambda: _gone(cluster, f"{name}-net1"), what="stable class withdrawn")


def test_an_extended_resource_name_goes_on_the_stable_class_only(
    cluster: Cluster, controller: Controller
) -> None:
    """A root's ``extendedResourceName`` is set on its stable class (valid against the
    upstream 1.37 schema), never on the per-revision class: one extended resource, one
    class, across revisions."""
    name = "stable-extended"
    topo = _topology(name)
    topo["spec"]["steps"][0]["extendedResourceName"] = "example.com/fast-net"
    try:
        cluster.create(r.NETWORK_TOPOLOGIES, topo)
        settled = _settled(cluster, name)
        assert ready(settled)["status"] == "True"  # type: ignore[index]
        (root,) = settled["status"]["roots"]
        stable = cluster.get(r.DEVICE_CLASSES, root["stableDeviceClassName"])
        assert stable["spec"]["extendedResourceName"] == "example.com/fast-net"
        kubernetes_validate.validate(
            {k: v for k, v in stable.items() if k != "status"}, "1.37.0", strict=True
        )
        per_revision = cluster.get(r.DEVICE_CLASSES, root["deviceClassName"])
        assert "extendedResourceName" not in per_revision["spec"]
    finally:
        _cleanup(cluster, name)
