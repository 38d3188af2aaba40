"""The node agent SIGKILLed at every journal boundary of Multus automatic mode's prepare and
release, on the lab node (real API server, journal, recovery; a child coordinator killed by
:mod:`tests.crash_fork_server`, the parent's restarted agent recovering before the kubelet's
retry).

The kill points: every boundary of the ``multus/*`` effects (:mod:`tests.crash_points`: this
module owns them), plus the preparation's own commits — its checkpoint before any effect
(``coordinator:after-preparing``), Prepared (``coordinator:after-prepared``), Unpreparing and
Released. After each kill and retry: exactly one shadow of the binding (ours: the Pod's UID
as owner, our finalizer, not being deleted) and one managed entry after prepare; no shadow,
no finalizer and the Pod's annotations exactly as before after release; nothing quarantined.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from dmn.agent.coordinator.multus_plan import FINALIZER
from dmn.agent.journal.records import PreparationState
from dmn.api.multus.selections import NETWORKS_ANNOTATION
from tests.coordinator.lab_node import LabNode, lab_node
from tests.coordinator.multus_lab import annotations, claimed_pod, enable_multus, shadows
from tests.coordinator.test_crash import killed
from tests.crash_fork_server import CrashForkServer, crash_fork_server
from tests.crash_points import crash_points

pytestmark = [pytest.mark.netns, pytest.mark.crash]

USER = '[{"name":"user-net","interface":"eth7"}]'
KINDS = {
    "shadow": "multus/shadow-nad-shared/v1",
    "select": "multus/pod-selection/v1",
    "ready": "multus/binding-ready/v1",
}
PREPARE_COMMITS = ["coordinator:after-preparing", "coordinator:after-prepared"]
RELEASE_COMMITS = ["coordinator:after-unpreparing", "coordinator:after-released"]


@pytest.fixture(scope="module")
def node() -> Iterator[LabNode]:
    with lab_node() as n:
        yield n


@pytest.fixture(scope="module")
def device_class(node: LabNode) -> str:
    return enable_multus(node)


@pytest.fixture(scope="module")
def fork_server() -> Iterator[CrashForkServer]:
    server = crash_fork_server(("coordinator",))
    try:
        yield server
    finally:
        server.close()


def _call(action: str, claim: dict[str, Any]) -> dict[str, Any]:
    meta = claim["metadata"]
    return {"action": action, "namespace": "default", "name": meta["name"], "uid": meta["uid"]}


def _bound(node: LabNode, pod: dict[str, Any]) -> None:
    """Exactly one shadow, ours and live, and exactly one managed entry naming it."""
    (shadow,) = shadows(node.cluster)
    meta = shadow["metadata"]
    assert meta["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]
    assert meta["finalizers"] == [FINALIZER] and not meta.get("deletionTimestamp")
    entries = json.loads(annotations(node.cluster, pod)[NETWORKS_ANNOTATION])
    assert [e["name"] for e in entries] == ["user-net", meta["name"]]


def _released(node: LabNode, pod: dict[str, Any], before: dict[str, str]) -> None:
    assert shadows(node.cluster) == []
    assert annotations(node.cluster, pod) == before
    assert not [op for op in node.services.journal.unfinished_operations()], (
        "an operation was left unfinished"
    )


def _points(node: LabNode, device_class: str, server: CrashForkServer) -> dict[str, list[str]]:
    """One uninterrupted prepare and release in the child: every boundary each passes."""
    (claim,), _pod = claimed_pod(node, device_class, {NETWORKS_ANNOTATION: USER})
    surveyed = {}
    for action in ("prepare", "unprepare"):
        passed = killed(node, _call(action, claim), "(none)", server, expect={"exit": 0})
        # the runner's boundaries (the coordinator's commits are picked by name below)
        surveyed[action] = [n for n in passed if not n.startswith("coordinator:")]
    return surveyed


def test_multus_crash_at_every_boundary_recovers_to_one_shadow_then_none(
    node: LabNode, device_class: str, fork_server: CrashForkServer
) -> None:
    surveyed = _points(node, device_class, fork_server)
    plan = {
        "prepare": [
            *PREPARE_COMMITS,
            *(surveyed["prepare"][i] for i in crash_points(surveyed["prepare"], KINDS, __name__)),
        ],
        "unprepare": [
            *RELEASE_COMMITS,
            *(
                surveyed["unprepare"][i]
                for i in crash_points(surveyed["unprepare"], KINDS, __name__)
            ),
        ],
    }
    # each effect's boundaries on both paths: before-image, apply, outcome; Undoing, undone
    assert len(plan["prepare"]) >= 2 + 3 * 3, surveyed["prepare"]
    assert len(plan["unprepare"]) >= 2 + 2 * 3, surveyed["unprepare"]
    for crash_at in plan["prepare"]:
        (claim,), pod = claimed_pod(node, device_class, {NETWORKS_ANNOTATION: USER})
        before = annotations(node.cluster, pod)
        passed = killed(node, _call("prepare", claim), crash_at, fork_server)
        assert passed[-1] == crash_at
        node.services.preparation.prepare(
            "default", claim["metadata"]["name"], claim["metadata"]["uid"]
        )  # the kubelet's retry
        (prep,) = node.services.journal.preparations(claim["metadata"]["uid"])
        assert prep.state is PreparationState.PREPARED, (crash_at, prep)
        _bound(node, pod)
        node.services.preparation.unprepare(claim["metadata"]["uid"])
        _released(node, pod, before)
    for crash_at in plan["unprepare"]:
        (claim,), pod = claimed_pod(node, device_class, {NETWORKS_ANNOTATION: USER})
        before = annotations(node.cluster, pod)
        node.services.preparation.prepare(
            "default", claim["metadata"]["name"], claim["metadata"]["uid"]
        )
        _bound(node, pod)
        passed = killed(node, _call("unprepare", claim), crash_at, fork_server)
        assert passed[-1] == crash_at
        node.services.preparation.unprepare(claim["metadata"]["uid"])  # the kubelet's retry
        (prep,) = node.services.journal.preparations(claim["metadata"]["uid"])
        assert prep.state is PreparationState.RELEASED, (crash_at, prep)
        _released(node, pod, before)
