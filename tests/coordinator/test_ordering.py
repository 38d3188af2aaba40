"""Ordering of sandbox hooks (issue 13, deliverable 5), on the lab node with real namespaces.

Reproduced first, then fixed:

* StopPodSandbox / RemovePodSandbox of a sandbox with no attachment record left nothing
  behind, so a RunPodSandbox of that sandbox arriving later (still on its way, or one that
  outlived its hook deadline) attached a removed sandbox. Now they leave a Removed
  tombstone and the late Run is refused before anything is touched.
* A RunPodSandbox that outlived its NRI hook deadline kept running in its thread and
  finished the attachment although the runtime had been answered DEADLINE_EXCEEDED. Now
  the hook's deadline is checked before every mutation; a late finisher undoes what it
  did and its record ends Removed (E_HOOK_DEADLINE).
* Nothing retried a failed cleanup, and an attachment left Connecting by a run that is no
  longer running stayed so forever. Now the periodic reconcile tick retries with backoff
  and jitter and resolves such orphans.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from dmn.agent.coordinator import Refusal
from dmn.agent.coordinator.maintenance import Maintenance, MaintenanceConfig
from dmn.agent.coordinator.retry_backoff import RetryBackoff, RetrySchedule
from dmn.agent.journal.records import AttachmentIdentity, AttachmentRecord, AttachmentState
from dmn.agent.journal.store import Retention
from dmn.agent.nri.handler import HookDeadline
from dmn.api.cluster import resources as r
from dmn.engine.journal import OperationState
from dmn.lab.allocator.service import ClaimService
from dmn.lab.node import NODE_NAME, NODE_UID
from dmn.lab.runtime.nri_runtime import HookFailed, LabPod
from tests.coordinator.lab_node import WAIT, LabNode, lab_node
from tests.coordinator.test_attach import names
from tests.coordinator.test_end_to_end import snapshot
from tests.kernel.scratch import netns_path, scratch_netns
from tests.waiting import wait_for

pytestmark = [pytest.mark.netns, pytest.mark.adversarial]

_n = itertools.count()


@pytest.fixture(scope="module")
def node() -> Iterator[LabNode]:
    with lab_node() as n:
        yield n


def claimed_pod(node: LabNode) -> tuple[dict[str, Any], dict[str, Any]]:
    i = next(_n)
    claim = node.claim(f"ord-claim-{i}")
    pod = node.pod(f"ord-pod-{i}", f"ord-claim-{i}")
    (claim,) = ClaimService(node.cluster, NODE_NAME).allocate([claim], pod=pod)
    meta = claim["metadata"]
    assert node.services.preparation.prepare(meta["namespace"], meta["name"], meta["uid"])
    return claim, pod


@pytest.mark.parametrize("first", ["stop", "remove"])
def test_run_after_stop_or_remove_without_record_never_attaches(node: LabNode, first: str) -> None:
    baseline = snapshot(node.host_ns)
    claim, pod = claimed_pod(node)
    meta = pod["metadata"]
    sb_id = f"sb-late-{first}"
    with scratch_netns("dmo") as sandbox:
        sb = LabPod(sb_id, meta["uid"], meta["name"], "default", netns_path(sandbox))
        # the runtime stops/removes the sandbox before its RunPodSandbox reaches the agent
        if first == "stop":
            node.services.attachments.stop_pod(meta["uid"], sb_id)
        else:
            node.services.attachments.remove_pod(meta["uid"], sb_id)
        tomb = node.services.attachments.attachment(meta["uid"], sb_id)
        assert tomb is not None and tomb.state is AttachmentState.REMOVED
        assert tomb.operations == [] and "tombstone" in tomb.error
        with pytest.raises(HookFailed, match="E_ATTACHMENT_STATE"):
            node.runtime.run_pod_sandbox(sb)  # the late Run
        assert names(sandbox) == ["lo"]
        assert node.services.pins.list() == []
        with pytest.raises(Refusal, match="E_NOT_READY"):  # no container starts in it
            node.services.attachments.gate("default", meta["name"], meta["uid"], sb_id)
    node.services.preparation.unprepare(claim["metadata"]["uid"])
    assert snapshot(node.host_ns) == baseline


def test_hook_past_its_deadline_through_nri_attaches_nothing(node: LabNode) -> None:
    """The real adapter path: the NRI hook's deadline (0.5 s here) passes while the Run
    waits for the node lock (a node-wide pass holds it); the runtime hears
    DEADLINE_EXCEEDED, and the thread that goes on afterwards attaches nothing."""
    claim, pod = claimed_pod(node)
    meta = pod["metadata"]
    plugin = node.agent.plugin
    assert plugin is not None
    saved = plugin.plugin.config
    from dataclasses import replace

    plugin.plugin.config = replace(saved, hook_deadline=0.5)
    held = threading.Event()
    release = threading.Event()

    def hold_lock() -> None:
        with node.services.lock.exclusive("test: a node-wide pass"):
            held.set()
            release.wait(30)

    holder = threading.Thread(target=hold_lock)
    holder.start()
    try:
        held.wait(30)
        with scratch_netns("dmo") as sandbox:
            sb = LabPod("sb-deadline", meta["uid"], meta["name"], "default", netns_path(sandbox))
            with pytest.raises(HookFailed, match="deadline"):
                node.runtime.run_pod_sandbox(sb)
            release.set()
            holder.join(30)
            # the late thread goes on once the lock is free, and is refused by its deadline
            ident = AttachmentIdentity(NODE_UID, _boot(node), meta["uid"], "sb-deadline")
            wait_for(
                lambda: not node.services.attachments.in_flight(ident),
                timeout=WAIT,
                what="the late RunPodSandbox to finish",
            )
            assert node.agent.reporter.flush()
            reasons = [
                e["reason"]
                for e in node.cluster.list(r.EVENTS, namespace="default").items
                if e["involvedObject"].get("uid") == meta["uid"]
            ]
            assert "E_HOOK_DEADLINE" in reasons, reasons
            assert names(sandbox) == ["lo"]
            assert node.services.pins.list() == []
            att = node.services.attachments.attachment(meta["uid"], "sb-deadline")
            assert att is None or att.state is AttachmentState.REMOVED
    finally:
        release.set()
        holder.join(30)
        plugin.plugin.config = saved
    node.services.preparation.unprepare(claim["metadata"]["uid"])


def _boot(node: LabNode) -> str:
    return node.services.attachments.boot_id()


class _ExpiresAt:
    """A clock for HookDeadline that passes the deadline at the n-th look: deterministic
    placement of 'the runtime stopped waiting' between two steps of the run."""

    def __init__(self, looks: int) -> None:
        self.looks = 0
        self.expire_at = looks

    def __call__(self) -> float:
        self.looks += 1
        return 1.0 if self.looks >= self.expire_at else 0.0


def test_late_finisher_undoes_what_it_did(node: LabNode) -> None:
    """The deadline passes after the connect step ran, before Ready: the step is undone,
    the record ends Removed with E_HOOK_DEADLINE, the pin is gone, the sandbox is clean."""
    baseline = snapshot(node.host_ns)
    claim, pod = claimed_pod(node)
    meta = pod["metadata"]
    with scratch_netns("dmo") as sandbox:
        # looks: before reading the Pod (1), before the intent (2), before the step (3),
        # before Ready (4): it expires at the 4th, after the link was moved in
        deadline = HookDeadline(1.0, clock=_ExpiresAt(4))
        with pytest.raises(Refusal) as refused:
            node.services.attachments.run_pod(
                "default",
                meta["name"],
                meta["uid"],
                "sb-late",
                netns_path(sandbox),
                deadline=deadline,
            )
        assert refused.value.code == "E_HOOK_DEADLINE"
        att = node.services.attachments.attachment(meta["uid"], "sb-late")
        assert att is not None and att.state is AttachmentState.REMOVED
        assert "E_HOOK_DEADLINE" in att.error and att.operations
        for op in att.operations:
            rec = node.services.journal.load_operation(op)
            assert rec is not None and rec.state is OperationState.UNDONE
        assert names(sandbox) == ["lo"]
        assert node.services.pins.list() == []
    node.services.preparation.unprepare(claim["metadata"]["uid"])
    assert snapshot(node.host_ns) == baseline


def test_deadline_passed_before_start_touches_nothing(node: LabNode) -> None:
    claim, pod = claimed_pod(node)
    meta = pod["metadata"]
    with scratch_netns("dmo") as sandbox:
        with pytest.raises(Refusal, match="E_HOOK_DEADLINE"):
            node.services.attachments.run_pod(
                "default",
                meta["name"],
                meta["uid"],
                "sb-never",
                netns_path(sandbox),
                deadline=HookDeadline(0.0),
            )
        assert node.services.attachments.attachment(meta["uid"], "sb-never") is None
        assert names(sandbox) == ["lo"]
    node.services.preparation.unprepare(claim["metadata"]["uid"])


def test_reconcile_tick_resolves_an_orphaned_connecting_attachment(node: LabNode) -> None:
    """A Connecting record whose run is gone (as a crash between the intent and Ready
    leaves it, here: the journal state written directly) is fenced, undone and Removed
    by the periodic tick; the sandbox is clean, the claim can be unprepared."""
    baseline = snapshot(node.host_ns)
    claim, pod = claimed_pod(node)
    meta = pod["metadata"]
    with scratch_netns("dmo") as sandbox:
        sb = LabPod("sb-orphan", meta["uid"], meta["name"], "default", netns_path(sandbox))
        node.runtime.run_pod_sandbox(sb)
        assert names(sandbox) == ["lo", "net1"]
        rec = node.services.attachments.attachment(meta["uid"], "sb-orphan")
        assert rec is not None
        rec.state = AttachmentState.CONNECTING
        with node.services.journal.batch() as b:
            b.put_attachment(rec)
        with pytest.raises(Refusal, match="E_ATTACHED"):
            node.services.preparation.unprepare(claim["metadata"]["uid"])
        reconcile = node.services.reconcile
        assert reconcile.tick() == []  # first seen: a runtime retry may still resume it
        saved = reconcile.orphan_grace
        reconcile.orphan_grace = 0.0
        try:
            removed = reconcile.tick()
        finally:
            reconcile.orphan_grace = saved
        assert [i.sandbox_id for i in removed] == ["sb-orphan"]
        after = node.services.attachments.attachment(meta["uid"], "sb-orphan")
        assert after is not None and after.state is AttachmentState.REMOVED
        assert names(sandbox) == ["lo"]
        assert node.services.reconcile.tick() == []  # nothing left to do
    node.services.preparation.unprepare(claim["metadata"]["uid"])
    assert snapshot(node.host_ns) == baseline


def test_failed_cleanup_is_retried_with_backoff_until_it_succeeds(node: LabNode) -> None:
    """A Removing attachment whose cleanup fails twice: each failure schedules the next
    attempt later (exponential, jittered), a tick before it is due does nothing, the
    third attempt removes it. The failure is injected at the service's remove (the
    retry loop's contract), the cleanup that finally runs is the real one."""
    claim, pod = claimed_pod(node)
    meta = pod["metadata"]
    now = [1000.0]
    reconcile = node.services.reconcile
    saved_clock, saved_retries = reconcile.clock, reconcile.retries
    reconcile.clock = lambda: now[0]
    reconcile.retries = RetrySchedule(RetryBackoff(initial=2.0, cap=60.0), rand=lambda: 1.0)
    attachments = node.services.attachments
    real_remove = attachments.remove
    failures = [2]

    def flaky_remove(rec: AttachmentRecord) -> None:
        if failures[0] > 0:
            failures[0] -= 1
            raise Refusal("E_CLEANUP_INCOMPLETE", "injected", retryable=True)
        real_remove(rec)

    attachments.remove = flaky_remove  # type: ignore[method-assign]
    try:
        with scratch_netns("dmo") as sandbox:
            sb = LabPod("sb-retry", meta["uid"], meta["name"], "default", netns_path(sandbox))
            node.runtime.run_pod_sandbox(sb)
            rec = attachments.attachment(meta["uid"], "sb-retry")
            assert rec is not None
            rec.state = AttachmentState.REMOVING
            with node.services.journal.batch() as b:
                b.put_attachment(rec)
            ident = rec.identity
            assert reconcile.tick() == []  # attempt 1 fails: next in 2 s (rand 1.0)
            assert reconcile.retries.failures(ident) == 1
            now[0] += 1.0
            assert reconcile.tick() == [] and failures[0] == 1  # not due: not attempted
            now[0] += 1.0
            assert reconcile.tick() == []  # attempt 2 fails: next in 4 s
            assert reconcile.retries.failures(ident) == 2
            now[0] += 3.9
            assert reconcile.tick() == [] and reconcile.retries.failures(ident) == 2
            now[0] += 0.1
            assert [i.sandbox_id for i in reconcile.tick()] == ["sb-retry"]
            assert reconcile.retries.failures(ident) == 0
            assert names(sandbox) == ["lo"]
    finally:
        attachments.remove = real_remove  # type: ignore[method-assign]
        reconcile.clock, reconcile.retries = saved_clock, saved_retries
    node.services.preparation.unprepare(claim["metadata"]["uid"])


