"""Node capability (design §9.3): the agent's report, a revision's requirement, the labels.

The pure core (:mod:`dmn.api.node_capability`) is tested on data; the agent and the
compiler are shown to agree (a report built the way the agent builds it satisfies the
requirement of every example topology's revision); the reconciler and the reporter run
against the lab API server with the controller's real watches.
"""

from __future__ import annotations

import contextlib
import functools
import json
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmn.agent.capability_report import CapabilityReporter
from dmn.api.cluster import Cluster
from dmn.api.cluster import resources as r
from dmn.api.node_capability import (
    ANNOTATION,
    LABEL_PREFIX,
    MAX_REPORT_BYTES,
    CapabilityReport,
    ReportError,
    capability_labels,
    format_time,
    label_patch,
    node_verdict,
    parse_report,
    revision_requirement,
)
from dmn.controller.compile.compiler import compile_topology
from dmn.controller.manager import Controller
from dmn.controller.node_capability import AgentPods, NodeCapabilityReconciler, agent_ready
from dmn.interpreter.loader import load_builtin_plugins
from dmn.interpreter.opcode_contracts import opcode_contract_digests
from dmn.lab.apiserver import LabApiServer
from dmn.opcodes.executor_table import default_executors
from dmn.opcodes.registry import default_registry
from tests.controller.support import EXAMPLES, client_for, example, wait_for

NOW = 1_800_000_000.0


def agent_report(node: str = "n1", at: float = NOW, **changes: Any) -> CapabilityReport:
    """A report as :meth:`NodeAgent.capability_report` builds it."""
    registry = default_registry()
    runnable = sorted(set(registry.names()) & set(default_executors()))
    fields: dict[str, Any] = {
        "node": node,
        "boot_id": "boot-1",
        "agent_version": "0.1.0",
        "observed_at": at,
        "refresh_s": 30.0,
        "nri_registered": True,
        "nri_synchronized": True,
        "opcodes": opcode_contract_digests(registry, runnable),
        "builtins": {n: p.contract_digest for n, p in load_builtin_plugins().items()},
    }
    fields.update(changes)
    return CapabilityReport(**fields)


def node_obj(name: str = "n1", report: CapabilityReport | str | None = None) -> dict[str, Any]:
    annotations = {}
    if report is not None:
        value = report if isinstance(report, str) else report.to_annotation()
        annotations[ANNOTATION] = value
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "annotations": annotations},
    }


def revisions() -> list[dict[str, Any]]:
    return [json.loads(text) for text in _compiled()]


@functools.cache
def _compiled() -> tuple[str, ...]:
    plugins = load_builtin_plugins()
    out = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        result = compile_topology(example(path.stem), plugins, default_registry())
        if result.compiled is not None:
            out.append(json.dumps(result.compiled.revision))
    return tuple(out)


def test_a_report_round_trips_and_stays_small() -> None:
    report = agent_report()
    text = report.to_annotation()
    assert parse_report(text) == report
    assert len(text) < MAX_REPORT_BYTES // 2
    assert json.loads(text)["observedAt"] == format_time(NOW)


def test_what_the_agent_runs_satisfies_every_example_revision() -> None:
    revs = revisions()
    assert len(revs) >= 5
    report = agent_report()
    requirements = {revision_requirement(rev) for rev in revs}
    assert None not in requirements
    # every example uses a builtin plugin: its contract digest is part of the requirement
    assert all(req is not None and req.builtins for req in requirements)
    for req in requirements:
        assert req is not None and report.satisfies(req)
    # many revisions, few requirements: the labels a node carries stay few
    assert len(requirements) <= len(revs)
    verdict = node_verdict(node_obj("n1", report), [q for q in requirements if q], NOW, True)
    assert verdict.reason == "" and len(verdict.keys) == len(requirements)
    assert all(
        k.startswith(LABEL_PREFIX + "/") and len(k.split("/")[1]) == 16 for k in verdict.keys
    )


def test_an_agent_with_another_opcode_contract_is_not_eligible() -> None:
    rev = next(r for r in revisions() if r["spec"]["opcodeContracts"])
    req = revision_requirement(rev)
    assert req is not None
    name = req.opcodes[0][0]
    report = agent_report()
    older = agent_report(opcodes={**report.opcodes, name: "0" * 16})
    assert report.satisfies(req) and not older.satisfies(req)
    missing = agent_report(opcodes={k: v for k, v in report.opcodes.items() if k != name})
    assert not missing.satisfies(req)
    if req.builtins:
        plugin = req.builtins[0][0]
        other = agent_report(builtins={**report.builtins, plugin: "sha256:" + "1" * 64})
        assert not other.satisfies(req)


