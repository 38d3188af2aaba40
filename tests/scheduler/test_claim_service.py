"""The lab allocator against the lab API server: slices and classes in, claim status out."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dmn.api.cluster import Cluster, connect
from dmn.api.cluster import resources as r
from dmn.lab.allocator import AllocationError
from dmn.lab.allocator.service import ClaimService
from dmn.lab.apiserver import LabApiServer
from tests.fixtures.policies import STANDARD_CLASSES, claim, on_pci, request, standard_policies
from tests.fixtures.sysfs_layouts import MLX_PF0
from tests.scheduler.harness import NODE, make_harness

pytestmark = pytest.mark.scheduler


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    h = make_harness(tmp_path, standard_policies(children=4))
    with LabApiServer() as server, Cluster(connect(url=server.url)) as c:
        for s in h.slices:
            c.create(r.RESOURCE_SLICES, s)
        for cls in STANDARD_CLASSES:
            c.create(r.DEVICE_CLASSES, {k: v for k, v in cls.items() if k != "kind"})
        yield c


def make(c: Cluster, uid_name: str, cls: str) -> dict[str, Any]:
    body = claim(uid_name, request("r", cls, selectors=[on_pci(MLX_PF0)]))
    body["metadata"] = {"name": uid_name, "namespace": "default"}
    return c.create(r.RESOURCE_CLAIMS, body)


def test_allocation_is_recorded_in_claim_status_and_survives_restart(cluster: Cluster) -> None:
    svc = ClaimService(cluster, NODE)
    mac = make(cluster, "mac", "pf-macvlan")
    pod = {"metadata": {"name": "p", "uid": "pod-uid-1"}}
    (written,) = svc.allocate([mac], pod)
    result = written["status"]["allocation"]["devices"]["results"][0]
    assert result["shareID"] and written["status"]["reservedFor"][0]["uid"] == "pod-uid-1"
    stored = cluster.get(r.RESOURCE_CLAIMS, "mac", "default")
    assert stored["status"]["allocation"]["devices"]["results"][0]["device"] == result["device"]

    ipv = make(cluster, "ipv", "pf-ipvlan")
    restarted = ClaimService(cluster, NODE)
    restarted.restore()
    with pytest.raises(AllocationError):
        restarted.allocate([ipv])
    restarted.release(cluster.get(r.RESOURCE_CLAIMS, "mac", "default"))
    assert not cluster.get(r.RESOURCE_CLAIMS, "mac", "default").get("status", {}).get("allocation")
    restarted.allocate([cluster.get(r.RESOURCE_CLAIMS, "ipv", "default")])


def test_failed_status_write_rolls_back(cluster: Cluster) -> None:
    svc = ClaimService(cluster, NODE)
    ok = make(cluster, "k", "pf-kernel")
    ghost = {**ok, "metadata": {**ok["metadata"], "name": "ghost", "uid": "ghost-uid"}}
    ghost["spec"] = {"devices": {"requests": [request("v", "vf-kernel")]}}
    with pytest.raises(Exception):  # noqa: B017 - the ghost claim does not exist: 404
        svc.allocate([ok, ghost])
    assert svc.allocator.allocations == {}
    assert not cluster.get(r.RESOURCE_CLAIMS, "k", "default").get("status", {}).get("allocation")
