"""Pre-existing objects that differ from what the controller would write are errors,
never overwritten (reconciler driven directly, no background controller)."""

from __future__ import annotations

import copy

from dmn.api.cluster import Cluster
from dmn.api.cluster import resources as r
from dmn.controller.compile.compiler import compile_topology
from dmn.controller.compile.plugin_sources import plugins_from_objects
from dmn.controller.topology import TopologyReconciler
from dmn.opcodes.registry import default_registry
from tests.controller.support import example, ready


def test_revision_name_collision_is_a_conflict(cluster: Cluster) -> None:
    topo = example("vfio")
    topo["metadata"]["name"] = "collide"
    created = cluster.create(r.NETWORK_TOPOLOGIES, topo)
    plugins, _ = plugins_from_objects(cluster.list(r.NETWORK_PLUGINS).items)
    compiled = compile_topology(created, plugins, uid=created["metadata"]["uid"]).compiled
    assert compiled is not None
    squatter = copy.deepcopy(compiled.revision)
    squatter["spec"]["digest"] = "sha256:" + "0" * 64
    squatter = cluster.create(r.NETWORK_TOPOLOGY_REVISIONS, squatter)

    TopologyReconciler(cluster, default_registry()).reconcile("collide")

    status = cluster.get(r.NETWORK_TOPOLOGIES, "collide")["status"]
    cond = ready({"status": status})
    assert cond is not None and cond["status"] == "False" and cond["reason"] == "Conflict"
    assert status["diagnostics"][0]["code"] == "E_CONFLICT"
    after = cluster.get(r.NETWORK_TOPOLOGY_REVISIONS, compiled.revision_name)
    assert after["metadata"]["resourceVersion"] == squatter["metadata"]["resourceVersion"]
    assert (
        cluster.list(
            r.DEVICE_CLASSES, label_selector="dra-multi-network.schseba.github.io/topology=collide"
        ).items
        == []
    )


def test_reconcile_is_idempotent(cluster: Cluster) -> None:
    topo = example("host-device")
    topo["metadata"]["name"] = "idem"
    cluster.create(r.NETWORK_TOPOLOGIES, topo)
    rec = TopologyReconciler(cluster, default_registry())
    rec.reconcile("idem")
    first = cluster.get(r.NETWORK_TOPOLOGIES, "idem")
    assert ready(first)["status"] == "True"  # type: ignore[index]
    rec.reconcile("idem")
    rec.reconcile("idem")
    again = cluster.get(r.NETWORK_TOPOLOGIES, "idem")
    assert again["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
