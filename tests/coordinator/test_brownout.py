"""API brownout on the lab node (issue 13, deliverable 7): the agent's API server is stalled
(a proxy holds every byte, tests/stalling_proxy.py), the lab runtime and the kernel are real.

Reproduced first, then fixed: the CreateContainer gate and RunPodSandbox listed the
namespace's claims and read the Pod from the API server for every Pod, under the node lock,
so during a brownout no Pod on the node started, including Pods that use no claim of ours,
and every other hook waited behind the lock. Now the journal answers for sandboxes it has
a record of, an informer cache of this node's Pods and the claims proves a Pod has no claim
of ours without any API call, and the API reads of NodePrepare and RunPodSandbox happen
before the node lock is taken.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from dmn.agent.coordinator import Refusal
from dmn.api.cluster import resources as r
from dmn.engine.mutation_lock import MutationLockTimeout
from dmn.lab.allocator.service import ClaimService
from dmn.lab.node import NODE_NAME
from dmn.lab.runtime.nri_runtime import LabContainer, LabPod
from tests.coordinator.lab_node import WAIT, LabNode, lab_node
from tests.coordinator.test_attach import names
from tests.kernel.scratch import netns_path, scratch_netns
from tests.waiting import wait_for

pytestmark = [pytest.mark.netns, pytest.mark.adversarial]

_n = itertools.count()


@pytest.fixture(scope="module")
def node() -> Iterator[LabNode]:
    with lab_node(proxied=True) as n:
        yield n


def plain_pod(node: LabNode) -> dict[str, Any]:
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"plain-{next(_n)}", "namespace": "default"},
        "spec": {"nodeName": NODE_NAME, "containers": [{"name": "app", "image": "busybox"}]},
    }
    pod: dict[str, Any] = node.cluster.create(r.PODS, body, "default")
    return pod


def attached_pod(node: LabNode, sandbox: str, sb_id: str) -> tuple[dict[str, Any], LabPod]:
    i = next(_n)
    claim = node.claim(f"bo-claim-{i}")
    pod = node.pod(f"bo-pod-{i}", f"bo-claim-{i}")
    (claim,) = ClaimService(node.cluster, NODE_NAME).allocate([claim], pod=pod)
    meta = claim["metadata"]
    assert node.services.preparation.prepare(meta["namespace"], meta["name"], meta["uid"])
    sb = LabPod(sb_id, pod["metadata"]["uid"], pod["metadata"]["name"], "default")
    sb.netns_path = netns_path(sandbox)
    node.runtime.run_pod_sandbox(sb)
    return claim, sb


def test_pods_start_while_the_api_server_is_stalled(node: LabNode) -> None:
    assert node.proxy is not None
    objects = node.agent.objects
    plain = plain_pod(node)
    meta = plain["metadata"]
    wait_for(
        lambda: objects.proves_no_claims("default", meta["name"], meta["uid"]),
        timeout=WAIT,
        what="the informer cache to see the plain Pod",
    )
    with scratch_netns("dmb") as attached_ns, scratch_netns("dmb") as plain_ns:
        claim, sb = attached_pod(node, attached_ns, "sb-bo-attached")
        node.proxy.stall()
        try:
            # before: the gate asked the API server (here: the cache is switched off)
            attachments = node.services.attachments
            attachments.objects = None
            with pytest.raises(Refusal) as stalled:
                attachments.gate("default", meta["name"], meta["uid"], "sb-bo-before")
            assert stalled.value.code == "E_API" and stalled.value.retryable
            attachments.objects = objects
            # now: a Pod without claims of ours starts with the API server stalled
            psb = LabPod("sb-bo-plain", meta["uid"], meta["name"], "default")
            psb.netns_path = netns_path(plain_ns)
            node.runtime.run_pod_sandbox(psb)
            node.runtime.create_container("sb-bo-plain", LabContainer("c-p", "sb-bo-plain", "a"))
            node.runtime.start_container("c-p")
            assert names(plain_ns) == ["lo"]
            # and a Pod whose sandbox is attached: the journal answers its containers
            node.runtime.create_container(sb.id, LabContainer("c-a", sb.id, "app"))
            node.runtime.start_container("c-a")
        finally:
            node.proxy.resume()
        node.runtime.remove_pod_sandbox("sb-bo-plain")
        node.runtime.stop_pod_sandbox(sb.id)
        node.runtime.remove_pod_sandbox(sb.id)
        assert names(attached_ns) == ["lo"]
    node.services.preparation.unprepare(claim["metadata"]["uid"])


def test_a_prepare_waiting_on_the_api_holds_no_lock_and_delays_no_other_pod(
    node: LabNode,
) -> None:
    """A NodePrepare stuck on a stalled API server does not hold the node lock (before: it
    read the claim under the lock): meanwhile another Pod's sandbox and containers start."""
    assert node.proxy is not None
    i = next(_n)
    claim = node.claim(f"bo-slow-{i}")
    pod = node.pod(f"bo-slow-pod-{i}", f"bo-slow-{i}")
    (claim,) = ClaimService(node.cluster, NODE_NAME).allocate([claim], pod=pod)
    plain = plain_pod(node)
    meta = plain["metadata"]
    wait_for(
        lambda: node.agent.objects.proves_no_claims("default", meta["name"], meta["uid"]),
        timeout=WAIT,
        what="the informer cache to see the plain Pod",
    )
    started = threading.Event()
    outcome: list[object] = []

    def slow_prepare() -> None:
        started.set()
        cm = claim["metadata"]
        try:
            outcome.append(node.services.preparation.prepare("default", cm["name"], cm["uid"]))
        except Refusal as exc:
            outcome.append(exc)

    with scratch_netns("dmb") as plain_ns:
        node.proxy.stall()
        try:
            t = threading.Thread(target=slow_prepare)
            t.start()
            started.wait(WAIT)
            try:  # a node-wide pass gets in: no operation holds the lock at all
                with node.services.lock.lock.exclusive("probe", timeout=2.0):
                    pass
            except MutationLockTimeout:
                pytest.fail("the node lock is held while a prepare waits on the API server")
            psb = LabPod("sb-bo-meanwhile", meta["uid"], meta["name"], "default")
            psb.netns_path = netns_path(plain_ns)
            node.runtime.run_pod_sandbox(psb)
            node.runtime.create_container(psb.id, LabContainer("c-m", psb.id, "app"))
            node.runtime.start_container("c-m")
            assert t.is_alive(), "the prepare was not waiting on the API server"
            t.join(WAIT)
        finally:
            node.proxy.resume()
        node.runtime.remove_pod_sandbox(psb.id)
    assert len(outcome) == 1 and isinstance(outcome[0], Refusal), outcome
    assert outcome[0].code == "E_API"  # the stalled read timed out; nothing was changed
    assert node.services.journal.preparations(claim["metadata"]["uid"]) == []
