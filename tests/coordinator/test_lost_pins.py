"""An agent whose namespace pins are gone while their sandboxes still live.

That is what a restart of an unprivileged agent's container does (``nodeAgent.privileged=
false``): its state directory is mounted ``HostToContainer``, so the pin mounts it makes
exist only in its container's mount namespace and die with it, and the next container finds
bare files where the pins were. Emulated here on the real kernel with the real coordinator
and journal: the pin mount is detached from the agent's view (the bare file stays) and the
agent's services restart on the same state directory.

What happens: every new container of such a Pod is refused with ``E_PIN_MISSING`` (the
agent cannot prove the sandbox is the one it attached), and the Pod's deletion reaches the
sandbox again: StopPodSandbox finds the pin recorded as mounted in this boot but no longer a
mount, and pins the namespace again from the runtime's own path recorded at RunPodSandbox
(it names exactly the recorded namespace), so a whole link is given back to the host and
the attachment ends Removed. Before, the undo read the lost pin as a destroyed namespace
and recorded the attachment Removed with the link still inside the live sandbox.
"""

from __future__ import annotations

from typing import Any

import pytest

from dmn.agent.coordinator import NodeServices, Refusal
from dmn.agent.journal.records import AttachmentState
from dmn.host.pins import _umount
from dmn.lab.allocator.service import ClaimService
from dmn.lab.node import NODE_NAME
from dmn.lab.runtime.nri_runtime import HookFailed, LabContainer, LabPod
from tests.coordinator.lab_node import LabNode, lab_node
from tests.coordinator.test_attach import claimed_pod, names
from tests.kernel.scratch import netns_path, scratch_netns

pytestmark = pytest.mark.netns


def _whole_link_pod(node: LabNode) -> tuple[dict[str, Any], dict[str, Any]]:
    claim = node.claim("lost-pin-whole", device_class=node.kernel_class())
    pod = node.pod("lost-pin-whole", "lost-pin-whole")
    (claim,) = ClaimService(node.cluster, NODE_NAME).allocate([claim], pod=pod)
    meta = claim["metadata"]
    assert node.services.preparation.prepare(meta["namespace"], meta["name"], meta["uid"])
    return claim, pod


def _attached_then_pins_lost(node: LabNode, pod: dict[str, Any], sandbox: str) -> NodeServices:
    """Run the Pod's sandbox (attached, pinned), detach every pin mount (the bare files
    stay, as a new container sees them) and restart the agent's services."""
    meta = pod["metadata"]
    node.runtime.run_pod_sandbox(
        LabPod("sb-lost", meta["uid"], meta["name"], "default", netns_path(sandbox))
    )
    refs = node.services.pins.list()
    assert len(refs) == 1
    for ref in refs:
        _umount(ref.path)
    return node.restart_agent()


def test_new_containers_of_a_pod_whose_pin_is_lost_are_refused() -> None:
    with lab_node() as node:
        _, pod = claimed_pod(node)
        with scratch_netns("dmlp1") as sandbox:
            fresh = _attached_then_pins_lost(node, pod, sandbox)
            meta = pod["metadata"]
            with pytest.raises(Refusal) as refused:
                fresh.attachments.gate("default", meta["name"], meta["uid"], "sb-lost")
            assert refused.value.code == "E_PIN_MISSING"
            with pytest.raises(HookFailed, match="E_PIN_MISSING"):
                node.runtime.create_container("sb-lost", LabContainer("c-lost", "sb-lost", "app"))
            assert names(sandbox) == ["lo", "net1"]  # the running Pod keeps its network
            node.runtime.stop_pod_sandbox("sb-lost")
            node.runtime.remove_pod_sandbox("sb-lost")


def test_a_whole_link_behind_a_lost_pin_is_never_recorded_removed_unreturned() -> None:
    with lab_node() as node:
        claim, pod = _whole_link_pod(node)
        before = names(node.host_ns)
        with scratch_netns("dmlp2") as sandbox:
            fresh = _attached_then_pins_lost(node, pod, sandbox)
            (moved,) = [n for n in before if n not in names(node.host_ns)]
            node.runtime.stop_pod_sandbox("sb-lost")
            (att,) = fresh.journal.attachments()
            assert moved in names(node.host_ns), (
                f"{moved} is still in the sandbox ({names(sandbox)}) and the attachment "
                f"is {att.state.value}"
            )
            assert att.state is AttachmentState.REMOVED
            assert names(sandbox) == ["lo"]
            assert fresh.pins.list() == []
            node.runtime.remove_pod_sandbox("sb-lost")
        fresh.preparation.unprepare(claim["metadata"]["uid"])