def test_a_revision_without_recorded_contracts_has_no_requirement() -> None:
    rev = revisions()[0]
    legacy = {**rev, "spec": {k: v for k, v in rev["spec"].items() if k != "opcodeContracts"}}
    assert revision_requirement(legacy) is None
    assert revision_requirement({}) is None


@pytest.mark.parametrize(
    ("node", "now", "ready", "reason"),
    [
        (node_obj("n1"), NOW, True, "no capability report"),
        (node_obj("n1", "{not json"), NOW, True, "not understood"),
        (node_obj("n1", agent_report("n2")), NOW, True, "names node"),
        (node_obj("n1", agent_report(at=NOW - 91)), NOW, True, "expired"),
        (node_obj("n1", agent_report(at=NOW + 3600)), NOW, True, "future"),
        (node_obj("n1", agent_report(nri_synchronized=False)), NOW, True, "NRI"),
        (node_obj("n1", agent_report()), NOW, False, "not Ready"),
        (node_obj("n1", agent_report(refresh_s=1e9, at=NOW - 3601)), NOW, True, "expired"),
    ],
)
def test_a_node_earns_no_label_when(node: Any, now: float, ready: bool, reason: str) -> None:
    reqs = [q for q in map(revision_requirement, revisions()) if q]
    verdict = node_verdict(node, reqs, now, ready)
    assert verdict.keys == frozenset() and reason in verdict.reason


def test_a_report_is_current_for_three_refreshes_and_the_agent_unknown_is_no_veto() -> None:
    reqs = [q for q in map(revision_requirement, revisions()) if q]
    node = node_obj("n1", agent_report(at=NOW - 89))
    assert node_verdict(node, reqs, NOW, None).keys
    assert node_verdict(node, reqs, NOW, True).keys


@pytest.mark.parametrize(
    "value",
    [
        None,
        7,
        "",
        "[]",
        '{"v": 2}',
        json.dumps({"v": 1, "node": "n", "bootID": "b", "agentVersion": "a"}),
        agent_report().to_annotation().replace('"registered":true', '"registered":"yes"'),
        agent_report().to_annotation().replace('"refreshSeconds":30.0', '"refreshSeconds":true'),
        agent_report().to_annotation().replace(format_time(NOW), "yesterday"),
        "[" * 100_000,
        "x" * (MAX_REPORT_BYTES + 1),
    ],
)
def test_a_malformed_report_is_a_report_error(value: Any) -> None:
    with pytest.raises(ReportError):
        parse_report(value)


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
                    max_leaves=30))  # fmt: skip
def test_any_json_as_a_report_is_judged_without_an_exception(value: Any) -> None:
    text = json.dumps(value)
    for candidate in (value, text):
        with contextlib.suppress(ReportError):
            parse_report(candidate)
        verdict = node_verdict(node_obj("n1", text), [], NOW, True)
        assert verdict.keys == frozenset()


def test_label_patch_touches_only_capability_labels() -> None:
    a, b = f"{LABEL_PREFIX}/{'a' * 16}", f"{LABEL_PREFIX}/{'b' * 16}"
    node = {"metadata": {"name": "n1", "labels": {"zone": "z1", a: "true"}}}
    assert label_patch(node, [a]) is None
    assert label_patch(node, [b]) == {"metadata": {"labels": {a: None, b: "true"}}}
    assert label_patch(node, []) == {"metadata": {"labels": {a: None}}}
    assert capability_labels(node) == {a: "true"}


def _pod(node: str, ready: str, since: float) -> dict[str, Any]:
    return {
        "metadata": {"name": f"agent-{node}", "namespace": "dmn"},
        "spec": {"nodeName": node},
        "status": {"conditions": [{"type": "Ready", "status": ready,
                                   "lastTransitionTime": format_time(since)}]},
    }  # fmt: skip


def test_an_agent_pod_not_ready_for_the_grace_period_vetoes() -> None:
    assert agent_ready([_pod("n1", "True", NOW - 500)], "n1", NOW, 60)
    assert agent_ready([_pod("n1", "False", NOW - 10)], "n1", NOW, 60)
    assert not agent_ready([_pod("n1", "False", NOW - 61)], "n1", NOW, 60)
    assert not agent_ready([_pod("n2", "True", NOW)], "n1", NOW, 60)
    assert not agent_ready([], "n1", NOW, 60)


