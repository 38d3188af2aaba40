"""The API semantics Multus automatic mode relies on, against the real kube-apiserver v1.37.2
(a control-plane-only upstream lab): the same checks the lab API server passes
(``tests/apiserver/nad_semantics.py``), so a difference is found where it would matter."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator

import pytest

from dmn.api.cluster import AlreadyExists, ApiFailure, Cluster
from dmn.api.cluster import resources as r
from tests.apiserver import nad_semantics as sem
from tests.e2e.conftest import Session
from tests.fixtures.multus import nad_crd
from tests.waiting import wait_for

pytestmark = [pytest.mark.e2e]


@pytest.fixture(scope="module")
def admin(control_plane: Session) -> Iterator[Cluster]:
    cluster = control_plane.lab.admin()
    try:
        with contextlib.suppress(AlreadyExists):
            cluster.create(r.CUSTOM_RESOURCE_DEFINITIONS, nad_crd())
        wait_for(
            lambda: cluster.list(sem.NADS, "default") is not None,
            timeout=60,
            what="the NetworkAttachmentDefinition CRD served",
            tolerate=(ApiFailure,),
        )
        yield cluster
    finally:
        cluster.close()


@pytest.mark.parametrize("check", sem.CHECKS, ids=lambda c: c.__name__)
def test_nad_semantics(admin: Cluster, check: Callable[[Cluster, str, dict], None]) -> None:
    namespace = f"nad-{uuid.uuid4().hex[:8]}"
    admin.create(r.NAMESPACES, {"metadata": {"name": namespace}})
    # no controller manager here: the default service account the Pod needs is ours to make
    admin.create(r.SERVICE_ACCOUNTS, {"metadata": {"name": "default"}}, namespace)
    owner = admin.create(r.PODS, sem.pod(namespace), namespace)
    check(admin, namespace, owner)
