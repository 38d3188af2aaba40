"""What Multus automatic mode relies on from an API server, written once and run against the
lab's (``tests/apiserver/test_nad_semantics.py``) and the real kube-apiserver v1.37.2
(``tests/e2e/test_control_plane.py``), so the stand-in cannot drift from the real one.

Each check takes a :class:`~dmn.api.cluster.Cluster` with the NetworkAttachmentDefinition CRD
installed and a fresh namespace holding one Pod named ``owner`` (its UID is the owner
reference the shadows carry). The behaviours: create (a taken name is 409 AlreadyExists),
get, delete with a UID precondition (a wrong UID is 409 Conflict and changes nothing),
finalizers (a delete leaves the object with ``deletionTimestamp`` until its last finalizer
goes; no new finalizer once deletion started), JSON patch with ``test`` operations (a failed
test is 422, never a write; an unescaped annotation key via ``~1``), a JSON patch on a Pod's
annotations (created when absent), a resourceVersion precondition that is only what the
patch tests, and ``metadata.generation`` counting every change outside the metadata (the
container gate refuses a shadow whose generation is not 1: edited, even if put back).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from dmn.api.cluster import AlreadyExists, ApiFailure, Cluster, Conflict, Invalid, NotFound
from dmn.api.cluster import resources as r
from tests.fixtures.multus import nad

NADS = r.NETWORK_ATTACHMENT_DEFINITIONS
FINALIZER = "multus.dra-multi-network.schseba.github.io/attachment-protection"
OTHER_FINALIZER = "example.com/keep"


def pod(namespace: str, name: str = "owner") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": namespace, "name": name},
        "spec": {"containers": [{"name": "c", "image": "example.invalid/pause:1"}]},
    }


def shadow(namespace: str, owner: dict[str, Any], name: str = "") -> dict[str, Any]:
    meta = owner["metadata"]
    return nad(
        namespace,
        name or f"dra-{uuid.uuid4().hex[:12]}",
        '{"cniVersion":"1.0.0","name":"net","type":"macvlan","master":"eth1"}',
        ownerReferences=[
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": meta["name"],
                "uid": meta["uid"],
                "blockOwnerDeletion": False,
            }
        ],
        finalizers=[FINALIZER],
        labels={"multus.dra-multi-network.schseba.github.io/managed-by": "node-a"},
    )


def _tests(obj: dict[str, Any]) -> list[dict[str, Any]]:
    meta = obj["metadata"]
    return [
        {"op": "test", "path": "/metadata/uid", "value": meta["uid"]},
        {"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]},
    ]


def check_create_get_and_taken_name(cluster: Cluster, namespace: str, owner: dict) -> None:
    created = cluster.create(NADS, shadow(namespace, owner, "taken"), namespace)
    assert created["metadata"]["finalizers"] == [FINALIZER]
    assert created["metadata"]["ownerReferences"][0]["uid"] == owner["metadata"]["uid"]
    got = cluster.get(NADS, "taken", namespace)
    assert got["spec"] == created["spec"] and got["metadata"]["uid"] == created["metadata"]["uid"]
    with pytest.raises(AlreadyExists):
        cluster.create(NADS, shadow(namespace, owner, "taken"), namespace)


def check_delete_uid_precondition_and_finalizer(
    cluster: Cluster, namespace: str, owner: dict
) -> None:
    obj = cluster.create(NADS, shadow(namespace, owner), namespace)
    name, uid = obj["metadata"]["name"], obj["metadata"]["uid"]
    with pytest.raises(Conflict):
        cluster.delete(NADS, name, namespace, uid=str(uuid.uuid4()))
    assert not cluster.get(NADS, name, namespace)["metadata"].get("deletionTimestamp")
    cluster.delete(NADS, name, namespace, uid=uid)
    held = cluster.get(NADS, name, namespace)
    assert held["metadata"]["deletionTimestamp"] and held["metadata"]["uid"] == uid
    cluster.delete(NADS, name, namespace, uid=uid)  # asked again while held: no error
    with pytest.raises(Invalid):  # no new finalizer once deletion started
        cluster.patch(
            NADS,
            name,
            [{"op": "add", "path": "/metadata/finalizers/-", "value": OTHER_FINALIZER}],
            namespace,
            patch_type="json",
        )
    drop = [
        *_tests(held),
        {"op": "test", "path": "/metadata/finalizers/0", "value": FINALIZER},
        {"op": "remove", "path": "/metadata/finalizers/0"},
    ]
    cluster.patch(NADS, name, drop, namespace, patch_type="json")
    with pytest.raises(NotFound):
        cluster.get(NADS, name, namespace)


def check_only_our_finalizer_goes(cluster: Cluster, namespace: str, owner: dict) -> None:
    body = shadow(namespace, owner)
    body["metadata"]["finalizers"] = [OTHER_FINALIZER, FINALIZER]
    obj = cluster.create(NADS, body, namespace)
    name = obj["metadata"]["name"]
    cluster.delete(NADS, name, namespace, uid=obj["metadata"]["uid"])
    held = cluster.get(NADS, name, namespace)
    drop = [
        *_tests(held),
        {"op": "test", "path": "/metadata/finalizers/1", "value": FINALIZER},
        {"op": "remove", "path": "/metadata/finalizers/1"},
    ]
    after = cluster.patch(NADS, name, drop, namespace, patch_type="json")
    assert after["metadata"]["finalizers"] == [OTHER_FINALIZER]
    assert after["metadata"]["deletionTimestamp"]
    cluster.patch(
        NADS,
        name,
        [{"op": "remove", "path": "/metadata/finalizers/0"}],
        namespace,
        patch_type="json",
    )
    with pytest.raises(NotFound):
        cluster.get(NADS, name, namespace)


def check_failed_test_is_422_and_writes_nothing(
    cluster: Cluster, namespace: str, owner: dict
) -> None:
    obj = cluster.create(NADS, shadow(namespace, owner), namespace)
    name = obj["metadata"]["name"]
    stale = _tests(obj)
    cluster.patch(
        NADS,
        name,
        {"metadata": {"labels": {"example.com/other": "writer"}}},
        namespace,
    )
    with pytest.raises(ApiFailure) as err:
        cluster.patch(
            NADS,
            name,
            [*stale, {"op": "remove", "path": "/metadata/finalizers/0"}],
            namespace,
            patch_type="json",
        )
    assert err.value.code == 422  # a failed test, not a stale-version 409
    assert cluster.get(NADS, name, namespace)["metadata"]["finalizers"] == [FINALIZER]
    wrong_uid = [{"op": "test", "path": "/metadata/uid", "value": str(uuid.uuid4())}]
    with pytest.raises(ApiFailure) as err:
        cluster.patch(
            NADS,
            name,
            [*wrong_uid, {"op": "remove", "path": "/metadata/finalizers/0"}],
            namespace,
            patch_type="json",
        )
    assert err.value.code == 422


def check_pod_annotation_json_patch(cluster: Cluster, namespace: str, owner: dict) -> None:
    live = cluster.get(r.PODS, "owner", namespace)
    assert not live["metadata"].get("annotations")
    key = "multus.dra-multi-network.schseba.github.io/selections"
    ops = [
        *_tests(live),
        {
            "op": "add",
            "path": "/metadata/annotations",
            "value": {"k8s.v1.cni.cncf.io/networks": "[]", key: "{}"},
        },
    ]
    patched = cluster.patch(r.PODS, "owner", ops, namespace, patch_type="json")
    assert patched["metadata"]["annotations"][key] == "{}"
    escaped = "multus.dra-multi-network.schseba.github.io~1selections"
    ops = [
        *_tests(patched),
        {"op": "add", "path": f"/metadata/annotations/{escaped}", "value": '{"v":1}'},
        {"op": "remove", "path": "/metadata/annotations/k8s.v1.cni.cncf.io~1networks"},
    ]
    again = cluster.patch(r.PODS, "owner", ops, namespace, patch_type="json")
    assert again["metadata"]["annotations"] == {key: '{"v":1}'}
    with pytest.raises(ApiFailure) as err:  # the version the first patch tested is gone
        cluster.patch(
            r.PODS,
            "owner",
            [*_tests(patched), {"op": "remove", "path": f"/metadata/annotations/{escaped}"}],
            namespace,
            patch_type="json",
        )
    assert err.value.code == 422


def check_generation_counts_every_spec_change(
    cluster: Cluster, namespace: str, owner: dict
) -> None:
    obj = cluster.create(NADS, shadow(namespace, owner), namespace)
    name, frozen = obj["metadata"]["name"], obj["spec"]["config"]
    assert obj["metadata"]["generation"] == 1
    labelled = cluster.patch(NADS, name, {"metadata": {"labels": {"x": "y"}}}, namespace)
    assert labelled["metadata"]["generation"] == 1  # metadata is not counted
    edited = cluster.patch(NADS, name, {"spec": {"config": frozen + " "}}, namespace)
    assert edited["metadata"]["generation"] == 2
    back = cluster.patch(NADS, name, {"spec": {"config": frozen}}, namespace)
    assert back["spec"]["config"] == frozen and back["metadata"]["generation"] == 3
    cluster.patch(NADS, name, {"metadata": {"finalizers": None}}, namespace)
    cluster.delete(NADS, name, namespace)


CHECKS = (
    check_create_get_and_taken_name,
    check_delete_uid_precondition_and_finalizer,
    check_only_our_finalizer_goes,
    check_failed_test_is_422_and_writes_nothing,
    check_pod_annotation_json_patch,
    check_generation_counts_every_spec_change,
)
