"""A running node agent whose journal commit fails (issue 13, deliverable 6), in process.

The agent's state dir is on a disk whose fdatasync fails for real once the test fills its
backing store (tests/journal/failing_disk.py). The first failed commit (here the tombstone
of a stopped sandbox) marks the agent fatal (``dmn node`` exits 1 on it: see
tests/node_cli), readiness and the ``journal-writable`` condition report it, and from then
on the kubelet and NRI adapters answer with the reason code and change nothing: a
NodePrepare of an allocated claim is refused E_JOURNAL_FAILED and no link moves.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dmn.agent.kubelet.handler import ClaimRef
from dmn.agent.nri.handler import HookRefused, PodSandbox
from dmn.lab.allocator.service import ClaimService
from dmn.lab.node import NODE_NAME
from tests.coordinator.lab_node import lab_node
from tests.coordinator.test_end_to_end import snapshot
from tests.journal.failing_disk import failing_disk

pytestmark = [pytest.mark.netns, pytest.mark.adversarial]


def test_first_failed_commit_stops_mutation_and_reports_not_ready(tmp_path: Path) -> None:
    with failing_disk(tmp_path) as disk, lab_node(state_dir=disk.mount / "agent") as node:
        agent = node.agent
        assert agent.nri is not None and agent.dra is not None
        assert agent.readiness().journalWritable and not agent.fatal.is_set()
        claim = node.claim("jf-claim")
        pod = node.pod("jf-pod", "jf-claim")
        (claim,) = ClaimService(node.cluster, NODE_NAME).allocate([claim], pod=pod)
        baseline = snapshot(node.host_ns)
        disk.fill()
        plain = PodSandbox("sb-jf", "plain", "uid-plain", "default")
        with pytest.raises(HookRefused, match="E_JOURNAL_WRITE"):
            agent.nri.stop_pod_sandbox(plain)  # its tombstone is the first failing commit
        assert agent.fatal.is_set() and agent.fatal_error is not None
        assert agent.fatal_error.code == "E_JOURNAL_WRITE"
        assert not agent.readiness().journalWritable
        ok, reason = agent.readiness_conditions()["journal-writable"]()
        assert not ok and "last commit failed" in reason
        meta = claim["metadata"]
        result = agent.dra.prepare([ClaimRef(meta["namespace"], meta["uid"], meta["name"])])
        error = result[meta["uid"]].error or ""
        assert error.startswith("E_JOURNAL_FAILED: "), error
        with pytest.raises(HookRefused, match="E_JOURNAL_FAILED"):
            agent.nri.remove_pod_sandbox(PodSandbox("sb-jf2", "plain", "uid-2", "default"))
        assert snapshot(node.host_ns) == baseline  # nothing was changed on the node
