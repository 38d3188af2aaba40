"""The lab API server serves the NetworkAttachmentDefinition CRD with the semantics Multus
automatic mode uses (``tests/apiserver/nad_semantics.py``; the same checks run against the
real kube-apiserver in ``tests/e2e/test_control_plane.py``), and its garbage collector treats
a shadow owned by a Pod as the real one does: the Pod's deletion asks for the shadow's, and
the protection finalizer keeps it, with its configuration, until the node removes it."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from dmn.api.cluster import Cluster, NotFound, connect
from dmn.api.cluster import resources as r
from dmn.lab.apiserver import LabApiServer
from tests.apiserver import nad_semantics as sem
from tests.fixtures.multus import nad_crd


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with LabApiServer() as server, Cluster(connect(url=server.url)) as c:
        c.create(r.CUSTOM_RESOURCE_DEFINITIONS, nad_crd())
        yield c


def _namespace(cluster: Cluster) -> tuple[str, dict[str, Any]]:
    name = f"nad-{uuid.uuid4().hex[:8]}"
    cluster.create(r.NAMESPACES, {"metadata": {"name": name}})
    return name, cluster.create(r.PODS, sem.pod(name), name)


@pytest.mark.parametrize("check", sem.CHECKS, ids=lambda c: c.__name__)
def test_nad_semantics(cluster: Cluster, check: Callable[[Cluster, str, dict], None]) -> None:
    namespace, owner = _namespace(cluster)
    check(cluster, namespace, owner)


def test_pod_deletion_asks_for_the_shadow_and_the_finalizer_holds_it(cluster: Cluster) -> None:
    namespace, owner = _namespace(cluster)
    obj = cluster.create(sem.NADS, sem.shadow(namespace, owner), namespace)
    name = obj["metadata"]["name"]
    cluster.delete(r.PODS, "owner", namespace, grace_period_seconds=0)
    held = cluster.get(sem.NADS, name, namespace)
    assert held["metadata"]["deletionTimestamp"]
    assert held["spec"] == obj["spec"]
    drop = [
        {"op": "test", "path": "/metadata/uid", "value": held["metadata"]["uid"]},
        {"op": "test", "path": "/metadata/finalizers/0", "value": sem.FINALIZER},
        {"op": "remove", "path": "/metadata/finalizers/0"},
    ]
    cluster.patch(sem.NADS, name, drop, namespace, patch_type="json")
    with pytest.raises(NotFound):
        cluster.get(sem.NADS, name, namespace)
