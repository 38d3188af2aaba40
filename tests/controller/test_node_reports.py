"""The controller's side of the node agents' policy reports (design §5.2): it reads them
from its Node watch, sums them into each policy's status, schedules a policy's status at
most once per window however many nodes report, and reads no Node from the API at rest
(the capability labels are judged from the same watch)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from dmn.api.cluster import Cluster, WatchEvent
from dmn.api.cluster import resources as r
from dmn.api.cluster.listwatch import SYNCED
from dmn.api.identity import GROUP
from dmn.api.policy_report import ANNOTATION, encode_reports
from dmn.controller.manager import REPORT_WINDOW_MAX_S, Controller
from dmn.lab.apiserver import LabApiServer
from dmn.opcodes.registry import default_registry
from tests.controller.support import client_for, install, wait_for

T0 = "2026-12-08T00:00:00Z"


def _entry(node: str, ready: bool = True, devices: int = 1) -> dict[str, Any]:
    return {
        "nodeName": node,
        "observedGeneration": 1,
        "exposedDevices": devices,
        "lastReportTime": T0,
        "conditions": [
            {
                "type": "Ready",
                "status": "True" if ready else "False",
                "reason": "Published" if ready else "E_POLICY_CONFLICT",
                "message": "",
                "lastTransitionTime": T0,
                "observedGeneration": 1,
            }
        ],
    }


def _node(name: str, entries: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "resourceVersion": "1"}
    if entries is not None:
        meta["annotations"] = {ANNOTATION: encode_reports(name, entries).value}
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta}


class _Queue:
    """Records what the controller schedules."""

    def __init__(self) -> None:
        self.added: list[tuple[Any, float]] = []

    def add(self, key: Any) -> None:
        self.added.append((key, 0.0))

    def add_after(self, key: Any, delay: float) -> None:
        self.added.append((key, delay))

    def policies(self) -> list[tuple[str, float]]:
        return [(k[1], d) for k, d in self.added if k[0] == "policy"]


def _controller() -> tuple[Controller, _Queue]:
    ctl = Controller(None, default_registry())  # type: ignore[arg-type]  # no I/O here
    queue = _Queue()
    ctl.queue = queue  # type: ignore[assignment]
    return ctl, queue


def test_reports_before_the_first_list_only_fill_the_view_then_every_policy_is_summed() -> None:
    ctl, queue = _controller()
    for i in range(3):
        ctl._on_event("node", WatchEvent("ADDED", _node(f"n{i}", {"p": _entry(f"n{i}")})))
    assert ctl.policy_reports() is None and queue.policies() == []
    ctl._on_event("node", WatchEvent(SYNCED, {}))
    reports = ctl.policy_reports()
    assert reports is not None and sorted(reports) == ["n0", "n1", "n2"]
    assert reports["n1"]["p"]["nodeName"] == "n1"


def test_a_changed_report_schedules_the_policies_it_names_before_and_after() -> None:
    ctl, queue = _controller()
    ctl._on_event("node", WatchEvent(SYNCED, {}))
    ctl._on_event("node", WatchEvent("ADDED", _node("n1", {"p": _entry("n1")})))
    assert queue.policies() == [("p", 1.0)]
    queue.added.clear()
    # the same annotation again (a capability refresh, a heartbeat): nothing to sum
    ctl._on_event("node", WatchEvent("MODIFIED", _node("n1", {"p": _entry("n1")})))
    assert queue.policies() == []
    ctl._on_event("node", WatchEvent("MODIFIED", _node("n1", {"q": _entry("n1")})))
    assert sorted(queue.policies()) == [("p", 1.0), ("q", 1.0)]
    queue.added.clear()
    ctl._on_event("node", WatchEvent("DELETED", _node("n1", {"q": _entry("n1")})))
    assert queue.policies() == [("q", 1.0)]
    assert ctl.policy_reports() == {}
    # a Node without a report comes and goes: nothing to sum, nothing kept
    ctl._on_event("node", WatchEvent("ADDED", _node("bare")))
    ctl._on_event("node", WatchEvent("DELETED", _node("bare")))
    assert queue.policies() == [("q", 1.0)] and ctl._report_window() == 1.0
    assert ctl._report_values == {}


@pytest.mark.adversarial
def test_a_report_copied_from_another_node_counts_for_nothing() -> None:
    ctl, queue = _controller()
    ctl._on_event("node", WatchEvent(SYNCED, {}))
    forged = _node("n9")
    forged["metadata"]["annotations"] = {
        ANNOTATION: encode_reports("n1", {"p": _entry("n1", devices=99)}).value
    }
    ctl._on_event("node", WatchEvent("ADDED", forged))
    assert ctl.policy_reports() == {} and queue.policies() == []


def test_the_window_grows_with_the_nodes_and_stays_bounded() -> None:
    ctl, queue = _controller()
    ctl._on_event("node", WatchEvent(SYNCED, {}))
    for i in range(500):
        ctl._on_event("node", WatchEvent("ADDED", _node(f"n{i:03d}")))
    ctl._on_event("node", WatchEvent("MODIFIED", _node("n000", {"p": _entry("n000")})))
    assert queue.policies() == [("p", 10.0)]
    for i in range(500, 2000):
        ctl._on_event("node", WatchEvent("ADDED", _node(f"n{i:04d}")))
    ctl._on_event("node", WatchEvent("MODIFIED", _node("n001", {"p": _entry("n001")})))
    assert queue.policies()[-1] == ("p", REPORT_WINDOW_MAX_S)


# --- a running controller against the lab API server ---------------------------------------


class _CountingCluster:
    """The cluster, counting reads of Nodes and writes of policies."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.node_gets = 0
        self.policy_writes = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.cluster, name)

    def get(self, res: Any, *args: Any, **kwargs: Any) -> Any:
        if res is r.NODES:
            self.node_gets += 1
        return self.cluster.get(res, *args, **kwargs)

    def replace(self, res: Any, *args: Any, **kwargs: Any) -> Any:
        if res is r.DEVICE_EXPOSURE_POLICIES:
            self.policy_writes += 1
        return self.cluster.replace(res, *args, **kwargs)


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with LabApiServer() as server, client_for(server.url) as c:
        install(c)
        yield c


