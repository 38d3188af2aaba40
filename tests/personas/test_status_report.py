"""A node's entry of a DeviceExposurePolicy's ``status.nodes``: the pure merge the agent
writes (its own entry only, the others untouched and in place, the times kept while nothing
changed), the controller's aggregate of all entries, and the write itself against the lab
API server (resourceVersion precondition, conflict re-read, no write when unchanged)."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest

from dmn.agent.personas.status_report import (
    WHOLE_LIST,
    entry_patch,
    merged_entry,
    merged_nodes,
    write_node_entry,
)
from dmn.api.cluster import Cluster
from dmn.api.cluster import resources as r
from dmn.api.identity import GROUP
from dmn.api.policy import DeviceExposurePolicy
from dmn.controller.plugin_status import aggregate_node_reports

T0 = "2026-11-29T08:00:00Z"
T1 = "2026-11-29T09:00:00Z"


def _cond(kind: str, status: bool, reason: str, at: str = T0, message: str = "") -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True" if status else "False",
        "observedGeneration": 1,
        "lastTransitionTime": at,
        "reason": reason,
        "message": message,
    }


def _report(
    node: str,
    at: str = T0,
    *,
    ready: bool = True,
    conflict: bool = False,
    devices: int = 1,
    generation: int = 1,
    diagnostics: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    conds = [
        _cond("Ready", ready, "Published" if ready else "E_POLICY_CONFLICT", at, "why"),
        _cond("Conflict", conflict, "E_POLICY_CONFLICT" if conflict else "NoConflict", at),
        _cond("Unsupported", False, "Supported", at),
        _cond("PendingDrain", False, "NothingPending", at),
    ]
    for c in conds:
        c["observedGeneration"] = generation
    entry: dict[str, Any] = {
        "nodeName": node,
        "observedGeneration": generation,
        "conditions": conds,
        "exposedDevices": devices,
        "lastReportTime": at,
    }
    if diagnostics:
        entry["diagnostics"] = diagnostics
    return entry


def test_an_unchanged_report_keeps_the_stored_entry_whole() -> None:
    stored = _report("n1", T0)
    assert merged_entry(stored, _report("n1", T1)) == stored


def test_a_changed_report_keeps_transition_times_of_conditions_that_stayed() -> None:
    stored = _report("n1", T0)
    new = merged_entry(stored, _report("n1", T1, ready=False, conflict=True))
    conds = {c["type"]: c for c in new["conditions"]}
    assert conds["Ready"]["lastTransitionTime"] == T1  # moved: its status changed
    assert conds["Conflict"]["lastTransitionTime"] == T1
    assert conds["Unsupported"]["lastTransitionTime"] == T0  # stayed False
    assert new["lastReportTime"] == T1


def test_only_the_own_entry_changes_and_every_other_stays_in_place() -> None:
    others = [_report("a", devices=3), _report("c", devices=5)]
    nodes = [others[0], _report("b", T0), others[1]]
    merged = merged_nodes(nodes, "b", _report("b", T1, devices=9))
    assert [e["nodeName"] for e in merged] == ["a", "b", "c"]
    assert merged[0] == others[0] and merged[2] == others[1]
    assert merged[1]["exposedDevices"] == 9
    # the input is not changed
    assert nodes[1]["exposedDevices"] == 1


def test_a_new_node_appends_and_a_node_no_longer_concerned_removes_its_entry() -> None:
    nodes = [_report("a"), _report("b")]
    added = merged_nodes(nodes, "z", _report("z"))
    assert [e["nodeName"] for e in added] == ["a", "b", "z"]
    removed = merged_nodes(added, "a", None)
    assert [e["nodeName"] for e in removed] == ["b", "z"]
    assert merged_nodes(nodes, "z", None) == nodes  # nothing of its own: nothing changes


def test_merging_the_same_report_twice_changes_nothing() -> None:
    once = merged_nodes([_report("a")], "b", _report("b", T0))
    assert merged_nodes(once, "b", _report("b", T1)) == once


def test_another_nodes_entry_is_never_touched_even_if_it_names_this_node_twice() -> None:
    """A list-map cannot hold two entries of one node; if a stored list did, the merge keeps
    one (its own) and never touches another node's."""
    nodes = [_report("a"), _report("b"), _report("b", devices=7)]
    merged = merged_nodes(nodes, "b", _report("b", devices=2))
    assert [e["nodeName"] for e in merged] == ["a", "b"]
    assert merged[0] == nodes[0]


def test_every_written_entry_validates_against_the_model() -> None:
    from dmn.agent.personas.status import policy_status
    from dmn.api.policy import NodePolicyStatus

    for entry in merged_nodes([_report("a")], "b", _report("b")):
        NodePolicyStatus.model_validate(entry)
    NodePolicyStatus.model_validate(policy_status("p", _empty_personas(), 1, T0, "n1").to_api())


