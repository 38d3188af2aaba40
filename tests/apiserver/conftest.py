"""Fixtures: one lab API server per test session, driven through the official client."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from dmn.lab.apiserver import LabApiServer

GROUP = "lab.example.com"

WIDGET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "spec": {
            "type": "object",
            "required": ["size"],
            "properties": {
                "size": {"type": "integer", "minimum": 1, "maximum": 10},
                "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
                "name": {"type": "string", "maxLength": 8, "pattern": "^[a-z]+$"},
                "tags": {"type": "array", "maxItems": 2, "items": {"type": "string"}},
                "ports": {
                    "type": "array",
                    "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name"],
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {
                            "name": {"type": "string"},
                            "port": {"type": "integer", "default": 80},
                        },
                    },
                },
                "config": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "ratio": {"type": "number", "minimum": 0, "exclusiveMinimum": True},
                "mode": {"x-kubernetes-int-or-string": True},
            },
        },
        "status": {
            "type": "object",
            "properties": {
                "phase": {"type": "string"},
                "observedGeneration": {"type": "integer"},
            },
        },
    },
}


def widget_crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "selectableFields": [{"jsonPath": ".spec.color"}],
                    "schema": {"openAPIV3Schema": WIDGET_SCHEMA},
                }
            ],
        },
    }


def gadget_crd() -> dict[str, Any]:
    """Cluster-scoped, no status subresource."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"gadgets.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Cluster",
            "names": {"plural": "gadgets", "kind": "Gadget"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "x-kubernetes-preserve-unknown-fields": True,
                                },
                                "status": {
                                    "type": "object",
                                    "x-kubernetes-preserve-unknown-fields": True,
                                },
                            },
                        }
                    },
                }
            ],
        },
    }


@pytest.fixture(scope="session")
def lab() -> Iterator[LabApiServer]:
    server = LabApiServer(bookmark_interval=0.5)
    server.start()
    yield server
    server.stop()


def make_client(url: str) -> client.ApiClient:
    configuration = client.Configuration()
    configuration.host = url
    return client.ApiClient(configuration)


@pytest.fixture(scope="session")
def api(lab: LabApiServer) -> Iterator[client.ApiClient]:
    with make_client(lab.url) as api_client:
        yield api_client


@pytest.fixture(scope="session")
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture(scope="session")
def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


@pytest.fixture(scope="session")
def crds(api: client.ApiClient) -> None:
    ext = client.ApiextensionsV1Api(api)
    for crd in (widget_crd(), gadget_crd()):
        ext.create_custom_resource_definition(crd)


@pytest.fixture
def ns(core: client.CoreV1Api) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    core.create_namespace({"metadata": {"name": name}})
    return name


def unique(prefix: str = "o") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def widget(name: str, size: int = 1, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Widget",
        "metadata": {"name": name},
        "spec": {"size": size, **spec},
    }
