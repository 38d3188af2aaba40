"""Merge, JSON and strategic-merge patches, as the official client sends them."""

from __future__ import annotations

import json

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from .conftest import GROUP, widget


def pod(name: str) -> dict:
    return {
        "metadata": {"name": name, "finalizers": ["a.example.com/f"]},
        "spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]},
    }


def test_typed_dict_patch_is_strategic_merge(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_pod(ns, pod("p"))
    patched = core.patch_namespaced_pod(
        "p",
        ns,
        {
            "metadata": {"finalizers": ["b.example.com/f"]},
            "spec": {"containers": [{"name": "b", "image": "z"}]},
        },
    )
    # containers merge by name, finalizers merge as a set
    assert [(c.name, c.image) for c in patched.spec.containers] == [("a", "x"), ("b", "z")]
    assert patched.metadata.finalizers == ["a.example.com/f", "b.example.com/f"]
    deleted = core.patch_namespaced_pod(
        "p",
        ns,
        {
            "metadata": {
                "$deleteFromPrimitiveList/finalizers": ["a.example.com/f", "b.example.com/f"]
            },
            "spec": {"containers": [{"name": "a", "$patch": "delete"}]},
        },
    )
    assert [c.name for c in deleted.spec.containers] == ["b"]
    assert not deleted.metadata.finalizers


def test_merge_patch(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_config_map(ns, {"metadata": {"name": "m"}, "data": {"a": "1", "b": "2"}})
    patched = core.patch_namespaced_config_map(
        "m", ns, {"data": {"a": None, "c": "3"}}, _content_type="application/merge-patch+json"
    )
    assert patched.data == {"b": "2", "c": "3"}


def test_json_patch(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_config_map(ns, {"metadata": {"name": "j"}, "data": {"a": "1"}})
    patched = core.patch_namespaced_config_map(
        "j",
        ns,
        [
            {"op": "test", "path": "/data/a", "value": "1"},
            {"op": "add", "path": "/data/b", "value": "2"},
            {"op": "remove", "path": "/data/a"},
            {"op": "add", "path": "/metadata/labels", "value": {"x/y": "z"}},
        ],
    )
    assert patched.data == {"b": "2"} and patched.metadata.labels == {"x/y": "z"}
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_config_map("j", ns, [{"op": "test", "path": "/data/b", "value": "9"}])
    assert err.value.status == 422
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_config_map("j", ns, [{"op": "frobnicate", "path": "/data"}])
    assert err.value.status == 400


def test_patch_with_stale_resource_version_conflicts(core: client.CoreV1Api, ns: str) -> None:
    cm = core.create_namespaced_config_map(ns, {"metadata": {"name": "s"}, "data": {"a": "1"}})
    core.patch_namespaced_config_map("s", ns, {"data": {"a": "2"}})
    with pytest.raises(ApiException) as err:
        core.patch_namespaced_config_map(
            "s",
            ns,
            {"metadata": {"resourceVersion": cm.metadata.resource_version}, "data": {"a": "3"}},
            _content_type="application/merge-patch+json",
        )
    assert err.value.status == 409


def test_custom_objects_merge_and_json_patch(
    custom: client.CustomObjectsApi, crds: None, ns: str
) -> None:
    custom.create_namespaced_custom_object(GROUP, "v1", ns, "widgets", widget("w", 2, tags=["a"]))
    merged = custom.patch_namespaced_custom_object(
        GROUP, "v1", ns, "widgets", "w", {"spec": {"size": 3}}
    )
    assert merged["spec"]["size"] == 3 and merged["spec"]["tags"] == ["a"]
    merged = custom.patch_namespaced_custom_object(
        GROUP,
        "v1",
        ns,
        "widgets",
        "w",
        [{"op": "add", "path": "/spec/tags/-", "value": "b"}],
        _content_type="application/json-patch+json",
    )
    assert merged["spec"]["tags"] == ["a", "b"]


def test_strategic_merge_on_custom_resource_is_415(
    custom: client.CustomObjectsApi, crds: None, ns: str
) -> None:
    custom.create_namespaced_custom_object(GROUP, "v1", ns, "widgets", widget("w"))
    with pytest.raises(ApiException) as err:
        custom.patch_namespaced_custom_object(
            GROUP,
            "v1",
            ns,
            "widgets",
            "w",
            {"spec": {"size": 3}},
            _content_type="application/strategic-merge-patch+json",
        )
    assert err.value.status == 415
    assert json.loads(err.value.body)["reason"] == "UnsupportedMediaType"


def test_patch_validates_custom_resources(
    custom: client.CustomObjectsApi, crds: None, ns: str
) -> None:
    custom.create_namespaced_custom_object(GROUP, "v1", ns, "widgets", widget("w"))
    with pytest.raises(ApiException) as err:
        custom.patch_namespaced_custom_object(
            GROUP, "v1", ns, "widgets", "w", {"spec": {"size": 99}}
        )
    assert err.value.status == 422


def test_strategic_merge_uses_upstream_patch_keys(core: client.CoreV1Api, ns: str) -> None:
    from dmn.lab.apiserver.builtin_schema import available

    if not available():
        pytest.skip("kubernetes-validate not installed")
    body = pod("h")
    body["spec"]["hostAliases"] = [{"ip": "10.0.0.1", "hostnames": ["a"]}]
    core.create_namespaced_pod(ns, body)
    patched = core.patch_namespaced_pod(
        "h", ns, {"spec": {"hostAliases": [{"ip": "10.0.0.2", "hostnames": ["b"]}]}}
    )
    assert [a.ip for a in patched.spec.host_aliases] == ["10.0.0.1", "10.0.0.2"]  # merged by ip