def _empty_personas() -> Any:
    from dmn.agent.personas.model import PersonaSet

    return PersonaSet(personas=(), counter_sets={}, findings=())


# --- the controller's aggregate ----------------------------------------------------------


def _by_type(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status["conditions"]}


def test_no_report_makes_ready_unknown() -> None:
    status = aggregate_node_reports(None, [], 3)
    conds = _by_type(status)
    assert conds["Ready"]["status"] == "Unknown" and conds["Ready"]["reason"] == "NoNodeReports"
    assert conds["Conflict"]["status"] == "False"
    assert status["exposedDevices"] == 0 and status["diagnostics"] is None
    assert status["observedGeneration"] == 3


def test_one_unready_node_makes_the_policy_unready_and_any_conflict_shows() -> None:
    diag = {"code": "E_POLICY_CONFLICT", "path": "0000:18:00.0", "message": "with rival"}
    nodes = [
        _report("a", devices=2, generation=2),
        _report("b", ready=False, conflict=True, devices=0, diagnostics=[diag]),
        _report("c", devices=4, diagnostics=[diag], generation=2),
    ]
    validated = [_cond("Validated", True, "Valid")]
    status = aggregate_node_reports(validated, nodes, 2)
    conds = _by_type(status)
    assert conds["Validated"] == validated[0]  # the controller's own, kept
    assert conds["Ready"]["status"] == "False"
    assert conds["Ready"]["reason"] == "E_POLICY_CONFLICT"
    assert "1 of 3 nodes (b)" in conds["Ready"]["message"]
    assert conds["Conflict"]["status"] == "True" and "(b)" in conds["Conflict"]["message"]
    assert conds["Ready"]["observedGeneration"] == 1  # node b is a generation behind
    assert status["exposedDevices"] == 6
    assert status["diagnostics"] == [diag]  # the same finding on two nodes: once


def test_all_ready_and_the_aggregate_is_stable() -> None:
    nodes = [_report("a"), _report("b")]
    first = aggregate_node_reports(None, nodes, 1)
    assert _by_type(first)["Ready"]["status"] == "True"
    again = aggregate_node_reports(first["conditions"], nodes, 1)
    assert again == first  # a second pass writes nothing


def test_many_nodes_are_named_within_bounds() -> None:
    nodes = [_report(f"n{i}", ready=False) for i in range(30)]
    ready = _by_type(aggregate_node_reports(None, nodes, 1))["Ready"]
    assert "and 22 more" in ready["message"]


def test_the_patch_touches_only_the_own_index_and_tests_its_name_first() -> None:
    status = {"nodes": [_report("a"), _report("b"), _report("c")]}
    assert entry_patch(status, "b", _report("b", T1)) is None  # same content: nothing
    changed = _report("b", T1, devices=2)
    assert entry_patch(status, "b", changed) == [
        {"op": "test", "path": "/status/nodes/1/nodeName", "value": "b"},
        {"op": "replace", "path": "/status/nodes/1", "value": merged_entry(_report("b"), changed)},
    ]
    assert entry_patch(status, "c", None) == [
        {"op": "test", "path": "/status/nodes/2/nodeName", "value": "c"},
        {"op": "remove", "path": "/status/nodes/2"},
    ]
    assert entry_patch(status, "d", _report("d")) == [
        {"op": "add", "path": "/status/nodes/-", "value": _report("d")}
    ]
    assert entry_patch(status, "d", None) is None


def test_no_list_yet_or_the_own_name_twice_writes_the_whole_list() -> None:
    assert entry_patch({}, "a", _report("a")) == WHOLE_LIST
    assert entry_patch({"nodes": [_report("a"), _report("a", devices=3)]}, "a", _report("a")) == (
        WHOLE_LIST
    )


# --- the write, against the lab API server ------------------------------------------------


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    from dmn.lab.apiserver import LabApiServer
    from tests.controller.support import client_for, install

    with LabApiServer() as server, client_for(server.url) as c:
        install(c)
        yield c


def _policy(name: str) -> dict[str, Any]:
    doc = {
        "apiVersion": f"{GROUP}/v1alpha1",
        "kind": "DeviceExposurePolicy",
        "metadata": {"name": name},
        "spec": {"selector": {"kind": "PF"}, "action": "Exclude"},
    }
    DeviceExposurePolicy.model_validate(doc)
    return doc


