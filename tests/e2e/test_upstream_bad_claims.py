"""Claims asking for our devices in shapes the driver does not support, on the real scheduler
and kubelet: the Pod never starts, and both the Pod and the claim carry an Event that names
the reason code (issue 40, bad input).

The scheduler allocates these claims (they are valid DRA); the node agent refuses them at
NodePrepareResources: kubelet reports our error on the Pod (``FailedPrepareDynamicResources``),
the agent records a Warning Event with the reason code on the ResourceClaim. Deleting the
Pod leaves nothing prepared.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from dmn.api.cluster import Cluster, NotFound
from dmn.api.cluster import resources as r
from dmn.lab.pod_demo import NAMESPACE, claim_template
from dmn.lab.upstream.cluster import UpstreamLab
from tests.e2e import lab_pods
from tests.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]


def _counted(name: str, device_class: str, count: int) -> dict[str, Any]:
    doc = claim_template(name, device_class)
    exactly = doc["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    exactly.update(allocationMode="ExactCount", count=count)
    return doc


@pytest.fixture
def two_of_shared(admin: Cluster, classes: dict[str, str]) -> Iterator[str]:
    name = "bad-two-shared"
    admin.apply(_counted(name, classes["shared-macvlan"], 2))
    try:
        yield name
    finally:
        with contextlib.suppress(NotFound):
            admin.delete(r.RESOURCE_CLAIM_TEMPLATES, name, NAMESPACE)


def _messages(events: list[dict[str, Any]]) -> str:
    return "\n".join(f"{e.get('reason')}: {e.get('message')}" for e in events)


def test_two_devices_in_one_request_are_refused_with_a_reason_on_pod_and_claim(
    upstream_lab: UpstreamLab, admin: Cluster, pods: list[str], two_of_shared: str
) -> None:
    lab_pods.run(admin, pods, "bad-count", two_of_shared)
    pod_uid = wait_for(
        lambda: lab_pods.uid(admin, "bad-count"), timeout=lab_pods.WAIT, what="the Pod"
    )

    def allocated() -> list[dict[str, Any]]:
        return [
            c
            for c in lab_pods.claims_of(admin, pod_uid)
            if (c.get("status") or {}).get("allocation")
        ]

    (claim,) = wait_for(allocated, timeout=lab_pods.WAIT, interval=0.5, what="allocated")
    results = claim["status"]["allocation"]["devices"]["results"]
    assert len(results) == 2, results  # the scheduler took it as valid DRA

    def pod_event() -> str:
        text = _messages(lab_pods.events(admin, "bad-count"))
        return text if "E_ALLOCATION_MODE" in text else ""

    shown = wait_for(pod_event, timeout=lab_pods.WAIT, interval=1.0, what="the Pod's Event")
    assert "FailedPrepareDynamicResources" in shown, shown

    def claim_event() -> list[dict[str, Any]]:
        return [
            e
            for e in admin.list(r.EVENTS, NAMESPACE).items
            if (e.get("involvedObject") or {}).get("uid") == claim["metadata"]["uid"]
            and e.get("reason") == "E_ALLOCATION_MODE"
        ]

    (event, *_) = wait_for(claim_event, timeout=lab_pods.WAIT, interval=1.0, what="claim Event")
    assert event["type"] == "Warning" and "ExactCount 1" in event["message"], event
    for s in (admin.get(r.PODS, "bad-count", NAMESPACE).get("status") or {}).get(
        "containerStatuses"
    ) or []:
        assert "running" not in (s.get("state") or {}), s
    # refused before anything was reserved: no preparation record at all
    assert lab_pods.preparation_states(upstream_lab, {claim["metadata"]["uid"]}) == set()
    lab_pods.remove(admin, "bad-count")
    pods.remove("bad-count")
    assert lab_pods.preparation_states(upstream_lab, {claim["metadata"]["uid"]}) == set()
