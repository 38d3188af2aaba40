"""The lab API server serves IPPool and IPAllocation as the real kube-apiserver does on the
points the IPAM design relies on (the same checks run on the real server in
``tests/e2e/test_control_plane.py``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from dmn.api.cluster import Cluster, connect
from dmn.api.cluster import resources as r
from dmn.controller.ippool import ippool_diagnostics
from dmn.lab.apiserver import LabApiServer
from tests.ipam import arbiter_checks


def test_concurrent_creates_have_one_winner(lab: LabApiServer) -> None:
    arbiter_checks.one_winner(lambda: Cluster(connect(url=lab.url)), "lab")


@pytest.mark.parametrize("check", arbiter_checks.ALL, ids=lambda c: c.__name__)
def test_server_behaviour(cluster: Cluster, check: Callable[[Cluster, str], None]) -> None:
    check(cluster, "lab")


def test_the_examples_are_served_and_valid(cluster: Cluster) -> None:
    """examples/ipam/pool.yaml passes the CRD schema, the pool plan and the overlap check."""
    path = Path(__file__).resolve().parents[2] / "examples" / "ipam" / "pool.yaml"
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert [d["metadata"]["name"] for d in docs] == ["macvlan-v4", "macvlan-dual"]
    for doc in docs:
        assert ippool_diagnostics(doc, docs) == []
        cluster.create(r.IP_POOLS, doc)
        cluster.delete(r.IP_POOLS, doc["metadata"]["name"])
