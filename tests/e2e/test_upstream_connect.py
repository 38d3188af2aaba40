"""A container never starts before its network is Ready, on real kubelet and containerd.

The topology ``e2e-mtu-too-big`` is the shared-macvlan one with ``mtu: 9000``: valid for the
plugin's schema, so it compiles to Ready and the real scheduler and kubelet allocate and
prepare its claim, but the lab link's MTU is 1500 and a macvlan child may not exceed its
parent's, so ``connect`` fails on the node at RunPodSandbox. containerd then fails the
sandbox, kubelet retries it, and no container of the Pod is ever created: the Pod stays
Pending/ContainerCreating with our reason code in its Events (ours, and kubelet's
FailedCreatePodSandBox quoting it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from dmn.api.cluster import Cluster, NotFound
from dmn.api.cluster import resources as r
from dmn.lab.demo import wait_settled
from dmn.lab.pod_demo import NAMESPACE, claim_template
from dmn.lab.upstream.cluster import UpstreamLab
from dmn.lab.upstream.demo import pod_phase
from tests.e2e import lab_pods
from tests.e2e.lab_pods import MTU_CODE, MTU_TOO_BIG, WAIT
from tests.waiting import wait_for

pytestmark = [pytest.mark.e2e]

CODE = MTU_CODE
TOPOLOGY = MTU_TOO_BIG


@pytest.fixture
def too_big(admin: Cluster) -> Iterator[str]:
    """The topology applied and Ready, with a claim template of the same name."""
    admin.apply(TOPOLOGY)
    (settled,) = wait_settled(admin, ["e2e-mtu-too-big"], WAIT)
    assert settled.ready == "True" and settled.device_classes, settled
    admin.apply(claim_template("e2e-mtu-too-big", settled.device_classes[0]))
    yield "e2e-mtu-too-big"
    with contextlib.suppress(NotFound):
        admin.delete(r.RESOURCE_CLAIM_TEMPLATES, "e2e-mtu-too-big", NAMESPACE)


def _ours(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in events if e.get("reason") == CODE]


def test_a_failed_connect_keeps_the_pod_creating_with_our_reason(
    upstream_lab: UpstreamLab, admin: Cluster, too_big: str, pods: list[str]
) -> None:
    lab_pods.run(admin, pods, "mtu-too-big", too_big)
    ours = wait_for(
        lambda: _ours(lab_pods.events(admin, "mtu-too-big")),
        timeout=WAIT,
        interval=0.5,
        what=f"a {CODE} Event on the Pod",
    )
    assert ours[0]["type"] == "Warning"
    assert ours[0]["source"]["component"] == "dra-multi-network-node"
    assert "RunPodSandbox" in ours[0]["message"]
    # kubelet's own account of the failed sandbox names our reason code too
    sandbox = wait_for(
        lambda: [
            e
            for e in lab_pods.events(admin, "mtu-too-big")
            if e.get("reason") == "FailedCreatePodSandBox" and CODE in e.get("message", "")
        ],
        timeout=WAIT,
        interval=0.5,
        what="kubelet's FailedCreatePodSandBox naming our code",
    )
    assert sandbox
    assert pod_phase(admin, "mtu-too-big") == "Pending"
    # kubelet writes the container's waiting status in its own status sync, which may come
    # after the sandbox Event (a CI run read the status before it and found none)
    (container,) = wait_for(
        lambda: admin.get(r.PODS, "mtu-too-big", NAMESPACE)["status"].get("containerStatuses"),
        timeout=WAIT,
        interval=0.5,
        what="kubelet's container status of the Pod",
    )
    assert container["state"] == {"waiting": {"reason": "ContainerCreating"}}, container
    assert "containerID" not in container
    reasons = {e.get("reason") for e in lab_pods.events(admin, "mtu-too-big")}
    assert not reasons & {"Created", "Started", "Pulled"}, reasons
    # every attempt was undone: no attachment of the Pod is Ready
    states = lab_pods.attachment_states(upstream_lab, lab_pods.uid(admin, "mtu-too-big"))
    assert states and "Ready" not in states, states
