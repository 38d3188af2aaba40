"""A node reboot under a Ready attachment (issue 13, deliverable 2), on the lab node.

The reboot is what the agent can see of one: the sandbox namespace and its pin are
destroyed under the agent (the pin unmounted, the namespace removed, the agent's cached
fds closed by its restart) and the agent starts again with another boot id (injected).
Before this change the attachment of the earlier boot stayed Ready forever: Synchronize
skipped it, RemovePodSandbox could not reach it (identity built from the current boot id),
NodeUnprepare refused with E_ATTACHED and a new sandbox of the same Pod with
E_CLAIM_IN_USE. Now the start-up resolves it (Removed, pin gone), a new sandbox of the
Pod is attached, removed, and the claim unprepares; the host is as before.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
from pyroute2 import netns

from dmn.agent.coordinator.verify import Refusal
from dmn.agent.journal.keys import attachment_id
from dmn.agent.journal.records import AttachmentState, PreparationState
from dmn.lab.runtime.nri_runtime import LabPod
from tests.coordinator.lab_node import LabNode, lab_node
from tests.coordinator.test_end_to_end import _allocate, snapshot
from tests.kernel.scratch import netns_path, scratch_netns, unique

pytestmark = [pytest.mark.netns, pytest.mark.adversarial]

NEW_BOOT = "00000000-0000-4000-8000-00000000b007"


@pytest.fixture(scope="module")
def node() -> Iterator[LabNode]:
    with lab_node() as n:
        yield n


def test_an_attachment_of_an_earlier_boot_is_resolved_at_start(node: LabNode) -> None:
    claim = node.claim("rb-claim")
    pod = node.pod("rb-pod", "rb-claim")
    claim = _allocate(node, claim, pod)
    meta = claim["metadata"]
    uid, pod_uid = meta["uid"], pod["metadata"]["uid"]
    baseline = snapshot(node.host_ns)
    node.services.preparation.prepare(meta["namespace"], meta["name"], uid)

    old_sandbox = unique("dmrb")
    netns.create(old_sandbox)
    try:
        node.runtime.run_pod_sandbox(
            LabPod("rb-1", pod_uid, "rb-pod", "default", netns_path(old_sandbox))
        )
        (att,) = node.services.journal.attachments(pod_uid)
        assert att.state is AttachmentState.READY
        pin = node.services.pins.path(attachment_id(att.identity))
        # the reboot: the sandbox and its pin die; the agent comes back in another boot
        subprocess.run(["umount", "-l", str(pin)], check=True)
    finally:
        netns.remove(old_sandbox)
    node.agent.restart_services(boot_id=lambda: NEW_BOOT)

    (old,) = node.services.journal.attachments(pod_uid)
    assert old.identity.boot_id != NEW_BOOT
    assert old.state is AttachmentState.REMOVED, old
    assert not pin.exists()
    assert snapshot(node.host_ns) == baseline  # the macvlan child died with its sandbox

    # the same Pod's new sandbox attaches; its removal and NodeUnprepare proceed
    with scratch_netns("dmrb") as new_sandbox:
        node.runtime.run_pod_sandbox(
            LabPod("rb-2", pod_uid, "rb-pod", "default", netns_path(new_sandbox))
        )
        new = node.services.attachments.attachment(pod_uid, "rb-2")
        assert new is not None and new.state is AttachmentState.READY
        assert new.identity.boot_id == NEW_BOOT
        with pytest.raises(Refusal) as attached:
            node.services.preparation.unprepare(uid)
        assert attached.value.code == "E_ATTACHED"
        node.services.attachments.stop_pod(pod_uid, "rb-2")
        node.services.attachments.remove_pod(pod_uid, "rb-2")
    node.services.preparation.unprepare(uid)
    (prep,) = node.services.journal.preparations(uid)
    assert prep.state is PreparationState.RELEASED
    assert snapshot(node.host_ns) == baseline
