"""The publisher's policy reads: metadata lists, and a whole policy fetched only when it is
new or its generation moved (against the lab API server, which serves PartialObjectMetadata
as kube-apiserver does: the same checks run on the real one in
``tests/e2e/test_control_plane.py``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from dmn.agent.slices.policy_reader import PolicyReader
from dmn.api.cluster import Cluster, NotFound
from dmn.api.cluster import resources as r
from tests.slices import policy_view_checks
from tests.slices.policy_view_checks import _entry, _policy, _write_nodes


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    from dmn.lab.apiserver import LabApiServer
    from tests.controller.support import client_for, install

    with LabApiServer() as server, client_for(server.url) as c:
        install(c)
        yield c


@pytest.mark.parametrize("check", policy_view_checks.ALL, ids=lambda c: c.__name__)
def test_server_behaviour(cluster: Cluster, check: Callable[[Cluster, str], None]) -> None:
    check(cluster, "lab")


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def policies(cluster: Cluster) -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    for name in names:
        with contextlib.suppress(NotFound):
            cluster.delete(r.DEVICE_EXPOSURE_POLICIES, name)


def _create(cluster: Cluster, names: list[str], name: str) -> dict[str, Any]:
    names.append(name)
    return cluster.create(r.DEVICE_EXPOSURE_POLICIES, _policy(name))


def _names(docs: list[dict[str, Any]]) -> list[str]:
    return sorted(d["metadata"]["name"] for d in docs)


def test_only_new_or_changed_policies_are_read_whole(cluster: Cluster, policies: list[str]) -> None:
    clock = _Clock()
    reader = PolicyReader(cluster, refresh_s=300.0, clock=clock)
    _create(cluster, policies, "reader-a")
    _create(cluster, policies, "reader-b")
    assert _names(reader.read()) == ["reader-a", "reader-b"] and reader.fetches == 2
    assert _names(reader.read()) == ["reader-a", "reader-b"] and reader.fetches == 2

    # a status write (the controller's): no generation move, nothing fetched
    _write_nodes(cluster, "reader-a", [_entry("other-node")])
    reader.read()
    assert reader.fetches == 2

    # a spec change: that policy only, and the pass sees the new spec
    cluster.patch(r.DEVICE_EXPOSURE_POLICIES, "reader-a", {"spec": {"priority": 42}})
    docs = {d["metadata"]["name"]: d for d in reader.read()}
    assert reader.fetches == 3 and docs["reader-a"]["spec"]["priority"] == 42

    # deleted: gone from the read; recreated under the same name: a new UID, fetched
    cluster.delete(r.DEVICE_EXPOSURE_POLICIES, "reader-b")
    assert _names(reader.read()) == ["reader-a"]
    _create(cluster, policies, "reader-b")
    assert _names(reader.read()) == ["reader-a", "reader-b"] and reader.fetches == 4

    # the refresh bound: every copy is fetched again once it is that old
    clock.now = 301.0
    reader.read()
    assert reader.fetches == 6