def test_the_running_controller_sums_the_nodes_and_reads_no_node_at_rest(
    cluster: Cluster,
) -> None:
    cluster.create(
        r.DEVICE_EXPOSURE_POLICIES,
        {
            "apiVersion": f"{GROUP}/v1alpha1",
            "kind": "DeviceExposurePolicy",
            "metadata": {"name": "sum"},
            "spec": {"selector": {"kind": "PF"}, "action": "Exclude"},
        },
    )
    for i in range(6):
        node = _node(f"w{i}", {"sum": _entry(f"w{i}", ready=i != 3, devices=2)})
        del node["metadata"]["resourceVersion"]
        cluster.create(r.NODES, node)
    counting = _CountingCluster(cluster)
    ctl = Controller(counting, default_registry(), resync=0.3)  # type: ignore[arg-type]
    ctl.start()
    try:

        def summed() -> dict[str, Any] | None:
            status = cluster.get(r.DEVICE_EXPOSURE_POLICIES, "sum").get("status") or {}
            return status if status.get("reportingNodes") == 6 else None

        status = wait_for(summed, what="the six reports summed")
        assert status["readyNodes"] == 5 and status["exposedDevices"] == 12
        assert [e["nodeName"] for e in status["nodes"]] == ["w3"]
        wait_for(lambda: ctl.processed > 60 or None, what="many resyncs")
        gets, writes, processed = counting.node_gets, counting.policy_writes, ctl.processed
        wait_for(lambda: ctl.processed > processed + 60 or None, what="more resyncs")
        # every resync judged six Nodes' labels and the policy: from the watch, unchanged
        assert (counting.node_gets, counting.policy_writes) == (gets, writes)
        # node w3 recovers: one more write, and nothing is listed
        cluster.patch(
            r.NODES, "w3",
            {"metadata": {"annotations": {
                ANNOTATION: encode_reports("w3", {"sum": _entry("w3", devices=2)}).value}}},
        )  # fmt: skip
        wait_for(
            lambda: (cluster.get(r.DEVICE_EXPOSURE_POLICIES, "sum")["status"].get("readyNodes")
                     == 6) or None,
            what="w3 ready",
        )  # fmt: skip
        assert "nodes" not in cluster.get(r.DEVICE_EXPOSURE_POLICIES, "sum")["status"]
    finally:
        ctl.stop()


def test_a_policy_status_write_is_summed_again_within_the_window_a_spec_change_at_once() -> None:
    """The controller's own status write comes back as a MODIFIED with the same generation:
    summing again at once would write again while reports keep arriving (two writes a
    window instead of one, each to every node's watch); an edit of the spec is summed at
    once."""
    ctl, queue = _controller()

    def policy(event: str, generation: int) -> WatchEvent:
        return WatchEvent(event, {"metadata": {"name": "p", "generation": generation}})

    ctl._on_event("policy", policy("ADDED", 1))
    ctl._on_event("policy", policy("MODIFIED", 1))
    ctl._on_event("policy", policy("MODIFIED", 2))
    ctl._on_event("policy", policy("DELETED", 2))
    ctl._on_event("policy", policy("ADDED", 1))
    assert queue.policies() == [("p", 0.0), ("p", 1.0), ("p", 0.0), ("p", 0.0), ("p", 0.0)]