def test_the_write_merges_onto_what_another_node_wrote_meanwhile(cluster: Cluster) -> None:
    """Node b's pass read the policy before node a wrote: b's write conflicts, b re-reads
    and merges, and a's entry survives. A second identical write writes nothing."""
    created = cluster.create(r.DEVICE_EXPOSURE_POLICIES, _policy("merge-race"))
    stale = copy.deepcopy(created)
    assert write_node_entry(cluster, created, "a", _report("a"))
    assert write_node_entry(cluster, stale, "b", _report("b"))  # conflict, re-read, merged
    stored = cluster.get(r.DEVICE_EXPOSURE_POLICIES, "merge-race")
    assert [e["nodeName"] for e in stored["status"]["nodes"]] == ["a", "b"]
    version = stored["metadata"]["resourceVersion"]
    assert not write_node_entry(cluster, stored, "b", _report("b", T1))
    assert (
        cluster.get(r.DEVICE_EXPOSURE_POLICIES, "merge-race")["metadata"]["resourceVersion"]
        == version
    )
    assert write_node_entry(cluster, stored, "a", None)
    stored = cluster.get(r.DEVICE_EXPOSURE_POLICIES, "merge-race")
    assert [e["nodeName"] for e in stored["status"]["nodes"]] == ["b"]
    DeviceExposurePolicy.model_validate(stored)


def test_a_policy_deleted_meanwhile_is_no_failure(cluster: Cluster) -> None:
    created = cluster.create(r.DEVICE_EXPOSURE_POLICIES, _policy("gone-meanwhile"))
    cluster.delete(r.DEVICE_EXPOSURE_POLICIES, "gone-meanwhile")
    assert not write_node_entry(cluster, created, "a", _report("a"))


def test_a_status_write_alone_does_not_wake_the_publisher() -> None:
    """Each node's entry write is a MODIFIED of the policy for every node's watch: only a
    change of the generation (the spec), a new or deleted policy wakes a pass."""
    from dmn.agent.slices.node_publisher import _status_only
    from dmn.api.cluster.access import WatchEvent

    def event(kind: str, generation: int) -> WatchEvent:
        return WatchEvent(kind, {"metadata": {"name": "p", "generation": generation}})

    seen: dict[str, object] = {}
    assert not _status_only(event("ADDED", 1), seen)
    assert _status_only(event("MODIFIED", 1), seen)  # another node's entry
    assert not _status_only(event("MODIFIED", 2), seen)  # the spec changed
    assert _status_only(event("MODIFIED", 2), seen)
    assert not _status_only(event("DELETED", 2), seen)
    assert not _status_only(event("MODIFIED", 2), seen)  # unknown again: wake
    assert not _status_only(WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": "9"}}), seen)


class _CountingReads:
    """The cluster, counting the re-reads a write needed."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster, self.reads = cluster, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.cluster, name)

    def get(self, *args: Any, **kwargs: Any) -> Any:
        self.reads += 1
        return self.cluster.get(*args, **kwargs)


def test_many_nodes_writing_from_one_stale_read_need_no_reread(cluster: Cluster) -> None:
    """Every node read the policy before any of them wrote (as after a policy change):
    each entry lands at once, none is lost, and no write had to read the policy again."""
    created = cluster.create(r.DEVICE_EXPOSURE_POLICIES, _policy("many-writers"))
    assert write_node_entry(cluster, created, "n0", _report("n0"))
    stale = cluster.get(r.DEVICE_EXPOSURE_POLICIES, "many-writers")
    counting = _CountingReads(cluster)
    for i in range(1, 12):
        assert write_node_entry(counting, copy.deepcopy(stale), f"n{i}", _report(f"n{i}"))  # type: ignore[arg-type]
    assert counting.reads == 0
    stored = cluster.get(r.DEVICE_EXPOSURE_POLICIES, "many-writers")
    assert [e["nodeName"] for e in stored["status"]["nodes"]] == [f"n{i}" for i in range(12)]
    DeviceExposurePolicy.model_validate(stored)


def test_an_entry_removed_before_the_own_one_is_merged_again_not_misplaced(
    cluster: Cluster,
) -> None:
    """Node b read [a, b, c]; a removes its entry, so b's index moved: b's patch fails its
    name test, b re-reads and changes its own entry — c's stays as c wrote it."""
    created = cluster.create(r.DEVICE_EXPOSURE_POLICIES, _policy("index-moved"))
    for node in ("a", "b", "c"):
        created = cluster.get(r.DEVICE_EXPOSURE_POLICIES, "index-moved")
        assert write_node_entry(cluster, created, node, _report(node))
    stale = cluster.get(r.DEVICE_EXPOSURE_POLICIES, "index-moved")
    assert write_node_entry(cluster, stale, "a", None)
    assert write_node_entry(cluster, stale, "b", _report("b", T1, devices=5))
    stored = cluster.get(r.DEVICE_EXPOSURE_POLICIES, "index-moved")
    nodes = stored["status"]["nodes"]
    assert [e["nodeName"] for e in nodes] == ["b", "c"]
    assert nodes[0]["exposedDevices"] == 5 and nodes[1] == _report("c")