def test_backoff_is_exponential_capped_and_jittered() -> None:
    backoff = RetryBackoff(initial=2.0, cap=10.0)
    assert [backoff.delay(n, lambda: 0.0) for n in (1, 2, 3, 4, 5)] == [1.0, 2.0, 4.0, 5.0, 5.0]
    assert [backoff.delay(n, lambda: 1.0) for n in (1, 2, 3, 4)] == [2.0, 4.0, 8.0, 10.0]
    schedule: RetrySchedule[str] = RetrySchedule(backoff)
    delays = {round(schedule.failed(f"k{i}", 0.0), 6) for i in range(20)}
    assert len(delays) > 1 and all(1.0 <= d <= 2.0 for d in delays)  # spread, bounded
    schedule.keep_only(["k1"])
    assert schedule.failures("k0") == 0 and schedule.failures("k1") == 1


def test_maintenance_collects_terminal_records_by_age_and_count(node: LabNode) -> None:
    """Retention is wired into the agent: the maintenance pass collects tombstones and
    other terminal records beyond the configured count, and after the configured age."""
    journal = node.services.journal
    for i in range(5):
        node.services.attachments.stop_pod(f"ret-pod-{i}", f"sb-ret-{i}")  # tombstones
    terminal = [a for a in journal.attachments() if a.state is AttachmentState.REMOVED]
    assert len(terminal) >= 5
    now = [0.0]
    by_count = Maintenance(
        lambda: node.services,
        MaintenanceConfig(retention=Retention(max_age=3600.0, max_count=2)),
        clock=lambda: now[0],
    )
    by_count.run_once(retention=True)
    left = [a for a in journal.attachments() if a.state is AttachmentState.REMOVED]
    assert len(left) <= 2 and by_count.collected >= len(terminal) - 2
    by_age = Maintenance(
        lambda: node.services, MaintenanceConfig(retention=Retention(max_age=0.0, max_count=99))
    )
    by_age.run_once(retention=True)
    assert [a for a in journal.attachments() if a.state is AttachmentState.REMOVED] == []