# --- against the lab API server (tests/controller/conftest.py: lab, cluster) -------------


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def _labels(cluster: Cluster, name: str) -> dict[str, str]:
    return capability_labels(cluster.get(r.NODES, name))


def test_the_reconciler_labels_a_current_node_and_unlabels_it_when_the_report_expires(
    cluster: Cluster,
) -> None:
    revs = revisions()
    clock = Clock()
    cluster.create(r.NODES, node_obj("cap-1"))
    reporter = CapabilityReporter(cluster, "cap-1", agent_report_for("cap-1"), 30.0, clock)
    assert reporter.write_once()
    reconciler = NodeCapabilityReconciler(cluster, lambda: revs, clock=clock)
    assert reconciler.reconcile("cap-1") is False  # labels that may expire: look again
    wanted = {q.key for q in map(revision_requirement, revs) if q}
    assert set(_labels(cluster, "cap-1")) == wanted
    cluster.patch(r.NODES, "cap-1", {"metadata": {"labels": {"zone": "z"}}})
    clock.now += 91
    reconciler.reconcile("cap-1")
    assert _labels(cluster, "cap-1") == {}
    assert cluster.get(r.NODES, "cap-1")["metadata"]["labels"] == {"zone": "z"}
    reporter.tick()  # the refresh is due: the agent writes again, the node earns them back
    reconciler.reconcile("cap-1")
    assert set(_labels(cluster, "cap-1")) == wanted
    assert reconciler.reconcile("gone-node") is True


def agent_report_for(node: str) -> Any:
    return lambda now: agent_report(node, at=now)


def test_the_reporter_rewrites_at_once_when_nri_state_changes(cluster: Cluster) -> None:
    clock = Clock()
    cluster.create(r.NODES, node_obj("cap-2"))
    state = {"nri": False}
    reporter = CapabilityReporter(
        cluster, "cap-2",
        lambda now: agent_report("cap-2", at=now, nri_registered=state["nri"],
                                 nri_synchronized=state["nri"]),
        30.0, clock,
    )  # fmt: skip
    reporter.tick()
    first = parse_report(cluster.get(r.NODES, "cap-2")["metadata"]["annotations"][ANNOTATION])
    assert not first.nri_registered
    clock.now += 1
    reporter.tick()  # nothing changed, refresh not due: no write
    assert reporter.written is not None and reporter.written.observed_at == NOW
    state["nri"] = True
    reporter.tick()
    again = parse_report(cluster.get(r.NODES, "cap-2")["metadata"]["annotations"][ANNOTATION])
    assert again.nri_registered and again.observed_at == NOW + 1


def test_the_controller_follows_nodes_agent_pods_and_revisions(lab: LabApiServer) -> None:
    """The running controller labels a Node whose agent reports and whose agent Pod is
    Ready, and removes the labels once that Pod has been not Ready past the grace."""
    with client_for(lab.url) as cluster:
        cluster.create(r.NODES, node_obj("cap-3"))
        report = agent_report("cap-3", at=time.time()).to_annotation()
        cluster.patch(r.NODES, "cap-3", {"metadata": {"annotations": {ANNOTATION: report}}})
        cluster.create(r.NAMESPACES, {"metadata": {"name": "dmn"}})
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "agent-cap-3", "namespace": "dmn", "labels": {"app": "agent"}},
            "spec": {"nodeName": "cap-3", "containers": [{"name": "a", "image": "x"}]},
        }
        cluster.create(r.PODS, pod, "dmn")
        _set_ready(cluster, "True", time.time())
        ctl = Controller(
            cluster, default_registry(), resync=1.0,
            agent_pods=AgentPods("dmn", "app=agent"), capability_grace=5.0,
        )  # fmt: skip
        ctl.start()
        try:
            cluster.apply(example("shared-macvlan"))
            labels = wait_for(lambda: _labels(cluster, "cap-3") or None, what="labels")
            assert all(v == "true" for v in labels.values())
            _set_ready(cluster, "False", time.time() - 6)
            wait_for(lambda: _labels(cluster, "cap-3") == {} or None, what="labels removed")
            _set_ready(cluster, "True", time.time())
            wait_for(lambda: _labels(cluster, "cap-3") or None, what="labels back")
        finally:
            ctl.stop()


def _set_ready(cluster: Cluster, status: str, since: float) -> None:
    pod = cluster.get(r.PODS, "agent-cap-3", "dmn")
    pod["status"] = {
        "conditions": [
            {"type": "Ready", "status": status, "lastTransitionTime": format_time(since)}
        ]
    }
    cluster.replace(r.PODS, pod, "dmn", status=True)
