"""Server-side printing (meta.k8s.io Table) from CRD printer columns, as kubectl requests it."""

from __future__ import annotations

from kubernetes import client

from dmn.lab.apiserver.table import human_age, jsonpath

from .conftest import GROUP, widget

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


def test_jsonpath_subset() -> None:
    obj = {
        "status": {
            "conditions": [{"type": "A", "status": "False"}, {"type": "Ready", "status": "True"}]
        },
        "spec": {"items": [1, 2], "n": 3},
    }
    assert jsonpath('.status.conditions[?(@.type=="Ready")].status', obj) == ["True"]
    assert jsonpath(".status.conditions[?(@.type!='Ready')].type", obj) == ["A"]
    assert jsonpath(".spec.items[*]", obj) == [1, 2]
    assert jsonpath(".spec.items[-1]", obj) == [2]
    assert jsonpath("{.spec['n']}", obj) == [3]
    assert jsonpath(".spec.missing", obj) == []


def test_human_age() -> None:
    import datetime as dt

    now = dt.datetime(2026, 1, 10, tzinfo=dt.UTC)
    ago = lambda **kw: (now - dt.timedelta(**kw)).strftime("%Y-%m-%dT%H:%M:%SZ")  # noqa: E731
    assert [human_age(ago(seconds=5), now), human_age(ago(minutes=5, seconds=3), now)] == [
        "5s",
        "5m3s",
    ]
    assert [human_age(ago(hours=5), now), human_age(ago(days=3, hours=2), now)] == ["5h", "3d2h"]


def test_custom_resource_table(api: client.ApiClient, crds: None, ns: str) -> None:
    ext = client.ApiextensionsV1Api(api)
    crd = ext.read_custom_resource_definition(f"widgets.{GROUP}")
    body = api.sanitize_for_serialization(crd)
    body["spec"]["versions"][0]["additionalPrinterColumns"] = [
        {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
        {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]
    ext.replace_custom_resource_definition(f"widgets.{GROUP}", body)
    custom = client.CustomObjectsApi(api)
    custom.create_namespaced_custom_object(GROUP, "v1", ns, "widgets", widget("t", 7))
    custom.patch_namespaced_custom_object_status(
        GROUP, "v1", ns, "widgets", "t", {"status": {"phase": "Ready"}}
    )
    table = custom.list_namespaced_custom_object(
        GROUP, "v1", ns, "widgets", _headers={"Accept": TABLE}
    )
    assert table["kind"] == "Table" and table["apiVersion"] == "meta.k8s.io/v1"
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Size", "Phase", "Age"]
    name, size, phase, age = table["rows"][0]["cells"]
    assert (name, size, phase) == ("t", 7, "Ready") and age.endswith("s")
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    single = custom.get_namespaced_custom_object(
        GROUP, "v1", ns, "widgets", "t", _headers={"Accept": TABLE}
    )
    assert single["rows"][0]["cells"][:2] == ["t", 7]
