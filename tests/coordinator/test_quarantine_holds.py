"""A quarantined preparation keeps its holds across kubelet retries and agent restarts
(issue 13, deliverable 3), until an operator resolves the effect.

The journal state under test is the one a crash leaves when recovery cannot prove an
effect's outcome: the preparation record still Preparing, its operation Quarantined. It is
written here through the agent's own journal after a real preparation (the crash paths
that reach it are covered by ``tests/coordinator/test_crash.py``). A kubelet retry used to
re-run the preparation, get E_QUARANTINED from the runner before anything was recorded as
done, record the preparation Released and drop its shares and reservations while the
effect stayed Quarantined — so another claim could take the parent.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dmn.agent.coordinator.verify import Refusal
from dmn.agent.journal.keys import attachment_id
from dmn.agent.journal.records import AttachmentState, PreparationState
from dmn.engine.journal import EffectState, OperationState
from dmn.lab.runtime.nri_runtime import LabPod
from tests.coordinator.lab_node import LabNode, lab_node
from tests.coordinator.test_end_to_end import _allocate
from tests.kernel.scratch import netns_path, scratch_netns

pytestmark = [pytest.mark.netns, pytest.mark.adversarial]


@pytest.fixture(scope="module")
def node() -> Iterator[LabNode]:
    with lab_node() as n:
        yield n


def _holds(node: LabNode, uid: str) -> int:
    return len([s for s in node.services.journal.shares() if s.claim_uid == uid])


def test_a_retry_of_a_quarantined_preparation_keeps_its_holds(node: LabNode) -> None:
    claim = node.claim("q-claim")
    pod = node.pod("q-pod", "q-claim")
    claim = _allocate(node, claim, pod)
    meta = claim["metadata"]
    uid = meta["uid"]
    prep = node.services.preparation
    prep.prepare(meta["namespace"], meta["name"], uid)
    assert _holds(node, uid) == 1

    # what a crash leaves when recovery cannot prove an effect: Preparing + Quarantined
    journal = node.services.journal
    (rec,) = journal.preparations(uid)
    op = journal.load_operation(rec.operations[0])
    assert op is not None
    op.state = OperationState.QUARANTINED
    op.effects[0].state = EffectState.QUARANTINED
    op.effects[0].note = "outcome uncertain (test)"
    journal.commit(op, op.effects)
    rec.state = PreparationState.PREPARING
    with journal.batch() as b:
        b.put_preparation(rec)

    for attempt in range(2):  # a kubelet retry, then again after an agent restart
        with pytest.raises(Refusal) as refused:
            node.services.preparation.prepare(meta["namespace"], meta["name"], uid)
        assert refused.value.code == "E_QUARANTINED"
        (after,) = node.services.journal.preparations(uid)
        assert after.state is not PreparationState.RELEASED, attempt
        assert _holds(node, uid) == 1, attempt
        with pytest.raises(Refusal) as unprep:
            node.services.preparation.unprepare(uid)
        assert unprep.value.code == "E_CLEANUP_INCOMPLETE"
        assert _holds(node, uid) == 1, attempt
        if attempt == 0:
            node.restart_agent()

    # the operator resolves the effect; then unprepare releases the holds
    node.services.journal.resolve_effect(rec.operations[0], op.effects[0].id, "checked by hand")
    node.services.preparation.unprepare(uid)
    (done,) = node.services.journal.preparations(uid)
    assert done.state is PreparationState.RELEASED and _holds(node, uid) == 0


def test_a_retry_of_a_quarantined_connect_keeps_the_pin_and_the_claim(node: LabNode) -> None:
    """The same for RunPodSandbox: an attachment left Connecting whose connect operation is
    Quarantined. The runtime's retry used to end it Removed and drop its pin (the refused
    operation was never in the list of what ran); now it stays Removing with its pin, the
    claim stays attached (E_ATTACHED, E_CLAIM_IN_USE), until the effect is resolved."""
    claim = node.claim("qc-claim")
    pod = node.pod("qc-pod", "qc-claim")
    claim = _allocate(node, claim, pod)
    meta, pmeta = claim["metadata"], pod["metadata"]
    uid, pod_uid = meta["uid"], pmeta["uid"]
    node.services.preparation.prepare(meta["namespace"], meta["name"], uid)
    with scratch_netns("dmqc") as sandbox:
        node.runtime.run_pod_sandbox(
            LabPod("qc-1", pod_uid, pmeta["name"], "default", netns_path(sandbox))
        )
        journal = node.services.journal
        att = node.services.attachments.attachment(pod_uid, "qc-1")
        assert att is not None and att.state is AttachmentState.READY
        op = journal.load_operation(att.operations[0])
        assert op is not None
        op.state = OperationState.QUARANTINED
        op.effects[0].state = EffectState.QUARANTINED
        op.effects[0].note = "outcome uncertain (test)"
        journal.commit(op, op.effects)
        att.state = AttachmentState.CONNECTING
        with journal.batch() as b:
            b.put_attachment(att)

        with pytest.raises(Refusal) as refused:  # the runtime retries the same sandbox
            node.services.attachments.run_pod(
                "default", pmeta["name"], pod_uid, "qc-1", netns_path(sandbox)
            )
        assert refused.value.code == "E_QUARANTINED"
        after = node.services.attachments.attachment(pod_uid, "qc-1")
        assert after is not None and after.state is AttachmentState.REMOVING
        assert node.services.pins.ref(attachment_id(after.identity)) is not None
        with pytest.raises(Refusal) as attached:
            node.services.preparation.unprepare(uid)
        assert attached.value.code == "E_ATTACHED"

        node.services.journal.resolve_effect(op.operation_id, op.effects[0].id, "checked")
        node.services.attachments.remove_pod(pod_uid, "qc-1")
        done = node.services.attachments.attachment(pod_uid, "qc-1")
        assert done is not None and done.state is AttachmentState.REMOVED
    node.services.preparation.unprepare(uid)
