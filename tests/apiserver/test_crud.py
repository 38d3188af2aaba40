"""Create/get/update/list basics, errors as Status objects, optimistic concurrency."""

from __future__ import annotations

import json

import pytest
from kubernetes import client, dynamic
from kubernetes.client.exceptions import ApiException

from .conftest import GROUP, unique, widget


def status_of(exc: ApiException) -> dict:
    return json.loads(exc.body)


def test_version_and_health(api: client.ApiClient) -> None:
    info = client.VersionApi(api).get_code()
    assert info.major == "1" and info.git_version.startswith("v1.")


def test_create_sets_server_fields(core: client.CoreV1Api, ns: str) -> None:
    cm = core.create_namespaced_config_map(ns, {"metadata": {"name": "a"}, "data": {"k": "v"}})
    assert cm.metadata.uid and cm.metadata.creation_timestamp and cm.metadata.resource_version
    assert cm.metadata.namespace == ns
    got = core.read_namespaced_config_map("a", ns)
    assert got.data == {"k": "v"} and got.metadata.uid == cm.metadata.uid


def test_create_conflict_is_already_exists(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_config_map(ns, {"metadata": {"name": "dup"}})
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map(ns, {"metadata": {"name": "dup"}})
    assert err.value.status == 409
    body = status_of(err.value)
    assert body["kind"] == "Status" and body["reason"] == "AlreadyExists"
    assert body["details"] == {"name": "dup", "kind": "configmaps"}
    assert body["message"] == 'configmaps "dup" already exists'


def test_generate_name(core: client.CoreV1Api, ns: str) -> None:
    a = core.create_namespaced_config_map(ns, {"metadata": {"generateName": "gen-"}})
    b = core.create_namespaced_config_map(ns, {"metadata": {"generateName": "gen-"}})
    assert a.metadata.name.startswith("gen-") and len(a.metadata.name) == 9
    assert a.metadata.name != b.metadata.name


def test_not_found_status(core: client.CoreV1Api, ns: str) -> None:
    with pytest.raises(ApiException) as err:
        core.read_namespaced_config_map("missing", ns)
    body = status_of(err.value)
    assert (err.value.status, body["reason"], body["code"]) == (404, "NotFound", 404)
    assert body["message"] == 'configmaps "missing" not found'


def test_unknown_path_is_404(api: client.ApiClient) -> None:
    custom = client.CustomObjectsApi(api)
    with pytest.raises(ApiException) as err:
        custom.list_cluster_custom_object("nope.example.com", "v1", "things")
    assert err.value.status == 404


def test_namespace_must_exist(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map("no-such-ns", {"metadata": {"name": "x"}})
    assert err.value.status == 404
    assert status_of(err.value)["details"]["kind"] == "namespaces"


def test_resource_version_on_create_is_rejected(core: client.CoreV1Api, ns: str) -> None:
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map(ns, {"metadata": {"name": "x", "resourceVersion": "5"}})
    assert err.value.status == 400


def test_invalid_name_is_422(core: client.CoreV1Api, ns: str) -> None:
    with pytest.raises(ApiException) as err:
        core.create_namespaced_config_map(ns, {"metadata": {"name": "Bad_Name"}})
    body = status_of(err.value)
    assert err.value.status == 422 and body["reason"] == "Invalid"
    assert body["details"]["causes"][0]["field"] == "metadata.name"


def test_update_with_stale_resource_version_conflicts(core: client.CoreV1Api, ns: str) -> None:
    cm = core.create_namespaced_config_map(ns, {"metadata": {"name": "c"}, "data": {"a": "1"}})
    first = core.replace_namespaced_config_map(
        "c",
        ns,
        {
            "metadata": {"name": "c", "resourceVersion": cm.metadata.resource_version},
            "data": {"a": "2"},
        },
    )
    assert int(first.metadata.resource_version) > int(cm.metadata.resource_version)
    with pytest.raises(ApiException) as err:
        core.replace_namespaced_config_map(
            "c",
            ns,
            {
                "metadata": {"name": "c", "resourceVersion": cm.metadata.resource_version},
                "data": {"a": "3"},
            },
        )
    body = status_of(err.value)
    assert err.value.status == 409 and body["reason"] == "Conflict"
    assert "the object has been modified" in body["message"]
    # built-in kinds allow an unconditional update (no resourceVersion)
    core.replace_namespaced_config_map("c", ns, {"metadata": {"name": "c"}, "data": {"a": "4"}})
    assert core.read_namespaced_config_map("c", ns).data == {"a": "4"}


def test_name_mismatch_is_bad_request(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_config_map(ns, {"metadata": {"name": "m"}})
    with pytest.raises(ApiException) as err:
        core.replace_namespaced_config_map("m", ns, {"metadata": {"name": "other"}})
    assert err.value.status == 400


def test_noop_update_keeps_resource_version(core: client.CoreV1Api, ns: str) -> None:
    cm = core.create_namespaced_config_map(ns, {"metadata": {"name": "n"}, "data": {"a": "1"}})
    again = core.replace_namespaced_config_map(
        "n",
        ns,
        {
            "metadata": {"name": "n", "resourceVersion": cm.metadata.resource_version},
            "data": {"a": "1"},
        },
    )
    assert again.metadata.resource_version == cm.metadata.resource_version


def test_custom_resource_put_requires_resource_version(
    custom: client.CustomObjectsApi, crds: None, ns: str
) -> None:
    custom.create_namespaced_custom_object(GROUP, "v1", ns, "widgets", widget("w"))
    with pytest.raises(ApiException) as err:
        custom.replace_namespaced_custom_object(GROUP, "v1", ns, "widgets", "w", widget("w", 2))
    body = status_of(err.value)
    assert err.value.status == 422
    assert body["details"]["causes"][0]["field"] == "metadata.resourceVersion"


def test_cluster_scoped_custom_resource(custom: client.CustomObjectsApi, crds: None) -> None:
    name = unique("g")
    obj = custom.create_cluster_custom_object(
        GROUP,
        "v1",
        "gadgets",
        {
            "apiVersion": f"{GROUP}/v1",
            "kind": "Gadget",
            "metadata": {"name": name},
            "spec": {"any": {"thing": 1}},
        },
    )
    assert "namespace" not in obj["metadata"]
    assert custom.get_cluster_custom_object(GROUP, "v1", "gadgets", name)["spec"] == {
        "any": {"thing": 1}
    }
    custom.delete_cluster_custom_object(GROUP, "v1", "gadgets", name)


def test_list_resource_version_and_pagination(core: client.CoreV1Api, ns: str) -> None:
    for i in range(5):
        core.create_namespaced_config_map(ns, {"metadata": {"name": f"p{i}"}})
    first = core.list_namespaced_config_map(ns, limit=2)
    assert [c.metadata.name for c in first.items] == ["p0", "p1"]
    assert first.metadata.remaining_item_count == 3 and first.metadata._continue
    second = core.list_namespaced_config_map(ns, limit=2, _continue=first.metadata._continue)
    third = core.list_namespaced_config_map(ns, limit=2, _continue=second.metadata._continue)
    assert [c.metadata.name for c in second.items + third.items] == ["p2", "p3", "p4"]
    assert not third.metadata._continue
    assert int(first.metadata.resource_version) >= 1


def test_resource_types_we_touch_are_served(api: client.ApiClient, ns: str) -> None:
    resource = client.ResourceV1Api(api)
    name = unique("dc")
    dc = resource.create_device_class(
        {"metadata": {"name": name}, "spec": {"selectors": [{"cel": {"expression": "true"}}]}}
    )
    assert dc.metadata.generation == 1
    slice_ = resource.create_resource_slice(
        {
            "metadata": {"name": unique("rs")},
            "spec": {
                "driver": "d.example.com",
                "nodeName": "n1",
                "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "dev0"}],
            },
        }
    )
    assert slice_.spec.node_name == "n1"
    claim = resource.create_namespaced_resource_claim(
        ns,
        {
            "metadata": {"name": "c"},
            "spec": {
                "devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": name}}]}
            },
        },
    )
    assert claim.status is None or claim.status.allocation is None
    lease = client.CoordinationV1Api(api).create_namespaced_lease(
        ns,
        {
            "metadata": {"name": "leader"},
            "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15},
        },
    )
    assert lease.spec.holder_identity == "me"
    event = client.CoreV1Api(api).create_namespaced_event(
        ns,
        {
            "metadata": {"name": "e1"},
            "involvedObject": {"kind": "Pod", "name": "p", "namespace": ns},
            "reason": "Test",
            "message": "hi",
            "type": "Normal",
        },
    )
    assert event.reason == "Test"


