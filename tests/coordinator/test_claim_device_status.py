"""ClaimDeviceStatus against the lab API server: a claim that is gone is no failure."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from dmn.agent.coordinator.attachment_status import ClaimDeviceStatus
from dmn.api.cluster import Cluster, connect
from dmn.api.cluster import resources as r
from dmn.lab.apiserver import LabApiServer

ENTRY = {"driver": "d.example", "pool": "p", "device": "dev0"}
REQUEST = {"name": "net", "exactly": {"deviceClassName": "dc"}}


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with LabApiServer() as srv, Cluster(connect(url=srv.url)) as c:
        yield c


def test_a_deleted_claim_is_not_reported_as_a_failure(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    """The node drops its entries at unprepare, often after the claim went with its Pod:
    nothing is left to report and a newcomer's demo must not print a WARNING for it."""
    with caplog.at_level(logging.DEBUG, logger="dmn.agent.coordinator.attachment_status"):
        ClaimDeviceStatus(cluster).write("default", "gone", [], drop=[ENTRY])
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("DEBUG", "event=claim-status-gone claim=default/gone")
    ]


def test_entries_are_written_to_an_existing_claim(cluster: Cluster) -> None:
    cluster.create(
        r.RESOURCE_CLAIMS,
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
         "metadata": {"name": "here", "namespace": "default"},
         "spec": {"devices": {"requests": [REQUEST]}}},
        "default",
    )  # fmt: skip
    allocation = {"devices": {"results": [{"request": "net", **ENTRY}]}}
    claim = cluster.get(r.RESOURCE_CLAIMS, "here", "default")
    claim["status"] = {"allocation": allocation}
    cluster.replace(r.RESOURCE_CLAIMS, claim, status=True)
    ClaimDeviceStatus(cluster).write("default", "here", [ENTRY])
    claim = cluster.get(r.RESOURCE_CLAIMS, "here", "default")
    assert claim["status"]["devices"] == [ENTRY]
