"""Finalizers and deletionTimestamp, preconditions, graceful Pod deletion, namespaces, GC."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from .conftest import GROUP, unique, widget


def gone(read, *args) -> bool:
    try:
        read(*args)
    except ApiException as exc:
        return exc.status == 404
    return False


def test_finalizer_holds_object_until_removed(
    custom: client.CustomObjectsApi, crds: None, ns: str
) -> None:
    body = widget("f")
    body["metadata"]["finalizers"] = ["lab.example.com/keep"]
    created = custom.create_namespaced_custom_object(GROUP, "v1", ns, "widgets", body)
    pending = custom.delete_namespaced_custom_object(GROUP, "v1", ns, "widgets", "f")
    assert pending["metadata"]["deletionTimestamp"]
    assert pending["metadata"]["generation"] == created["metadata"]["generation"] + 1
    current = custom.get_namespaced_custom_object(GROUP, "v1", ns, "widgets", "f")
    assert current["metadata"]["deletionTimestamp"]
    # no new finalizers while deleting
    with pytest.raises(ApiException) as err:
        custom.patch_namespaced_custom_object(
            GROUP,
            "v1",
            ns,
            "widgets",
            "f",
            {"metadata": {"finalizers": ["lab.example.com/keep", "lab.example.com/more"]}},
        )
    assert err.value.status == 422
    assert json.loads(err.value.body)["details"]["causes"][0]["field"] == "metadata.finalizers"
    custom.patch_namespaced_custom_object(
        GROUP, "v1", ns, "widgets", "f", {"metadata": {"finalizers": None}}
    )
    assert gone(custom.get_namespaced_custom_object, GROUP, "v1", ns, "widgets", "f")


def test_delete_preconditions(core: client.CoreV1Api, ns: str) -> None:
    cm = core.create_namespaced_config_map(ns, {"metadata": {"name": "p"}})
    with pytest.raises(ApiException) as err:
        core.delete_namespaced_config_map("p", ns, body={"preconditions": {"uid": "wrong"}})
    assert err.value.status == 409
    core.delete_namespaced_config_map("p", ns, body={"preconditions": {"uid": cm.metadata.uid}})
    assert gone(core.read_namespaced_config_map, "p", ns)


def test_bound_pod_deletes_gracefully(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_pod(
        ns,
        {
            "metadata": {"name": "bound"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
        },
    )
    core.create_namespaced_pod(
        ns, {"metadata": {"name": "unbound"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    )
    core.delete_namespaced_pod("unbound", ns)
    assert gone(core.read_namespaced_pod, "unbound", ns)
    core.delete_namespaced_pod("bound", ns)
    pending = core.read_namespaced_pod("bound", ns)
    assert (
        pending.metadata.deletion_timestamp and pending.metadata.deletion_grace_period_seconds == 30
    )
    core.delete_namespaced_pod("bound", ns, grace_period_seconds=0)  # what the kubelet does
    assert gone(core.read_namespaced_pod, "bound", ns)


def test_pod_binding_sets_node_once(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_pod(
        ns, {"metadata": {"name": "b"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    )
    # the real server answers a Status the generated V1Binding model cannot hold (a known
    # client quirk), hence _preload_content=False
    core.create_namespaced_pod_binding(
        "b",
        ns,
        {"metadata": {"name": "b"}, "target": {"kind": "Node", "name": "n1"}},
        _preload_content=False,
    )
    assert core.read_namespaced_pod("b", ns).spec.node_name == "n1"
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod_binding(
            "b",
            ns,
            {"metadata": {"name": "b"}, "target": {"kind": "Node", "name": "n2"}},
            _preload_content=False,
        )
    assert err.value.status == 409


def test_namespace_deletion_removes_contents(
    core: client.CoreV1Api, custom: client.CustomObjectsApi, crds: None
) -> None:
    ns = unique("nsdel")
    core.create_namespace({"metadata": {"name": ns}})
    core.create_namespaced_config_map(ns, {"metadata": {"name": "c"}})
    held = widget("held")
    held["metadata"]["finalizers"] = ["lab.example.com/keep"]
    custom.create_namespaced_custom_object(GROUP, "v1", ns, "widgets", held)
    core.delete_namespace(ns)
    terminating = core.read_namespace(ns)
    assert terminating.status.phase == "Terminating"
    assert gone(core.read_namespaced_config_map, "c", ns)
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map(ns, {"metadata": {"name": "late"}})
    assert err.value.status == 403
    custom.patch_namespaced_custom_object(
        GROUP, "v1", ns, "widgets", "held", {"metadata": {"finalizers": None}}
    )
    assert gone(core.read_namespace, ns)


def owner_ref(obj: client.V1ConfigMap, *, block: bool = False) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": obj.metadata.name,
        "uid": obj.metadata.uid,
        "blockOwnerDeletion": block,
    }


def test_background_garbage_collection(core: client.CoreV1Api, ns: str) -> None:
    owner = core.create_namespaced_config_map(ns, {"metadata": {"name": "owner"}})
    other = core.create_namespaced_config_map(ns, {"metadata": {"name": "other"}})
    core.create_namespaced_config_map(
        ns, {"metadata": {"name": "dep", "ownerReferences": [owner_ref(owner)]}}
    )
    core.create_namespaced_config_map(
        ns,
        {"metadata": {"name": "shared", "ownerReferences": [owner_ref(owner), owner_ref(other)]}},
    )
    core.delete_namespaced_config_map("owner", ns)
    assert gone(core.read_namespaced_config_map, "dep", ns)
    shared = core.read_namespaced_config_map("shared", ns)
    assert [r.name for r in shared.metadata.owner_references] == ["other"]


def test_dangling_owner_reference_is_collected(core: client.CoreV1Api, ns: str) -> None:
    ref = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "ghost",
        "uid": "00000000-0000-0000-0000-000000000000",
    }
    core.create_namespaced_config_map(
        ns, {"metadata": {"name": "orphan", "ownerReferences": [ref]}}
    )
    assert gone(core.read_namespaced_config_map, "orphan", ns)


def test_orphan_propagation_keeps_dependents(core: client.CoreV1Api, ns: str) -> None:
    owner = core.create_namespaced_config_map(ns, {"metadata": {"name": "o"}})
    core.create_namespaced_config_map(
        ns, {"metadata": {"name": "d", "ownerReferences": [owner_ref(owner)]}}
    )
    core.delete_namespaced_config_map("o", ns, propagation_policy="Orphan")
    assert not core.read_namespaced_config_map("d", ns).metadata.owner_references


def test_foreground_deletion_waits_for_blocking_dependents(core: client.CoreV1Api, ns: str) -> None:
    owner = core.create_namespaced_config_map(ns, {"metadata": {"name": "fg"}})
    core.create_namespaced_config_map(
        ns,
        {
            "metadata": {
                "name": "blocker",
                "finalizers": ["lab.example.com/keep"],
                "ownerReferences": [owner_ref(owner, block=True)],
            }
        },
    )
    core.delete_namespaced_config_map("fg", ns, propagation_policy="Foreground")
    waiting = core.read_namespaced_config_map("fg", ns)
    assert (
        waiting.metadata.deletion_timestamp and "foregroundDeletion" in waiting.metadata.finalizers
    )
    assert core.read_namespaced_config_map("blocker", ns).metadata.deletion_timestamp
    core.patch_namespaced_config_map(
        "blocker",
        ns,
        {"metadata": {"finalizers": None}},
        _content_type="application/merge-patch+json",
    )
    assert gone(core.read_namespaced_config_map, "blocker", ns)
    assert gone(core.read_namespaced_config_map, "fg", ns)


def test_cluster_scoped_owner_collects_custom_resources(
    api: client.ApiClient, custom: client.CustomObjectsApi, crds: None, ns: str
) -> None:
    resource = client.ResourceV1Api(api)
    name = unique("g")
    gadget = custom.create_cluster_custom_object(
        GROUP,
        "v1",
        "gadgets",
        {"apiVersion": f"{GROUP}/v1", "kind": "Gadget", "metadata": {"name": name}},
    )
    ref = {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Gadget",
        "name": name,
        "uid": gadget["metadata"]["uid"],
        "controller": True,
    }
    resource.create_device_class({"metadata": {"name": name, "ownerReferences": [ref]}, "spec": {}})
    custom.delete_cluster_custom_object(GROUP, "v1", "gadgets", name)
    assert gone(resource.read_device_class, name)


def test_delete_collection(core: client.CoreV1Api, ns: str) -> None:
    for i, app in enumerate(["a", "a", "b"]):
        core.create_namespaced_config_map(
            ns, {"metadata": {"name": f"c{i}", "labels": {"app": app}}}
        )
    core.delete_collection_namespaced_config_map(ns, label_selector="app=a")
    assert [c.metadata.name for c in core.list_namespaced_config_map(ns).items] == ["c2"]


def test_status_update_during_graceful_deletion_keeps_the_pod(
    core: client.CoreV1Api, ns: str
) -> None:
    core.create_namespaced_pod(
        ns,
        {
            "metadata": {"name": "g"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
        },
    )
    core.delete_namespaced_pod("g", ns)
    core.patch_namespaced_pod_status("g", ns, {"status": {"phase": "Succeeded"}})
    assert core.read_namespaced_pod("g", ns).status.phase == "Succeeded"
    core.delete_namespaced_pod("g", ns, grace_period_seconds=0)
    assert gone(core.read_namespaced_pod, "g", ns)


def test_event_field_selectors(core: client.CoreV1Api, ns: str) -> None:
    for name, obj, source in [("e1", "a", "kubelet"), ("e2", "b", "dmn")]:
        core.create_namespaced_event(
            ns,
            {
                "metadata": {"name": name},
                "involvedObject": {"kind": "Pod", "name": obj, "namespace": ns},
                "reason": "R",
                "source": {"component": source},
            },
        )
    by_object = core.list_namespaced_event(
        ns, field_selector="involvedObject.name=b,involvedObject.kind=Pod"
    )
    assert [e.metadata.name for e in by_object.items] == ["e2"]
    assert [
        e.metadata.name
        for e in core.list_namespaced_event(ns, field_selector="source=kubelet").items
    ] == ["e1"]
