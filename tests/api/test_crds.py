"""Generated CRDs: no drift, upstream-valid, structural, the promised list-map keys,
printer columns and preserve-unknown payloads only where intended; and they serve real
objects (examples, builtin plugin CRs) on the lab API server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from dmn.api import builtin_plugins, crdgen
from dmn.api.identity import GROUP, VERSION
from dmn.api.topology import NetworkTopology
from dmn.lab.apiserver import LabApiServer

REPO = Path(__file__).resolve().parents[2]
CRD_DIR = REPO / "charts" / "dra-multi-network" / "crds"
PLUGIN_DIR = REPO / "charts" / "dra-multi-network" / "plugins"
EXAMPLES = REPO / "examples" / "topologies"


def crds() -> dict[str, dict[str, Any]]:
    out = {}
    for path in sorted(CRD_DIR.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        out[crd["spec"]["names"]["kind"]] = crd
    return out


def schema(kind: str) -> dict[str, Any]:
    version = crds()[kind]["spec"]["versions"][0]
    return version["schema"]["openAPIV3Schema"]  # type: ignore[no-any-return]


def test_no_drift() -> None:
    assert crdgen.generate(REPO, check=True) == []
    assert builtin_plugins.generate(REPO, check=True) == []


def test_all_kinds_present() -> None:
    assert set(crds()) == {
        "DeviceExposurePolicy",
        "NetworkPlugin",
        "NetworkTopology",
        "NetworkTopologyRevision",
        "NetworkAttachmentStatus",
        "IPPool",
        "IPAllocation",
    }


@pytest.mark.parametrize("kind", sorted(crds()))
def test_upstream_schema_strict(kind: str) -> None:
    kubernetes_validate.validate(crds()[kind], "1.37.0", strict=True)


FORBIDDEN = {"$ref", "anyOf", "oneOf", "allOf", "not", "definitions", "$defs", "nullable"}


def walk(node: Any, path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    if not isinstance(node, dict):
        return
    yield path, node
    for key, child in (node.get("properties") or {}).items():
        yield from walk(child, f"{path}.{key}")
    if isinstance(node.get("items"), dict):
        yield from walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from walk(node["additionalProperties"], f"{path}.*")


#: The bounded payloads whose unknown fields are kept for the language checker/compiler.
PRESERVE = {
    "NetworkTopology": {".spec.steps[].config", ".spec.steps[].inputs"},
    "NetworkPlugin": {
        ".spec.configSchema",
        ".spec.hooks.*",
        ".spec.allocation.*.access",
        ".spec.inputs.*.access",
    },
    "NetworkTopologyRevision": {".spec.normalizedSpec", ".spec.plugins[].descriptor"},
}


@pytest.mark.parametrize("kind", sorted(crds()))
def test_structural(kind: str) -> None:
    preserved = set()
    for path, node in walk(schema(kind), ""):
        assert not FORBIDDEN & set(node), f"{kind}{path}: {FORBIDDEN & set(node)}"
        if node.get("x-kubernetes-preserve-unknown-fields"):
            preserved.add(path)
            continue
        assert "type" in node, f"{kind}{path} has no type"
        if node.get("type") == "array":
            assert "maxItems" in node, f"{kind}{path} is unbounded"
        if node.get("x-kubernetes-list-type") == "map":
            item = node["items"]
            for key in node["x-kubernetes-list-map-keys"]:
                assert key in item.get("required", []) or "default" in item["properties"][key]
        if node.get("type") == "string" and path.endswith(".message"):
            assert "maxLength" in node
    assert preserved == PRESERVE.get(kind, set())


def list_keys(kind: str, path: list[str]) -> list[str]:
    node = schema(kind)
    for part in path:
        node = node["items"] if part == "[]" else node["properties"][part]
    assert node["x-kubernetes-list-type"] == "map"
    return node["x-kubernetes-list-map-keys"]  # type: ignore[no-any-return]


def test_list_map_keys() -> None:
    assert list_keys("NetworkTopology", ["spec", "steps"]) == ["id"]
    assert list_keys("NetworkTopology", ["status", "roots"]) == ["rootStep"]
    assert list_keys("NetworkTopology", ["status", "conditions"]) == ["type"]
    assert list_keys("NetworkTopologyRevision", ["spec", "roots"]) == ["rootStep"]
    assert list_keys("NetworkTopologyRevision", ["spec", "outputs"]) == ["step", "port"]
    assert list_keys("NetworkAttachmentStatus", ["status", "outputs"]) == ["step", "port"]


def test_printer_columns_and_status() -> None:
    columns = {
        kind: {c["name"] for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]}
        for kind, crd in crds().items()
    }
    assert {"Ready", "Revision", "Age"} <= columns["NetworkTopology"]
    assert {"Ready", "Phase", "Age"} <= columns["NetworkTopologyRevision"]
    assert {"Phase", "Revision", "Age"} <= columns["NetworkAttachmentStatus"]
    for crd in crds().values():
        assert crd["spec"]["versions"][0]["subresources"] == {"status": {}}


# --- served by a real (lab) API server ----------------------------------------------


@pytest.fixture(scope="module")
def custom() -> Iterator[client.CustomObjectsApi]:
    with LabApiServer() as server:
        configuration = client.Configuration()
        configuration.host = server.url
        with client.ApiClient(configuration) as api:
            ext = client.ApiextensionsV1Api(api)
            for crd in crds().values():
                ext.create_custom_resource_definition(crd)
            yield client.CustomObjectsApi(api)


def create(custom: client.CustomObjectsApi, plural: str, obj: dict[str, Any]) -> Any:
    return custom.create_cluster_custom_object(
        GROUP, VERSION, plural, obj, field_validation="Strict"
    )


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.stem)
def test_examples_accepted(custom: client.CustomObjectsApi, path: Path) -> None:
    create(custom, "networktopologies", yaml.safe_load(path.read_text()))


@pytest.mark.parametrize("path", sorted(PLUGIN_DIR.glob("*.yaml")), ids=lambda p: p.stem)
def test_builtin_plugin_crs_accepted(custom: client.CustomObjectsApi, path: Path) -> None:
    create(custom, "networkplugins", yaml.safe_load(path.read_text()))


def test_local_invariants_enforced(custom: client.CustomObjectsApi) -> None:
    topo = yaml.safe_load((EXAMPLES / "host-device.yaml").read_text())
    topo["metadata"]["name"] = "bad-inputs"
    topo["spec"]["steps"][0]["inputs"] = {"parent": {"from": "x.interface"}}
    with pytest.raises(ApiException) as err:
        create(custom, "networktopologies", topo)
    assert err.value.status == 422 and "take no inputs" in err.value.body
    topo = yaml.safe_load((EXAMPLES / "host-device.yaml").read_text())
    topo["metadata"]["name"] = "bad-field"
    topo["spec"]["steps"][0]["shell"] = "true"
    with pytest.raises(ApiException) as err:
        create(custom, "networktopologies", topo)
    assert err.value.status == 400  # strict field validation: unknown field


def test_root_limit_rule(custom: client.CustomObjectsApi) -> None:
    path = REPO / "examples" / "negative" / "topologies" / "budget-roots.yaml"
    with pytest.raises(ApiException) as err:
        create(custom, "networktopologies", yaml.safe_load(path.read_text()))
    assert err.value.status == 422 and "at most 8 Allocation roots" in err.value.body


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("kubernetes.io/net", "not in the kubernetes.io domain"),
        ("node.kubernetes.io/net", "not in the kubernetes.io domain"),
        ("no-domain", "should match"),
        ("example.com/-bad", "should match"),
    ],
)
def test_extended_resource_name_rules(
    custom: client.CustomObjectsApi, name: str, message: str
) -> None:
    """The CRD and the model refuse the same names (the model: `dmn lint`)."""
    topo = yaml.safe_load((EXAMPLES / "host-device.yaml").read_text())
    topo["metadata"]["name"] = "bad-extended"
    topo["spec"]["steps"][0]["extendedResourceName"] = name
    with pytest.raises(ApiException) as err:
        create(custom, "networktopologies", topo)
    assert err.value.status == 422 and message in err.value.body, err.value.body
    with pytest.raises(ValidationError):
        NetworkTopology.model_validate(topo)
    topo["spec"]["steps"][0]["extendedResourceName"] = "example.com/fast-net"
    NetworkTopology.model_validate(topo)
