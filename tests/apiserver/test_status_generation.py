"""Status subresource split and metadata.generation."""

from __future__ import annotations

from kubernetes import client

from .conftest import GROUP, widget


def test_status_dropped_on_create_and_ignored_on_main_update(
    custom: client.CustomObjectsApi, crds: None, ns: str
) -> None:
    body = widget("s")
    body["status"] = {"phase": "Bogus"}
    created = custom.create_namespaced_custom_object(GROUP, "v1", ns, "widgets", body)
    assert "status" not in created and created["metadata"]["generation"] == 1
    with_status = custom.patch_namespaced_custom_object_status(
        GROUP,
        "v1",
        ns,
        "widgets",
        "s",
        {"status": {"phase": "Ready", "observedGeneration": 1}, "spec": {"size": 9}},
    )
    assert with_status["status"]["phase"] == "Ready"
    assert with_status["spec"]["size"] == 1  # /status ignores spec changes
    assert with_status["metadata"]["generation"] == 1  # status changes do not bump generation
    main = custom.patch_namespaced_custom_object(
        GROUP, "v1", ns, "widgets", "s", {"status": {"phase": "Hacked"}, "spec": {"size": 2}}
    )
    assert main["status"]["phase"] == "Ready"  # the main resource ignores status changes
    assert main["metadata"]["generation"] == 2


def test_metadata_only_change_keeps_generation(
    custom: client.CustomObjectsApi, crds: None, ns: str
) -> None:
    custom.create_namespaced_custom_object(GROUP, "v1", ns, "widgets", widget("g"))
    labelled = custom.patch_namespaced_custom_object(
        GROUP,
        "v1",
        ns,
        "widgets",
        "g",
        {"metadata": {"labels": {"a": "b"}, "annotations": {"x": "y"}}},
    )
    assert labelled["metadata"]["generation"] == 1
    replaced = custom.replace_namespaced_custom_object(
        GROUP, "v1", ns, "widgets", "g", {**labelled, "spec": {"size": 5}}
    )
    assert replaced["metadata"]["generation"] == 2


def test_replace_status_via_put(custom: client.CustomObjectsApi, crds: None, ns: str) -> None:
    obj = custom.create_namespaced_custom_object(GROUP, "v1", ns, "widgets", widget("p"))
    obj["status"] = {"phase": "Done", "observedGeneration": obj["metadata"]["generation"]}
    obj["metadata"]["labels"] = {"ignored": "yes"}
    result = custom.replace_namespaced_custom_object_status(GROUP, "v1", ns, "widgets", "p", obj)
    assert result["status"]["phase"] == "Done"
    assert "labels" not in result["metadata"]


def test_without_status_subresource_status_is_ordinary(
    custom: client.CustomObjectsApi, crds: None
) -> None:
    name = "plain-gadget"
    created = custom.create_cluster_custom_object(
        GROUP,
        "v1",
        "gadgets",
        {
            "apiVersion": f"{GROUP}/v1",
            "kind": "Gadget",
            "metadata": {"name": name},
            "status": {"x": 1},
        },
    )
    assert created["status"] == {"x": 1}
    updated = custom.patch_cluster_custom_object(GROUP, "v1", "gadgets", name, {"status": {"x": 2}})
    assert updated["status"] == {"x": 2} and updated["metadata"]["generation"] == 2
    custom.delete_cluster_custom_object(GROUP, "v1", "gadgets", name)


def test_pod_and_claim_status(api: client.ApiClient, core: client.CoreV1Api, ns: str) -> None:
    pod = core.create_namespaced_pod(
        ns,
        {
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running"},
        },
    )
    assert pod.status.phase == "Pending"
    running = core.patch_namespaced_pod_status(
        "p",
        ns,
        {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}},
    )
    assert running.status.phase == "Running"
    again = core.patch_namespaced_pod_status(
        "p", ns, {"status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}}
    )
    assert sorted(c.type for c in again.status.conditions) == ["PodScheduled", "Ready"]
    resource = client.ResourceV1Api(api)
    resource.create_namespaced_resource_claim(
        ns,
        {
            "metadata": {"name": "c"},
            "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "x"}}]}},
        },
    )
    claim = resource.patch_namespaced_resource_claim_status(
        "c",
        ns,
        {
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {"request": "r", "driver": "d.example.com", "pool": "p", "device": "d0"}
                        ]
                    }
                },
                "reservedFor": [{"resource": "pods", "name": "p", "uid": pod.metadata.uid}],
            }
        },
    )
    assert claim.status.reserved_for[0].name == "p"
