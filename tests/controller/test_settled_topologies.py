"""A topology whose inputs did not move is not compiled again, nor read from the API server.

At rest, every resync and every slice event reconciled every topology in full: read it, list
the plugins, compile, create-or-adopt its revision and classes (each a create answered 409,
then a get). With 300 topologies that was 41 s of controller CPU and 1 GB of API responses
a minute (benchmarks/scale.py). A reconcile now starts from the watch caches' fingerprint of
its inputs; what moved any of them still converges.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from dmn.api.cluster import Cluster
from dmn.api.cluster import resources as r
from dmn.api.identity import DRIVER
from dmn.controller.manager import Controller
from dmn.lab.apiserver import LabApiServer
from dmn.opcodes.registry import default_registry
from tests.controller.support import client_for, example, topology_settled, wait_for


class _Requests:
    """The real client, counting the requests made through it."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.count = 0
        self.calls: list[str] = []
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.cluster, name)
        if name not in ("get", "list", "create", "replace", "patch", "delete"):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self.count += 1
                named = args[1] if len(args) > 1 and isinstance(args[1], str) else ""
                self.calls.append(f"{name} {getattr(args[0], 'plural', '')} {named}".rstrip())
            return attr(*args, **kwargs)

        return call


@pytest.fixture
def running(lab: LabApiServer) -> Iterator[Controller]:
    with client_for(lab.url) as c:
        ctl = Controller(c, default_registry(), resync=0.3)
        ctl.start()
        yield ctl
        ctl.stop()


def _reconciles(ctl: Controller) -> int:
    return ctl.processed


def test_a_settled_topology_costs_no_request_and_a_moved_input_converges(
    cluster: Cluster, running: Controller
) -> None:
    topo = example("host-device")
    topo["metadata"]["name"] = "settled"
    cluster.create(r.NETWORK_TOPOLOGIES, topo)
    ready = wait_for(topology_settled(cluster, "settled"), what="Ready")
    _wait_settled_on_stored(cluster, running)

    spy = _Requests(running.topologies.cluster)
    running.topologies.cluster = spy  # type: ignore[assignment]
    collector = _Requests(running.revisions.cluster)
    running.revisions.cluster = collector  # type: ignore[assignment]
    counts: list[str] = []
    count = running.topologies._device_matches

    def counted(compiled: Any, revision: Any) -> Any:
        counts.append(compiled.revision_name)
        return count(compiled, revision)

    running.topologies._device_matches = counted  # type: ignore[method-assign]
    try:
        before = _reconciles(running)
        wait_for(lambda: _reconciles(running) > before + 20 or None, what="resyncs")
        assert spy.count == 0, spy.calls
        assert counts == []  # no slice moved: no device was visited again
        cluster.create(r.RESOURCE_SLICES, _slice())
        wait_for(lambda: counts or None, what="the devices counted again after a slice event")
        assert spy.count == 0, spy.calls
        # its current revision is held by the caches' answer, with no read either
        assert collector.count == 0, collector.calls
        assert ready["status"]["revision"]["name"] in running.revisions.held_by_topology

        # someone deletes a generated class: the next reconcile is a full one and remakes it
        root = ready["status"]["roots"][0]["deviceClassName"]
        cluster.delete(r.DEVICE_CLASSES, root)
        wait_for(lambda: cluster.get(r.DEVICE_CLASSES, root), what="the class made again")
        assert spy.count > 0

        # any write to the topology moves its version: reconciled in full again
        _wait_settled_on_stored(cluster, running)
        spy.count = 0
        current = cluster.get(r.NETWORK_TOPOLOGIES, "settled")
        current["metadata"].setdefault("labels", {})["edited"] = "yes"
        cluster.replace(r.NETWORK_TOPOLOGIES, current)
        _wait_settled_on_stored(cluster, running)
        assert spy.count > 0
    finally:
        del running.topologies._device_matches
        running.topologies.cluster = spy.cluster
        running.revisions.cluster = collector.cluster


