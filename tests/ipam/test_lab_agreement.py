"""The lab API server serves IPPool and IPAllocation as the real kube-apiserver does on the
points the IPAM design relies on (the same checks run on the real server in
``tests/e2e/test_control_plane.py``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from dmn.api.cluster import Cluster, connect
from dmn.lab.apiserver import LabApiServer
from tests.ipam import arbiter_checks


def test_concurrent_creates_have_one_winner(lab: LabApiServer) -> None:
    arbiter_checks.one_winner(lambda: Cluster(connect(url=lab.url)), "lab")


@pytest.mark.parametrize("check", arbiter_checks.ALL, ids=lambda c: c.__name__)
def test_server_behaviour(cluster: Cluster, check: Callable[[Cluster, str], None]) -> None:
    check(cluster, "lab")