def test_rejected_request_leaves_keep_alive_connection_usable(lab) -> None:
    """An error answered before the body is parsed must not desynchronise the connection."""
    import http.client
    from urllib.parse import urlsplit

    url = urlsplit(lab.url)
    conn = http.client.HTTPConnection(url.hostname, url.port)
    body = json.dumps({"data": {"a": "1"}})
    conn.request(
        "PATCH", "/api/v1/namespaces/default/configmaps/x", body, {"Content-Type": "text/plain"}
    )
    first = conn.getresponse()
    first.read()
    assert first.status == 415
    conn.request("GET", "/api/v1/namespaces/default")
    second = conn.getresponse()
    assert second.status == 200 and json.loads(second.read())["metadata"]["name"] == "default"
    conn.close()


def test_builtin_kinds_are_validated_against_upstream_schemas(
    api: client.ApiClient, ns: str
) -> None:
    from dmn.lab.apiserver.builtin_schema import available

    if not available():
        pytest.skip("kubernetes-validate not installed")
    custom = client.CustomObjectsApi(api)  # raw dicts: the typed models would refuse client-side
    with pytest.raises(ApiException) as err:
        custom.create_cluster_custom_object(
            "resource.k8s.io",
            "v1",
            "resourceslices",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": "s"},
                "spec": {
                    "nodeName": "n",
                    "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
                },
            },
        )
    body = status_of(err.value)
    assert err.value.status == 422 and body["details"]["kind"] == "ResourceSlice"
    assert {"field": "spec.driver", "reason": "FieldValueRequired"}.items() <= body["details"][
        "causes"
    ][0].items()
    with pytest.raises(ApiException) as err:
        dynamic.DynamicClient(api).resources.get(api_version="v1", kind="ConfigMap").create(
            body={
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "t"},
                "data": {"n": 1},
            },
            namespace=ns,
        )
    cause = status_of(err.value)["details"]["causes"][0]
    assert (cause["field"], cause["reason"]) == ("data.n", "FieldValueTypeInvalid")
