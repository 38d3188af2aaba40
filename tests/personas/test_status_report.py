"""A node's reports on the DeviceExposurePolicies: the entry merge the agent makes (the times
kept while nothing changed), the annotation codec (bounded, refusing anything not a report
of that very node), the controller's aggregate of every node's entries (counted, the ones
needing attention listed, bounded), and both writes against the lab API server: the agent's
annotation on its own Node and the controller's policy status from the Nodes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmn.agent.personas.status_report import merged_entry, policy_entries, report_policy_statuses
from dmn.api.cluster import Cluster
from dmn.api.cluster import resources as r
from dmn.api.identity import GROUP
from dmn.api.policy import MAX_LISTED_NODES, DeviceExposurePolicy, NodePolicyStatus
from dmn.api.policy_report import (
    ANNOTATION,
    MAX_REPORT_BYTES,
    PolicyReportError,
    decode_reports,
    encode_reports,
    needs_attention,
    node_reports,
)
from dmn.controller.plugin_status import PolicyStatusReconciler, aggregate_node_reports

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


def test_every_entry_the_agent_makes_validates_against_the_model() -> None:
    from dmn.agent.personas.status import policy_status

    NodePolicyStatus.model_validate(policy_status("p", _empty_personas(), 1, T0, "n1").to_api())
    NodePolicyStatus.model_validate(merged_entry(_report("b"), _report("b", T1, devices=4)))


def _empty_personas() -> Any:
    from dmn.agent.personas.model import PersonaSet

    return PersonaSet(personas=(), counter_sets={}, findings=())


def _doc(name: str, generation: int = 1) -> dict[str, Any]:
    return {"metadata": {"name": name, "generation": generation}}


def test_the_node_reports_on_the_policies_that_concern_it_only() -> None:
    docs = [_doc("mine"), _doc("elsewhere"), _doc("also-mine", 4)]
    entries = policy_entries(_empty_personas(), docs, "n1", {"mine", "also-mine"}, {}, T0)
    assert sorted(entries) == ["also-mine", "mine"]
    assert entries["also-mine"]["observedGeneration"] == 4
    assert entries["mine"]["nodeName"] == "n1" and entries["mine"]["lastReportTime"] == T0
    again = policy_entries(_empty_personas(), docs, "n1", {"mine", "also-mine"}, entries, T1)
    assert again == entries  # nothing changed: the times stay, so nothing is written


# --- the annotation ------------------------------------------------------------------------


def test_the_annotation_round_trips_and_names_its_node_once() -> None:
    entries = {"p1": _report("n1"), "p2": _report("n1", ready=False, devices=0)}
    value = encode_reports("n1", entries).value
    body = json.loads(value)
    assert body["node"] == "n1" and "nodeName" not in body["policies"]["p1"]
    assert decode_reports("n1", value) == entries


@pytest.mark.adversarial
@pytest.mark.parametrize(
    ("value", "why"),
    [
        (None, "not a string"),
        ("{", "not JSON"),
        ("[]", "not a JSON object"),
        ('{"v":2,"node":"n1","policies":{}}', "version"),
        ('{"v":1,"node":"n2","policies":{}}', "another node"),  # a report copied from n2
        ('{"v":1,"node":"n1","policies":[]}', "policies is not"),
        ('{"v":1,"node":"n1","policies":{"p":{"exposedDevices":-1,'
         '"lastReportTime":"2026-01-01T00:00:00Z"}}}', "invalid at exposedDevices"),
        ('{"v":1,"node":"n1","policies":{"p":{"lastReportTime":"x","extra":1}}}', "invalid"),
        ('{"v":1,"node":"n1","policies":{"":{}}}', "not a name"),
        ("[" * 5000 + "]" * 5000, "not JSON"),
        (" " * (MAX_REPORT_BYTES + 1), "longer than"),
    ],
)  # fmt: skip
def test_anything_but_a_report_of_this_very_node_is_refused_with_a_reason(
    value: Any, why: str
) -> None:
    with pytest.raises(PolicyReportError, match=why):
        decode_reports("n1", value)
    node = {"metadata": {"name": "n1", "annotations": {ANNOTATION: value}}}
    if value is not None:
        entries, reason = node_reports(node)
        assert entries == {} and reason is not None and why.split()[0] in reason


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.text(max_size=200),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=20),
            lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids),
            max_leaves=20,
        ).map(lambda v: json.dumps({"v": 1, "node": "n1", "policies": {"p": v}})),
    )
)
def test_decoding_never_raises_anything_but_its_own_error(value: str) -> None:
    try:
        decoded = decode_reports("n1", value)
    except PolicyReportError:
        return
    for entry in decoded.values():
        NodePolicyStatus.model_validate(entry)


def test_an_oversized_report_leaves_out_diagnostics_first_then_whole_entries() -> None:
    diag = [{"code": "E_POLICY_CONFLICT", "path": "0000:18:00.0", "message": "m" * 900}] * 16
    entries = {f"p{i:03d}": _report("n1", diagnostics=diag) for i in range(8)}
    encoded = encode_reports("n1", entries)
    assert len(encoded.value.encode()) <= MAX_REPORT_BYTES
    decoded = decode_reports("n1", encoded.value)
    assert sorted(decoded) == sorted(entries)  # every policy still reported on
    assert encoded.trimmed and all("diagnostics" not in decoded[p] for p in encoded.trimmed)
    many = {f"p{i:04d}": _report("n1") for i in range(400)}
    encoded = encode_reports("n1", many)
    decoded = decode_reports("n1", encoded.value)
    assert len(encoded.value.encode()) <= MAX_REPORT_BYTES
    assert 0 < len(decoded) < 400 and set(decoded) | set(encoded.trimmed) == set(many)
    assert max(decoded) < min(set(many) - set(decoded))  # the last names by name go


def test_attention_is_trouble_diagnostics_or_an_older_generation() -> None:
    assert not needs_attention(_report("a"), 1)
    assert needs_attention(_report("a", ready=False), 1)
    assert needs_attention(_report("a", conflict=True), 1)
    assert needs_attention(_report("a", diagnostics=[{"code": "X", "message": "m"}]), 1)
    assert needs_attention(_report("a", generation=1), 2)
    assert needs_attention({"nodeName": "a"}, 1)  # no Ready condition: not known ready


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
    assert (status["reportingNodes"], status["readyNodes"]) == (3, 2)
    # a is ready and current: counted, not listed; b and c need attention
    assert [e["nodeName"] for e in status["nodes"]] == ["b", "c"]


def test_all_ready_and_the_aggregate_is_stable() -> None:
    nodes = [_report("a"), _report("b")]
    first = aggregate_node_reports(None, nodes, 1)
    assert _by_type(first)["Ready"]["status"] == "True"
    assert first["nodes"] is None and first["readyNodes"] == 2
    again = aggregate_node_reports(first["conditions"], nodes, 1)
    assert again == first  # a second pass writes nothing


def test_many_nodes_are_named_within_bounds() -> None:
    nodes = [_report(f"n{i}", ready=False) for i in range(30)]
    ready = _by_type(aggregate_node_reports(None, nodes, 1))["Ready"]
    assert "and 22 more" in ready["message"]


def test_the_listed_entries_are_bounded_whatever_the_nodes() -> None:
    nodes = [_report(f"n{i:04d}", ready=i % 2 == 0) for i in range(2000)]
    status = aggregate_node_reports(None, nodes, 1)
    assert len(status["nodes"]) == MAX_LISTED_NODES
    assert [e["nodeName"] for e in status["nodes"]][:2] == ["n0001", "n0003"]
    assert (status["reportingNodes"], status["readyNodes"]) == (2000, 1000)
    DeviceExposurePolicy.model_validate(
        {"metadata": {}, "spec": {"selector": {"kind": "PF"}, "action": "Exclude"},
         "status": status}
    )  # fmt: skip


def test_a_status_write_alone_does_not_wake_the_publisher() -> None:
    """The controller's status write is a MODIFIED of the policy for every node's watch:
    only a change of the generation (the spec), a new or deleted policy wakes a pass."""
    from dmn.agent.slices.node_publisher import _status_only
    from dmn.api.cluster.access import WatchEvent

    def event(kind: str, generation: int) -> WatchEvent:
        return WatchEvent(kind, {"metadata": {"name": "p", "generation": generation}})

    seen: dict[str, object] = {}
    assert not _status_only(event("ADDED", 1), seen)
    assert _status_only(event("MODIFIED", 1), seen)  # a status write
    assert not _status_only(event("MODIFIED", 2), seen)  # the spec changed
    assert _status_only(event("MODIFIED", 2), seen)
    assert not _status_only(event("DELETED", 2), seen)
    assert not _status_only(event("MODIFIED", 2), seen)  # unknown again: wake
    assert not _status_only(WatchEvent("BOOKMARK", {"metadata": {"resourceVersion": "9"}}), seen)


# --- the writes, against the lab API server -----------------------------------------------


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


def _node(cluster: Cluster, name: str) -> dict[str, Any]:
    return cluster.create(r.NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})


def _annotation(cluster: Cluster, node: str) -> str | None:
    node_obj = cluster.get(r.NODES, node)
    value = (node_obj["metadata"].get("annotations") or {}).get(ANNOTATION)
    return None if value is None else str(value)


def test_the_agent_writes_its_own_node_only_and_only_when_something_changed(
    cluster: Cluster,
) -> None:
    """The pass writes the annotation of its own Node; the policy is never written; a pass
    that finds the same writes nothing; a policy no longer concerning the node drops out."""
    _node(cluster, "rep-a")
    policy = cluster.create(r.DEVICE_EXPOSURE_POLICIES, _policy("rep-p"))
    version = policy["metadata"]["resourceVersion"]
    personas = _empty_personas()
    stored = report_policy_statuses(cluster, None, personas, [policy], "rep-a", {"rep-p"}, None)
    assert stored == _annotation(cluster, "rep-a") and stored is not None
    assert list(decode_reports("rep-a", stored)) == ["rep-p"]
    node_version = cluster.get(r.NODES, "rep-a")["metadata"]["resourceVersion"]
    again = report_policy_statuses(cluster, None, personas, [policy], "rep-a", {"rep-p"}, stored)
    assert again == stored
    assert cluster.get(r.NODES, "rep-a")["metadata"]["resourceVersion"] == node_version
    assert cluster.get(r.DEVICE_EXPOSURE_POLICIES, "rep-p")["metadata"]["resourceVersion"] == (
        version
    )
    gone = report_policy_statuses(cluster, None, personas, [policy], "rep-a", set(), stored)
    assert gone is not None and decode_reports("rep-a", gone) == {}


def test_a_failed_write_is_logged_not_raised(cluster: Cluster) -> None:
    policy = cluster.create(r.DEVICE_EXPOSURE_POLICIES, _policy("rep-nonode"))
    personas = _empty_personas()
    # no Node of that name: the API refuses, the pass goes on and knows nothing was stored
    assert report_policy_statuses(cluster, None, personas, [policy], "absent", {"rep-nonode"},
                                  None) is None  # fmt: skip


def _set_reports(cluster: Cluster, node: str, entries: dict[str, dict[str, Any]]) -> None:
    value = encode_reports(node, entries).value
    cluster.patch(r.NODES, node, {"metadata": {"annotations": {ANNOTATION: value}}})


def test_the_controller_sums_every_nodes_report_into_a_bounded_status(cluster: Cluster) -> None:
    """Three nodes report (one not ready); a fourth carries a report copied from another
    node, which counts for nothing; the policy's status counts them and lists only the one
    that needs attention. A second reconcile writes nothing."""
    cluster.create(r.DEVICE_EXPOSURE_POLICIES, _policy("sum-p"))
    for node, ready in (("sum-a", True), ("sum-b", False), ("sum-c", True)):
        _node(cluster, node)
        _set_reports(cluster, node, {"sum-p": _report(node, ready=ready, devices=2)})
    _node(cluster, "sum-forger")
    copied = encode_reports("sum-a", {"sum-p": _report("sum-a", devices=50)}).value
    cluster.patch(r.NODES, "sum-forger", {"metadata": {"annotations": {ANNOTATION: copied}}})
    reconciler = PolicyStatusReconciler(cluster)
    reconciler.reconcile("sum-p")
    stored = cluster.get(r.DEVICE_EXPOSURE_POLICIES, "sum-p")
    status = stored["status"]
    assert (status["reportingNodes"], status["readyNodes"]) == (3, 2)
    assert status["exposedDevices"] == 6
    assert [e["nodeName"] for e in status["nodes"]] == ["sum-b"]
    assert {c["type"]: c["status"] for c in status["conditions"]}["Ready"] == "False"
    DeviceExposurePolicy.model_validate(stored)
    reconciler.reconcile("sum-p")
    assert (
        cluster.get(r.DEVICE_EXPOSURE_POLICIES, "sum-p")["metadata"]["resourceVersion"]
        == (stored["metadata"]["resourceVersion"])
    )
    # node b recovers: nothing is listed any more
    _set_reports(cluster, "sum-b", {"sum-p": _report("sum-b", devices=2)})
    reconciler.reconcile("sum-p")
    status = cluster.get(r.DEVICE_EXPOSURE_POLICIES, "sum-p")["status"]
    assert "nodes" not in status and status["readyNodes"] == 3


def test_the_controller_waits_for_the_whole_view_of_the_nodes(cluster: Cluster) -> None:
    from dmn.controller.workqueue import RetryLater

    cluster.create(r.DEVICE_EXPOSURE_POLICIES, _policy("wait-p"))
    with pytest.raises(RetryLater):
        PolicyStatusReconciler(cluster, reports=lambda: None).reconcile("wait-p")
    assert "status" not in cluster.get(r.DEVICE_EXPOSURE_POLICIES, "wait-p")
