"""A topology reports how many published devices each of its DeviceClasses selects.

The slices are the node agent's own (the persona builder and slice builder over the
reference node's sysfs with the standard policies); the classes are the compiler's; the
selectors are evaluated with the one CEL evaluator the lab's scheduler uses.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dmn.agent.personas import build_personas
from dmn.agent.slices import build_slices
from dmn.api.cluster import Cluster, NotFound
from dmn.api.cluster import resources as r
from dmn.api.identity import DRIVER
from dmn.controller.compile.compiler import compile_topology
from dmn.controller.device_matches import SliceMatchMemo, count_matches, matches_condition
from dmn.controller.manager import Controller
from dmn.interpreter.loader import load_builtin_plugins
from dmn.opcodes.registry import default_registry
from tests.controller.support import example, wait_for
from tests.fixtures.policies import standard_policies
from tests.fixtures.sysfs_layouts import build_reference_node
from tests.slices.test_slices import inventory

NO_DEVICE = f'device.attributes["{DRIVER}"].mode == "passthru"'


def _slices(tmp: Path, node: str, generation: int = 1) -> list[dict[str, Any]]:
    personas = build_personas(inventory(build_reference_node(tmp)), standard_policies(), {})
    return build_slices(personas, node, generation)


@pytest.fixture(scope="module")
def worker_a(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return _slices(tmp_path_factory.mktemp("a"), "worker-a")


@pytest.fixture(scope="module")
def worker_b(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return _slices(tmp_path_factory.mktemp("b"), "worker-b")


def _classes(topology: dict[str, Any]) -> list[dict[str, Any]]:
    result = compile_topology(topology, load_builtin_plugins(), default_registry(), uid="u-1")
    assert result.compiled is not None, result.diagnostics
    return result.compiled.device_classes("rev-uid")


def _narrowed(name: str, expression: str) -> dict[str, Any]:
    topo = copy.deepcopy(example("shared-macvlan"))
    topo["metadata"]["name"] = name
    topo["spec"]["steps"][0]["hardwareSelectors"] = [{"cel": {"expression": expression}}]
    return topo


def test_count_uses_real_selectors_and_the_scheduler_pool_rule(
    worker_a: list[dict[str, Any]], worker_b: list[dict[str, Any]]
) -> None:
    macvlan = _classes(example("shared-macvlan"))
    # the reference node exposes two macvlan (bridge) parents
    [m] = count_matches(macvlan, worker_a)
    assert (m.root_step, m.devices, m.nodes, m.errors) == ("net1", 2, 1, 0)
    [m] = count_matches(macvlan, [*worker_a, *worker_b])
    assert (m.devices, m.nodes) == (4, 2)
    assert matches_condition([m])[:2] == (True, "DevicesPublished")

    # a newer generation of worker-a's pool, half written (one of its four slices): the
    # scheduler skips the incomplete pool, and so does the count
    newer = copy.deepcopy(next(s for s in worker_a if s["spec"].get("devices")))
    newer["metadata"]["name"] += "-g2"
    newer["spec"]["pool"]["generation"] = 2
    [m] = count_matches(macvlan, [*worker_a, newer, *worker_b])
    assert (m.devices, m.nodes) == (2, 1)

    # a hardware selector that narrows to nothing
    [m] = count_matches(_classes(_narrowed("narrow", NO_DEVICE)), worker_a)
    assert m.devices == 0
    ok, reason, message = matches_condition([m])
    assert (ok, reason) == (False, "E_NO_MATCHING_DEVICES")
    assert m.device_class_name in message and "root net1" in message

    # a selector that fails at run time on a device (missing attribute, unguarded) is
    # counted apart: upstream aborts the allocation attempt that reaches such a device
    [m] = count_matches(
        _classes(_narrowed("unguarded", f'device.attributes["{DRIVER}"].noSuchAttribute')),
        worker_a,
    )
    assert (m.devices, m.errors) == (0, 2)
    assert "noSuchAttribute" in m.first_error


def _stored(slices: list[dict[str, Any]], version: str) -> list[dict[str, Any]]:
    """The slices as the API server would hand them out: a UID and a resourceVersion."""
    out = copy.deepcopy(slices)
    for s in out:
        s["metadata"]["uid"] = f"uid-{s['metadata']['name']}"
        s["metadata"]["resourceVersion"] = version
    return out


def test_an_unchanged_slice_is_counted_once_per_selectors(
    worker_a: list[dict[str, Any]], worker_b: list[dict[str, Any]]
) -> None:
    macvlan = _classes(example("shared-macvlan"))
    narrow = _classes(_narrowed("narrow", NO_DEVICE))
    unguarded = _classes(_narrowed("unguarded", f'device.attributes["{DRIVER}"].noSuchAttribute'))
    classes = [*macvlan, *narrow, *unguarded]
    stored = _stored([*worker_a, *worker_b], "7")
    memo = SliceMatchMemo()
    fresh = count_matches(classes, stored)
    assert count_matches(classes, stored, memo=memo) == fresh
    first = memo.evaluated
    assert first > 0
    assert count_matches(classes, stored, memo=memo) == fresh  # a resync: nothing evaluated
    assert memo.evaluated == first
    # one slice written again (a new resourceVersion): only it is evaluated again
    changed = copy.deepcopy(stored)
    changed[0]["metadata"]["resourceVersion"] = "8"
    assert count_matches(classes, changed, memo=memo) == count_matches(classes, changed)
    assert memo.evaluated == first + len(classes)
    # objects without identity (not from an API server) are always evaluated
    bare = [*worker_a, *worker_b]
    before = memo.evaluated
    assert count_matches(classes, bare, memo=memo) == fresh
    assert memo.evaluated > before
    # bounded: past its limit it starts over and stays right
    small = SliceMatchMemo(limit=3)
    for _ in range(2):
        assert count_matches(classes, stored, memo=small) == fresh


# --- the controller against the lab API server ------------------------------------------


@pytest.fixture(scope="module")
def topologies(cluster: Cluster, controller: Controller) -> Iterator[list[str]]:
    cluster.create(r.NETWORK_TOPOLOGIES, example("shared-macvlan"))
    cluster.create(r.NETWORK_TOPOLOGIES, _narrowed("macvlan-passthru", NO_DEVICE))
    yield ["shared-macvlan", "macvlan-passthru"]


def _matched(cluster: Cluster, name: str, status: str, devices: int | None = None) -> Any:
    def probe() -> dict[str, Any] | None:
        topo = cluster.get(r.NETWORK_TOPOLOGIES, name)
        st = topo.get("status") or {}
        cond = next((c for c in st.get("conditions") or [] if c["type"] == "DevicesMatched"), None)
        if cond is None or cond["status"] != status:
            return None
        if devices is not None and [m["devices"] for m in st.get("deviceMatches") or []] != [
            devices
        ]:
            return None
        return topo

    return probe


def _events(cluster: Cluster, topo: dict[str, Any], reason: str) -> list[dict[str, Any]]:
    return [
        e
        for e in cluster.list(r.EVENTS, "default").items
        if e["involvedObject"].get("uid") == topo["metadata"]["uid"] and e["reason"] == reason
    ]


def test_topology_status_follows_the_published_slices(
    cluster: Cluster,
    topologies: list[str],
    worker_a: list[dict[str, Any]],
    worker_b: list[dict[str, Any]],
) -> None:
    # nothing published yet: both topologies are Ready but their classes match nothing
    for name in topologies:
        topo = wait_for(_matched(cluster, name, "False", 0), what=f"{name} unmatched")
        cond = next(c for c in topo["status"]["conditions"] if c["type"] == "DevicesMatched")
        assert cond["reason"] == "E_NO_MATCHING_DEVICES"
        ready = next(c for c in topo["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True"
        assert wait_for(lambda t=topo: _events(cluster, t, "E_NO_MATCHING_DEVICES"))

    for s in [*worker_a, *worker_b]:
        cluster.create(r.RESOURCE_SLICES, s)
    topo = wait_for(_matched(cluster, "shared-macvlan", "True", 4), what="4 devices matched")
    [match] = topo["status"]["deviceMatches"]
    assert match["rootStep"] == "net1"
    assert match["nodes"] == 2
    assert match["deviceClassName"] == topo["status"]["roots"][0]["deviceClassName"]
    cond = next(c for c in topo["status"]["conditions"] if c["type"] == "DevicesMatched")
    assert cond["reason"] == "DevicesPublished"
    assert "4 device(s) on 2 node(s)" in cond["message"]
    # the narrowed class still selects nothing, with the class named in the message
    narrow = cluster.get(r.NETWORK_TOPOLOGIES, "macvlan-passthru")
    cond = next(c for c in narrow["status"]["conditions"] if c["type"] == "DevicesMatched")
    assert (cond["status"], cond["reason"]) == ("False", "E_NO_MATCHING_DEVICES")
    assert narrow["status"]["roots"][0]["deviceClassName"] in cond["message"]

    # worker-b withdraws its devices (a policy change publishes an empty pool generation)
    for s in worker_b:
        with contextlib.suppress(NotFound):
            cluster.delete(r.RESOURCE_SLICES, s["metadata"]["name"])
    topo = wait_for(_matched(cluster, "shared-macvlan", "True", 2), what="2 devices matched")
    assert topo["status"]["deviceMatches"][0]["nodes"] == 1
    # and worker-a too: the condition turns False with its reason code and an Event
    for s in worker_a:
        cluster.delete(r.RESOURCE_SLICES, s["metadata"]["name"])
    topo = wait_for(_matched(cluster, "shared-macvlan", "False", 0), what="unmatched again")
    assert wait_for(lambda: _events(cluster, topo, "E_NO_MATCHING_DEVICES"))