@pytest.fixture
def alone() -> Iterator[tuple[Cluster, Controller]]:
    """A lab API server and a controller of its own (no other topology reconciled)."""
    from tests.controller.support import install

    with LabApiServer() as server, client_for(server.url) as c:
        install(c)
        ctl = Controller(c, default_registry(), resync=0.3)
        ctl.start()
        try:
            yield c, ctl
        finally:
            ctl.stop()


def test_a_recount_that_writes_the_status_leaves_the_topology_settled(
    alone: tuple[Cluster, Controller],
) -> None:
    """A slice event changes what a settled topology's classes match: the recount writes
    the status, and that write alone does not make the next resyncs full reconciles (it
    moved the topology's version, which the fingerprint carries over to)."""
    cluster, running = alone
    topo = example("host-device")
    topo["metadata"]["name"] = "recounted"
    cluster.create(r.NETWORK_TOPOLOGIES, topo)
    wait_for(topology_settled(cluster, "recounted"), what="Ready")
    _wait_settled_on_stored(cluster, running, "recounted")
    spy = _Requests(running.topologies.cluster)
    running.topologies.cluster = spy  # type: ignore[assignment]
    count = running.topologies._device_matches

    def one_matches(compiled: Any, revision: Any) -> Any:
        found = count(compiled, revision)
        return (
            None if found is None else [dataclasses.replace(m, devices=1, nodes=1) for m in found]
        )

    running.topologies._device_matches = one_matches  # type: ignore[method-assign]
    try:
        cluster.create(r.RESOURCE_SLICES, _slice("recounted-node-0"))

        def matched() -> bool | None:
            status = cluster.get(r.NETWORK_TOPOLOGIES, "recounted").get("status") or {}
            conds = {c["type"]: c["status"] for c in status.get("conditions") or []}
            return conds.get("DevicesMatched") == "True" or None

        wait_for(matched, what="the recount reported")
        before = _reconciles(running)
        wait_for(lambda: _reconciles(running) > before + 20 or None, what="resyncs")
        assert spy.calls == ["patch networktopologies recounted"], spy.calls
    finally:
        del running.topologies._device_matches
        running.topologies.cluster = spy.cluster


def test_the_fingerprint_follows_only_the_reconciles_own_status_write() -> None:
    from dmn.controller.topology import _after_own_write

    read = {"metadata": {"resourceVersion": "5", "generation": 2, "labels": {"a": "b"}}}
    stored = {"metadata": {"resourceVersion": "9", "generation": 2, "labels": {"a": "b"}}}
    rest = (("plugins",), ("revisions",), ("classes",))
    assert _after_own_write(("5", *rest), read, stored) == ("9", *rest)
    assert _after_own_write(("5", *rest), read, None) == ("5", *rest)  # nothing written
    assert _after_own_write(("4", *rest), read, stored) == ("4", *rest)  # the cache lagged
    edited = {"metadata": {**stored["metadata"], "generation": 3}}  # an edit came between
    assert _after_own_write(("5", *rest), read, edited) == ("5", *rest)
    relabelled = {"metadata": {**stored["metadata"], "labels": {}}}
    assert _after_own_write(("5", *rest), read, relabelled) == ("5", *rest)


def _wait_settled_on_stored(cluster: Cluster, ctl: Controller, name: str = "settled") -> None:
    """Until the controller's memo of its last reconcile is of the stored topology and of
    every input as the caches now hold them (what a resync compares)."""

    def settled() -> bool | None:
        done = ctl.topologies.settled.get(name)
        stored = cluster.get(r.NETWORK_TOPOLOGIES, name)["metadata"]["resourceVersion"]
        seen = ctl.topology_inputs(name)
        return (
            done is not None
            and seen is not None
            and done.fingerprint == seen[1]
            and done.fingerprint[0] == stored
        ) or None

    wait_for(settled, what="settled on the stored topology")


def _slice(name: str = "settled-node-0") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": DRIVER,
            "nodeName": "settled-node",
            "pool": {"name": "settled-node", "generation": 1, "resourceSliceCount": 1},
            "devices": [],
        },
    }
