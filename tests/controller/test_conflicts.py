"""Pre-existing objects that differ from what the controller would write are errors,
never overwritten (reconciler driven directly, no background controller)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from dmn.api.cluster import Cluster
from dmn.api.cluster import resources as r
from dmn.controller.compile.compiler import compile_topology
from dmn.controller.compile.plugin_sources import plugins_from_objects
from dmn.controller.manager import Controller
from dmn.controller.topology import TopologyReconciler
from dmn.controller.workqueue import RetryLater
from dmn.lab.apiserver import LabApiServer
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


def test_revision_still_being_deleted_is_retried_not_dropped(cluster: Cluster) -> None:
    topo = example("vfio")
    topo["metadata"]["name"] = "dying"
    created = cluster.create(r.NETWORK_TOPOLOGIES, topo)
    plugins, _ = plugins_from_objects(cluster.list(r.NETWORK_PLUGINS).items)
    compiled = compile_topology(created, plugins, uid=created["metadata"]["uid"]).compiled
    assert compiled is not None
    # an identical revision a foreign finalizer still holds while it is being deleted
    held = copy.deepcopy(compiled.revision)
    held["metadata"]["finalizers"] = ["example.com/hold"]
    cluster.create(r.NETWORK_TOPOLOGY_REVISIONS, held)
    cluster.delete(r.NETWORK_TOPOLOGY_REVISIONS, compiled.revision_name)

    rec = TopologyReconciler(cluster, default_registry())
    with pytest.raises(RetryLater):
        rec.reconcile("dying")
    cond = ready(cluster.get(r.NETWORK_TOPOLOGIES, "dying"))
    assert cond is not None and cond["status"] == "False" and cond["reason"] == "Conflict"

    # the hold is released; the retry publishes a fresh revision
    dying = cluster.get(r.NETWORK_TOPOLOGY_REVISIONS, compiled.revision_name)
    dying["metadata"]["finalizers"] = []
    cluster.replace(r.NETWORK_TOPOLOGY_REVISIONS, dying)
    rec.reconcile("dying")
    after = cluster.get(r.NETWORK_TOPOLOGIES, "dying")
    assert ready(after)["status"] == "True"  # type: ignore[index]
    assert after["status"]["revision"]["name"] == compiled.revision_name


def test_retry_later_goes_back_through_the_backoff(cluster: Cluster) -> None:
    ctl = Controller(cluster, default_registry())

    def transient(name: str) -> None:
        raise RetryLater(f"{name} not yet")

    ctl.topologies.reconcile = transient  # type: ignore[method-assign]
    ctl.queue.add(("topology", "t"))
    assert ctl.process_one(timeout=30.0)
    assert ctl.queue.failures(("topology", "t")) == 1
    # the key comes back after its backoff (base 10 ms), not only at the next resync
    assert ctl.queue.get(30.0) == ("topology", "t")


def test_a_refused_generated_class_is_reported_then_retried(
    lab: LabApiServer, cluster: Cluster
) -> None:
    from dmn.lab.apiserver import errors as lab_errors

    class RefuseClasses:
        """Stands in for an admission webhook that denies DeviceClass writes."""

        def mutate(self, attrs: Any) -> None:
            return None

        def validate(self, attrs: Any) -> None:
            if attrs.rt.kind == "DeviceClass":
                raise lab_errors.forbidden_request("deviceclasses: denied by test admission")

    topo = example("host-device")
    topo["metadata"]["name"] = "refused"
    cluster.create(r.NETWORK_TOPOLOGIES, topo)
    rec = TopologyReconciler(cluster, default_registry())
    previous = lab.store.admission
    lab.store.admission = RefuseClasses()
    try:
        with pytest.raises(RetryLater):
            rec.reconcile("refused")
    finally:
        lab.store.admission = previous
    status = cluster.get(r.NETWORK_TOPOLOGIES, "refused")["status"]
    cond = ready({"status": status})
    assert cond is not None and cond["status"] == "False" and cond["reason"] == "Rejected"
    assert status["diagnostics"][0]["code"] == "E_ACCESS"
    assert "denied by test admission" in status["diagnostics"][0]["message"]
    rec.reconcile("refused")  # the retry, admission fixed
    assert ready(cluster.get(r.NETWORK_TOPOLOGIES, "refused"))["status"] == "True"  # type: ignore[index]


def test_class_of_a_collected_incarnation_is_replaced(cluster: Cluster) -> None:
    """A topology changed back to an earlier digest while the collector removed that
    revision: our class still names the collected revision's UID; it is replaced, not
    reported as a conflict forever."""
    topo = example("host-device")
    topo["metadata"]["name"] = "flipback"
    cluster.create(r.NETWORK_TOPOLOGIES, topo)
    rec = TopologyReconciler(cluster, default_registry())
    rec.reconcile("flipback")
    first = cluster.get(r.NETWORK_TOPOLOGIES, "flipback")["status"]
    rev_name, old_uid = first["revision"]["name"], first["revision"]["uid"]
    # the collector deleted the revision; the class it had already passed survived
    cluster.delete(r.NETWORK_TOPOLOGY_REVISIONS, rev_name)
    dying = cluster.get(r.NETWORK_TOPOLOGY_REVISIONS, rev_name)
    dying["metadata"]["finalizers"] = []
    cluster.replace(r.NETWORK_TOPOLOGY_REVISIONS, dying)

    with pytest.raises(RetryLater):
        rec.reconcile("flipback")
    rec.reconcile("flipback")
    after = cluster.get(r.NETWORK_TOPOLOGIES, "flipback")["status"]
    assert ready({"status": after})["status"] == "True"  # type: ignore[index]
    new_uid = after["revision"]["uid"]
    assert after["revision"]["name"] == rev_name and new_uid != old_uid
    cls = cluster.get(r.DEVICE_CLASSES, after["roots"][0]["deviceClassName"])
    assert cls["spec"]["config"][0]["opaque"]["parameters"]["revisionRef"]["uid"] == new_uid


def test_class_event_of_a_long_named_topology_names_that_topology(cluster: Cluster) -> None:
    """The topology label on a class is cut to 63 characters; a class event still queues
    the topology it belongs to (not the cut label), so a deleted class is restored at once
    rather than at the next resync."""
    from dmn.api.cluster import ListWatch, WatchEvent
    from dmn.api.identity import LABEL_TOPOLOGY

    name = "a-topology-name-that-is-longer-than-a-kubernetes-label-value-may-be-x"
    ctl = Controller(cluster, default_registry())
    topologies = ListWatch(cluster, r.NETWORK_TOPOLOGIES)
    topologies.known = {("", name): {"metadata": {"name": name}}, ("", "other"): {}}
    ctl._watches.append(topologies)
    cls = {"metadata": {"name": "c", "labels": {LABEL_TOPOLOGY: name[:63].rstrip("-.")}}}
    ctl._on_event("class", WatchEvent("DELETED", cls))
    assert ctl.queue.get(0) == ("topology", name)
    assert ctl.queue.get(0) is None


def test_a_tampered_builtin_stored_without_admission_never_compiles(cluster: Cluster) -> None:
    """Compilation repeats admission's builtin check: a Builtin CR granting its handler an
    effect the build does not implement is invalid, and a topology using it says why."""
    from dmn.controller.plugin_status import PluginStatusReconciler
    from tests.controller.support import PLUGIN_DIR

    tampered = yaml.safe_load((PLUGIN_DIR / "vlan-cni.yaml").read_text())
    tampered["metadata"] = {"name": "tampered-vlan"}
    tampered["spec"]["allowedEffects"] = [*tampered["spec"]["allowedEffects"], "linux/link-move/v1"]
    cluster.create(r.NETWORK_PLUGINS, tampered)  # no webhook in this lab: stored as is

    PluginStatusReconciler(cluster, default_registry()).reconcile("tampered-vlan")
    plugin = cluster.get(r.NETWORK_PLUGINS, "tampered-vlan")
    assert ready(plugin)["status"] == "False"  # type: ignore[index]
    assert {d["code"] for d in plugin["status"]["diagnostics"]} == {"E_CONFLICT"}

    topo = example("dual-vf-bond-vlan")
    topo["metadata"]["name"] = "uses-tampered"
    topo["spec"]["steps"][3]["pluginRef"]["name"] = "tampered-vlan"
    cluster.create(r.NETWORK_TOPOLOGIES, topo)
    TopologyReconciler(cluster, default_registry()).reconcile("uses-tampered")
    status = cluster.get(r.NETWORK_TOPOLOGIES, "uses-tampered")["status"]
    assert ready({"status": status})["status"] == "False"  # type: ignore[index]
    (diag,) = status["diagnostics"]
    assert diag["code"] == "E_REF_UNRESOLVED" and diag["path"] == "spec.steps[3].pluginRef.name"
    assert "is invalid: E_CONFLICT" in diag["message"]
    assert "revision" not in status


def test_collector_keeps_a_revision_its_topology_turned_back_to_meanwhile(
    cluster: Cluster,
) -> None:
    from dmn.controller.revision_gc import Retention, RevisionCollector

    topo = example("host-device")
    topo["metadata"]["name"] = "turnback"
    cluster.create(r.NETWORK_TOPOLOGIES, topo)
    rec = TopologyReconciler(cluster, default_registry())
    rec.reconcile("turnback")
    old = cluster.get(r.NETWORK_TOPOLOGIES, "turnback")
    old_name = old["status"]["revision"]["name"]
    old["spec"]["steps"][0]["config"]["mtu"] = 1500  # a semantic change: new revision
    cluster.replace(r.NETWORK_TOPOLOGIES, old)
    rec.reconcile("turnback")
    assert cluster.get(r.NETWORK_TOPOLOGIES, "turnback")["status"]["revision"]["name"] != old_name

    class TurnedBackWhileDeciding(RevisionCollector):
        def retention(self, revision: dict[str, Any]) -> Retention:
            verdict = super().retention(revision)
            # the topology is edited back and its reconciler starts publishing old_name
            self.publishing[old["metadata"]["uid"]] = old_name
            return verdict

    racing = TurnedBackWhileDeciding(cluster, publishing={})
    assert racing.reconcile(old_name) is False
    assert (
        cluster.get(r.NETWORK_TOPOLOGY_REVISIONS, old_name)["metadata"].get("deletionTimestamp")
        is None
    )
    assert RevisionCollector(cluster).reconcile(old_name) is True  # released: collected
