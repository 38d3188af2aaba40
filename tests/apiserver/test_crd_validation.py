"""Custom resources validated against their CRD's structural schema (422 with field causes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from .conftest import GROUP, unique, widget

REPO = Path(__file__).resolve().parents[2]


def rejected(custom: client.CustomObjectsApi, ns: str, body: dict, **kwargs) -> dict:
    with pytest.raises(ApiException) as err:
        custom.create_namespaced_custom_object(GROUP, "v1", ns, "widgets", body, **kwargs)
    return {"code": err.value.status, **json.loads(err.value.body)}


@pytest.mark.parametrize(
    ("spec", "field", "reason", "fragment"),
    [
        ({}, "spec.size", "FieldValueRequired", "Required value"),
        ({"size": "big"}, "spec.size", "FieldValueTypeInvalid", "must be of type integer"),
        ({"size": 0}, "spec.size", "FieldValueInvalid", "greater than or equal to 1"),
        ({"size": 11}, "spec.size", "FieldValueInvalid", "less than or equal to 10"),
        (
            {"size": 1, "color": "green"},
            "spec.color",
            "FieldValueNotSupported",
            'supported values: "red", "blue"',
        ),
        (
            {"size": 1, "name": "waytoolongname"},
            "spec.name",
            "FieldValueTooLong",
            "may not be more than 8",
        ),
        ({"size": 1, "name": "UPPER"}, "spec.name", "FieldValueInvalid", "should match"),
        (
            {"size": 1, "tags": ["a", "b", "c"]},
            "spec.tags",
            "FieldValueTooMany",
            "must have at most 2 items",
        ),
        (
            {"size": 1, "ports": [{"name": "a"}, {"name": "a"}]},
            "spec.ports[1]",
            "FieldValueDuplicate",
            "Duplicate value",
        ),
        (
            {"size": 1, "ports": [{"port": 1}]},
            "spec.ports[0].name",
            "FieldValueRequired",
            "Required value",
        ),
        (
            {"size": 1, "labels": {"k": 1}},
            "spec.labels[k]",
            "FieldValueTypeInvalid",
            "must be of type string",
        ),
        ({"size": 1, "ratio": 0}, "spec.ratio", "FieldValueInvalid", "greater than 0"),
        ({"size": 1, "mode": True}, "spec.mode", "FieldValueTypeInvalid", "integer or string"),
    ],
)
def test_schema_violations_are_422_with_causes(
    custom: client.CustomObjectsApi,
    crds: None,
    ns: str,
    spec: dict,
    field: str,
    reason: str,
    fragment: str,
) -> None:
    body = widget("bad")
    body["spec"] = spec
    status = rejected(custom, ns, body)
    assert status["code"] == 422 and status["reason"] == "Invalid"
    assert status["details"]["kind"] == "Widget" and status["details"]["group"] == GROUP
    causes = status["details"]["causes"]
    assert any(
        c["field"] == field and c["reason"] == reason and fragment in c["message"] for c in causes
    ), causes
    assert status["message"].startswith(f'Widget.{GROUP} "bad" is invalid: ')


def test_several_causes_are_all_reported(
    custom: client.CustomObjectsApi, crds: None, ns: str
) -> None:
    body = widget("bad")
    body["spec"] = {"size": 0, "color": "green"}
    status = rejected(custom, ns, body)
    assert {c["field"] for c in status["details"]["causes"]} == {"spec.size", "spec.color"}
    assert ": [" in status["message"]


def test_unknown_fields_are_pruned_with_a_warning(
    api: client.ApiClient, crds: None, ns: str
) -> None:
    body = widget(unique("w"), extra="x")
    body["spec"]["config"] = {"free": {"form": True}}
    body["stray"] = 1
    custom = client.CustomObjectsApi(api)
    data, _code, headers = custom.create_namespaced_custom_object_with_http_info(
        GROUP, "v1", ns, "widgets", body
    )
    assert "extra" not in data["spec"] and "stray" not in data
    assert data["spec"]["config"] == {
        "free": {"form": True}
    }  # x-kubernetes-preserve-unknown-fields
    assert 'unknown field \\"spec.extra\\"' in headers.get("Warning", "")


def test_unknown_fields_rejected_when_strict(
    custom: client.CustomObjectsApi, crds: None, ns: str
) -> None:
    status = rejected(custom, ns, widget("strict", extra="x"), field_validation="Strict")
    assert status["code"] == 400 and 'unknown field "spec.extra"' in status["message"]


def test_defaults_are_applied(custom: client.CustomObjectsApi, crds: None, ns: str) -> None:
    created = custom.create_namespaced_custom_object(
        GROUP, "v1", ns, "widgets", widget("d", ports=[{"name": "http"}])
    )
    assert created["spec"]["color"] == "red"
    assert created["spec"]["ports"] == [{"name": "http", "port": 80}]


def test_selectable_fields(custom: client.CustomObjectsApi, crds: None, ns: str) -> None:
    custom.create_namespaced_custom_object(GROUP, "v1", ns, "widgets", widget("r"))
    custom.create_namespaced_custom_object(GROUP, "v1", ns, "widgets", widget("b", color="blue"))
    blue = custom.list_namespaced_custom_object(
        GROUP, "v1", ns, "widgets", field_selector="spec.color=blue"
    )
    assert [i["metadata"]["name"] for i in blue["items"]] == ["b"]


def test_invalid_crd_is_rejected(api: client.ApiClient) -> None:
    ext = client.ApiextensionsV1Api(api)
    with pytest.raises(ApiException) as err:
        ext.create_custom_resource_definition(
            {
                "metadata": {"name": "things.example.com"},
                "spec": {
                    "group": "example.com",
                    "scope": "Namespaced",
                    "names": {"plural": "things", "kind": "Thing"},
                    "versions": [
                        {
                            "name": "v1",
                            "served": True,
                            "storage": False,
                            "schema": {"openAPIV3Schema": {"type": "object"}},
                        }
                    ],
                },
            }
        )
    assert err.value.status == 422
    assert "exactly one version marked as storage" in err.value.body


def test_crd_deletion_removes_its_resources(api: client.ApiClient) -> None:
    ext = client.ApiextensionsV1Api(api)
    custom = client.CustomObjectsApi(api)
    crd = {
        "metadata": {"name": "temps.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Cluster",
            "names": {"plural": "temps", "kind": "Temp"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }
    created = ext.create_custom_resource_definition(crd)
    assert any(c.type == "Established" and c.status == "True" for c in created.status.conditions)
    custom.create_cluster_custom_object(
        "example.com",
        "v1",
        "temps",
        {"apiVersion": "example.com/v1", "kind": "Temp", "metadata": {"name": "t"}},
    )
    ext.delete_custom_resource_definition("temps.example.com")
    with pytest.raises(ApiException) as err:
        custom.list_cluster_custom_object("example.com", "v1", "temps")
    assert err.value.status == 404


def project_crds() -> list[Path]:
    return sorted((REPO / "charts" / "dra-multi-network" / "crds").glob("*.yaml"))


@pytest.mark.skipif(not project_crds(), reason="project CRDs not generated yet")
def test_project_crds_install_and_validate(api: client.ApiClient) -> None:
    """Our generated CRDs install, serve, and reject an obviously wrong object."""
    ext = client.ApiextensionsV1Api(api)
    custom = client.CustomObjectsApi(api)
    for path in project_crds():
        crd = yaml.safe_load(path.read_text())
        try:
            ext.create_custom_resource_definition(crd)
        except ApiException as exc:
            if exc.status != 409:
                raise
        spec = crd["spec"]
        version = next(v["name"] for v in spec["versions"] if v.get("storage"))
        plural = spec["names"]["plural"]
        if spec["scope"] == "Cluster":
            listed = custom.list_cluster_custom_object(spec["group"], version, plural)
        else:
            listed = custom.list_namespaced_custom_object(spec["group"], version, "default", plural)
        assert listed["items"] == []
        bad = {
            "apiVersion": f"{spec['group']}/{version}",
            "kind": spec["names"]["kind"],
            "metadata": {"name": "bad"},
            "spec": 42,
        }
        with pytest.raises(ApiException) as err:
            if spec["scope"] == "Cluster":
                custom.create_cluster_custom_object(spec["group"], version, plural, bad)
            else:
                custom.create_namespaced_custom_object(
                    spec["group"], version, "default", plural, bad
                )
        assert err.value.status == 422, path.name


def test_cel_validation_rules(api: client.ApiClient, ns: str) -> None:
    ext = client.ApiextensionsV1Api(api)
    custom = client.CustomObjectsApi(api)
    spec_schema = {
        "type": "object",
        "x-kubernetes-validations": [
            {
                "rule": "self.min <= self.max",
                "message": "min must not exceed max",
                "fieldPath": ".min",
            },
            {
                "rule": "self.id == oldSelf.id",
                "messageExpression": "'id is immutable, was ' + oldSelf.id",
            },
        ],
        "properties": {
            "min": {"type": "integer"},
            "max": {"type": "integer"},
            "id": {"type": "string"},
        },
    }
    ext.create_custom_resource_definition(
        {
            "metadata": {"name": "ranges.example.com"},
            "spec": {
                "group": "example.com",
                "scope": "Namespaced",
                "names": {"plural": "ranges", "kind": "Range"},
                "versions": [
                    {
                        "name": "v1",
                        "served": True,
                        "storage": True,
                        "schema": {
                            "openAPIV3Schema": {
                                "type": "object",
                                "properties": {"spec": spec_schema},
                            }
                        },
                    }
                ],
            },
        }
    )

    def body(lo: int, hi: int, ident: str) -> dict:
        return {
            "apiVersion": "example.com/v1",
            "kind": "Range",
            "metadata": {"name": "r"},
            "spec": {"min": lo, "max": hi, "id": ident},
        }

    with pytest.raises(ApiException) as err:
        custom.create_namespaced_custom_object("example.com", "v1", ns, "ranges", body(5, 1, "a"))
    cause = json.loads(err.value.body)["details"]["causes"][0]
    assert err.value.status == 422
    assert cause["field"] == "spec.min" and "min must not exceed max" in cause["message"]
    custom.create_namespaced_custom_object("example.com", "v1", ns, "ranges", body(1, 5, "a"))
    with pytest.raises(ApiException) as err:
        custom.patch_namespaced_custom_object(
            "example.com", "v1", ns, "ranges", "r", {"spec": {"id": "b"}}
        )
    assert "id is immutable, was a" in err.value.body
    custom.patch_namespaced_custom_object(
        "example.com", "v1", ns, "ranges", "r", {"spec": {"max": 9}}
    )
