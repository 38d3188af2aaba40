"""Late attachment at the container gate (issue 40, fail closed on the real runtime).

containerd does not fail a sandbox whose NRI plugin was absent, died or timed out in
RunPodSandbox: it starts the sandbox and never asks the plugin about it again, and its
required-plugin validator only holds the *containers* until the plugin is registered. The
agent's CreateContainer gate then attaches the sandbox itself, before the first container,
through the real NRI adapter path (lab NRI runtime, real namespaces) — and refuses to when
a container of the sandbox already ran, or the sandbox was stopped.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dmn.agent.coordinator import Refusal
from dmn.agent.coordinator.sandbox_attachment import ABANDONED, LateAttach
from dmn.agent.journal.keys import attachment_id
from dmn.agent.journal.records import AttachmentState
from dmn.agent.nri.handler import HookDeadline
from dmn.api.cluster import resources as r
from dmn.engine.journal import OperationState
from dmn.lab.runtime.nri_runtime import HookFailed, LabContainer, LabNriRuntime, LabPod
from tests.coordinator.lab_node import WAIT, LabNode, lab_node
from tests.coordinator.test_attach import names
from tests.coordinator.test_end_to_end import snapshot
from tests.coordinator.test_ordering import _ExpiresAt, claimed_pod
from tests.kernel.scratch import netns_path, scratch_netns

pytestmark = [pytest.mark.netns, pytest.mark.adversarial]


@pytest.fixture(scope="module")
def node() -> Iterator[LabNode]:
    with lab_node() as n:
        yield n


def _reasons(node: LabNode, uid: str) -> list[str]:
    assert node.agent.reporter.flush()
    return [
        e["reason"]
        for e in node.cluster.list(r.EVENTS, namespace="default").items
        if e["involvedObject"].get("uid") == uid
    ]


def test_sandbox_created_without_the_agent_is_attached_before_its_first_container(
    node: LabNode,
) -> None:
    baseline = snapshot(node.host_ns)
    claim, pod = claimed_pod(node)
    meta = pod["metadata"]
    with scratch_netns("dml") as sandbox:
        sb = LabPod("sb-unseen", meta["uid"], meta["name"], "default", netns_path(sandbox))
        node.runtime.run_pod_sandbox_unseen(sb)
        assert names(sandbox) == ["lo"]
        node.runtime.create_container(sb.id, LabContainer("c-1", sb.id, "app"))
        assert names(sandbox) == ["lo", "net1"]
        att = node.services.attachments.attachment(meta["uid"], sb.id)
        assert att is not None and att.state is AttachmentState.READY
        assert att.incarnation == 0
        node.runtime.start_container("c-1")
        assert "Attached" in _reasons(node, meta["uid"])
        node.runtime.stop_pod_sandbox(sb.id)
        node.runtime.remove_pod_sandbox(sb.id)
        assert names(sandbox) == ["lo"]
        assert node.services.pins.list() == []
    node.services.preparation.unprepare(claim["metadata"]["uid"])
    assert snapshot(node.host_ns) == baseline


def test_run_past_its_deadline_is_attached_late_as_a_new_incarnation(node: LabNode) -> None:
    """RunPodSandbox outlived its deadline (containerd went on without it): it undid what
    it did and ended Removed; the first container's gate attaches the sandbox again, with
    operations of its own, and the teardown removes exactly that."""
    baseline = snapshot(node.host_ns)
    claim, pod = claimed_pod(node)
    meta = pod["metadata"]
    with scratch_netns("dml") as sandbox:
        sb = LabPod("sb-slow", meta["uid"], meta["name"], "default", netns_path(sandbox))
        # looks: before reading the Pod, before the intent, before the step, before Ready:
        # it expires at the 4th, after the link was moved in
        deadline = HookDeadline(1.0, clock=_ExpiresAt(4))
        with pytest.raises(Refusal, match="E_HOOK_DEADLINE"):
            node.services.attachments.run_pod(
                "default", meta["name"], meta["uid"], sb.id, sb.netns_path, deadline
            )
        first = node.services.attachments.attachment(meta["uid"], sb.id)
        assert first is not None and first.state is AttachmentState.REMOVED and first.operations
        node.runtime.run_pod_sandbox_unseen(sb)
        node.runtime.create_container(sb.id, LabContainer("c-1", sb.id, "app"))
        att = node.services.attachments.attachment(meta["uid"], sb.id)
        assert att is not None and att.state is AttachmentState.READY
        assert att.incarnation == 1
        assert att.operations == [f"{op}-l1" for op in first.operations]
        for op in first.operations:
            rec = node.services.journal.load_operation(op)
            assert rec is not None and rec.state is OperationState.UNDONE
        assert names(sandbox) == ["lo", "net1"]
        node.runtime.stop_pod_sandbox(sb.id)
        node.runtime.remove_pod_sandbox(sb.id)
        assert names(sandbox) == ["lo"]
        assert node.services.pins.list() == []
    node.services.preparation.unprepare(claim["metadata"]["uid"])
    assert snapshot(node.host_ns) == baseline


def test_orphan_the_tick_abandoned_is_attached_late(node: LabNode) -> None:
    """A Connecting record whose hook died, resolved by the reconcile tick (fenced as
    abandoned, undone, Removed) while its sandbox lives on: the next container's gate
    attaches it again instead of refusing it forever."""
    baseline = snapshot(node.host_ns)
    claim, pod = claimed_pod(node)
    meta = pod["metadata"]
    with scratch_netns("dml") as sandbox:
        sb = LabPod("sb-orphan", meta["uid"], meta["name"], "default", netns_path(sandbox))
        node.runtime.run_pod_sandbox(sb)
        rec = node.services.attachments.attachment(meta["uid"], sb.id)
        assert rec is not None
        rec.state = AttachmentState.CONNECTING
        with node.services.journal.batch() as b:
            b.put_attachment(rec)
        reconcile = node.services.reconcile
        saved = reconcile.orphan_grace
        reconcile.orphan_grace = 0.0
        try:
            assert [i.sandbox_id for i in reconcile.tick()] == [sb.id]
        finally:
            reconcile.orphan_grace = saved
        assert names(sandbox) == ["lo"]
        fence = node.services.journal.fence(f"attachment/{_att(node, meta['uid'], sb.id)}")
        assert fence is not None and fence.reason.startswith(ABANDONED)
        node.runtime.create_container(sb.id, LabContainer("c-1", sb.id, "app"))
        att = node.services.attachments.attachment(meta["uid"], sb.id)
        assert att is not None and att.state is AttachmentState.READY and att.incarnation == 1
        assert names(sandbox) == ["lo", "net1"]
        node.runtime.stop_pod_sandbox(sb.id)
        node.runtime.remove_pod_sandbox(sb.id)
        assert names(sandbox) == ["lo"]
    node.services.preparation.unprepare(claim["metadata"]["uid"])
    assert snapshot(node.host_ns) == baseline


@pytest.mark.parametrize("how", ["tombstone", "stopped"])
def test_stopped_sandbox_is_never_attached_late(node: LabNode, how: str) -> None:
    claim, pod = claimed_pod(node)
    meta = pod["metadata"]
    attachments = node.services.attachments
    with scratch_netns("dml") as sandbox:
        sb_id = f"sb-{how}"
        if how == "stopped":
            sb = LabPod(sb_id, meta["uid"], meta["name"], "default", netns_path(sandbox))
            node.runtime.run_pod_sandbox(sb)
            node.runtime.stop_pod_sandbox(sb_id)
        else:
            attachments.stop_pod(meta["uid"], sb_id)
        late = LateAttach(netns_path(sandbox), None)
        with pytest.raises(Refusal, match="E_ATTACHMENT_STATE"):
            attachments.gate("default", meta["name"], meta["uid"], sb_id, late)
        assert names(sandbox) == ["lo"]
        assert node.services.pins.list() == []
    node.services.preparation.unprepare(claim["metadata"]["uid"])


def test_sandbox_whose_container_already_ran_is_never_attached_late() -> None:
    """containerd comes back (restart) listing a sandbox of ours with a container that was
    created while no plugin held it: that container ran without its networks, and the
    next container of the sandbox is refused with E_STARTED_WITHOUT_NETWORK, nothing
    attached. (A node of its own: the runtime is replaced.)"""
    with lab_node() as node:
        claim, pod = claimed_pod(node)
        meta = pod["metadata"]
        with scratch_netns("dml") as sandbox:
            sb = LabPod("sb-ran", meta["uid"], meta["name"], "default", netns_path(sandbox))
            ran = LabContainer("c-ran", sb.id, "app", state=2)
            node.runtime.shutdown()
            runtime = LabNriRuntime(node.runtime.socket_path, request_timeout=30.0)
            runtime.restore([sb], [ran])
            runtime.start()
            try:
                assert runtime.wait_ready(1, WAIT)
                with pytest.raises(HookFailed, match="E_STARTED_WITHOUT_NETWORK"):
                    runtime.create_container(sb.id, LabContainer("c-2", sb.id, "app"))
                assert names(sandbox) == ["lo"]
                assert node.services.attachments.attachment(meta["uid"], sb.id) is None
                assert "E_STARTED_WITHOUT_NETWORK" in _reasons(node, meta["uid"])
            finally:
                runtime.stop()
        node.services.preparation.unprepare(claim["metadata"]["uid"])


def _att(node: LabNode, pod_uid: str, sandbox_id: str) -> str:
    rec = node.services.attachments.attachment(pod_uid, sandbox_id)
    assert rec is not None
    return attachment_id(rec.identity)
