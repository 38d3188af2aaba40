"""Label and field selectors; discovery as the DynamicClient reads it."""

from __future__ import annotations

import pytest
from kubernetes import client, dynamic
from kubernetes.client.exceptions import ApiException

from .conftest import GROUP


@pytest.fixture
def labelled(core: client.CoreV1Api, ns: str) -> str:
    for name, labels in [
        ("a", {"app": "web", "tier": "front"}),
        ("b", {"app": "web", "tier": "back"}),
        ("c", {"app": "db"}),
        ("d", {}),
    ]:
        core.create_namespaced_config_map(ns, {"metadata": {"name": name, "labels": labels}})
    return ns


@pytest.mark.parametrize(
    ("selector", "names"),
    [
        ("app=web", ["a", "b"]),
        ("app==web", ["a", "b"]),
        ("app!=web", ["c", "d"]),
        ("tier in (front,middle)", ["a"]),
        ("app notin (web)", ["c", "d"]),
        ("tier", ["a", "b"]),
        ("!tier", ["c", "d"]),
        ("app=web,tier!=back", ["a"]),
    ],
)
def test_label_selectors(
    core: client.CoreV1Api, labelled: str, selector: str, names: list[str]
) -> None:
    items = core.list_namespaced_config_map(labelled, label_selector=selector).items
    assert [i.metadata.name for i in items] == names


def test_bad_label_selector_is_400(core: client.CoreV1Api, labelled: str) -> None:
    with pytest.raises(ApiException) as err:
        core.list_namespaced_config_map(labelled, label_selector="app in web")
    assert err.value.status == 400


def test_field_selectors(core: client.CoreV1Api, labelled: str) -> None:
    assert [
        c.metadata.name
        for c in core.list_namespaced_config_map(labelled, field_selector="metadata.name=b").items
    ] == ["b"]
    assert [
        c.metadata.name
        for c in core.list_namespaced_config_map(labelled, field_selector="metadata.name!=b").items
    ] == ["a", "c", "d"]
    everywhere = core.list_config_map_for_all_namespaces(
        field_selector=f"metadata.namespace={labelled}"
    )
    assert len(everywhere.items) == 4
    with pytest.raises(ApiException) as err:
        core.list_namespaced_config_map(labelled, field_selector="data.x=1")
    assert err.value.status == 400 and "field label not supported" in err.value.body


def test_pod_node_name_field_selector(core: client.CoreV1Api, ns: str) -> None:
    for name, node in [("p1", "n1"), ("p2", "n2"), ("p3", None)]:
        spec = {"containers": [{"name": "c", "image": "i"}]}
        if node:
            spec["nodeName"] = node
        core.create_namespaced_pod(ns, {"metadata": {"name": name}, "spec": spec})
    on_n1 = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=n1")
    assert [p.metadata.name for p in on_n1.items if p.metadata.namespace == ns] == ["p1"]
    unscheduled = core.list_namespaced_pod(ns, field_selector="spec.nodeName=")
    assert [p.metadata.name for p in unscheduled.items] == ["p3"]


def test_dynamic_client_discovers_builtin_and_custom_kinds(
    api: client.ApiClient, crds: None, ns: str
) -> None:
    dyn = dynamic.DynamicClient(api)
    claims = dyn.resources.get(api_version="resource.k8s.io/v1", kind="ResourceClaim")
    assert claims.namespaced and claims.name == "resourceclaims"
    widgets = dyn.resources.get(api_version=f"{GROUP}/v1", kind="Widget")
    created = widgets.create(
        body={
            "apiVersion": f"{GROUP}/v1",
            "kind": "Widget",
            "metadata": {"name": "dyn"},
            "spec": {"size": 2},
        },
        namespace=ns,
    )
    assert created.spec.size == 2
    assert widgets.get(name="dyn", namespace=ns).metadata.name == "dyn"
    leases = dyn.resources.get(api_version="coordination.k8s.io/v1", kind="Lease")
    assert leases.name == "leases"
