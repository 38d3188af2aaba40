"""The reconcile loop: bring the journal's view and the node back together.

* :meth:`ReconcileLoop.recover` (at start, before anything is served): settle every
  operation a crash left unfinished through the runner's recovery, then resolve the
  attachments of an earlier boot (:meth:`~ReconcileLoop.resolve_earlier_boots`).
* :meth:`ReconcileLoop.synchronize` (NRI Synchronize, design §8.5): remove attachments
  whose sandbox the runtime no longer has (also an earlier boot's that start could not
  finish).

A reboot destroys every sandbox namespace and every virtual link in it; hardware the
kernel gives back to the host keeps its permanent MAC and parent device. An attachment of
an earlier boot is removed like any other — fence, Removing, its connect operations undone
in reverse from the journal, Removed, pin record dropped — and the executors know what an
earlier boot means (``link_identity.of_earlier_boot``): a virtual link is gone, hardware is
found by its recorded hardware identity and restored from its before-image, and nothing
else is touched. Until then such an attachment blocked NodeUnprepare (E_ATTACHED) and every
new sandbox of its claims (E_CLAIM_IN_USE) forever. One that cannot be cleaned up (an
effect quarantined) stays Removing and keeps its holds. Preparations are left as they are:
they hold journal-level reservations and shares, not kernel state, and kubelet keeps its
own record of prepared claims across a reboot and does not prepare them again.

* :meth:`ReconcileLoop.tick` (periodic, from :mod:`.maintenance`, never on a hook):
  retry cleanups that failed (attachments left Removing) with exponential backoff and
  jitter per attachment (:mod:`.retry_backoff`), and resolve orphans — attachments left
  Connecting whose RunPodSandbox is no longer running (the hook died with an earlier
  incarnation, or gave up) for at least ``orphan_grace`` seconds (a runtime that retries
  the same sandbox resumes it meanwhile): they are fenced as abandoned, undone from the
  journal and end Removed — the sandbox may live on, and its next CreateContainer attaches
  it late (:meth:`.sandbox_attachment.SandboxAttachmentService.attach_late`).

Attachments of an earlier boot are resolved at start (above); one left Removing there is
retried by the tick like any other Removing attachment and by Synchronize.

Locking (:mod:`.node_lock`): recovery, earlier-boot resolution and Synchronize are
node-wide passes (the node lock exclusively: each decides from every record at once); the
tick is not — it retries one attachment at a time, owning that attachment's keys
(:meth:`.sandbox_attachment.SandboxAttachmentService.owning`), so a retry never waits for
the other Pods' hooks nor they for it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from dmn.agent.coordinator.config import NodeConfig
from dmn.agent.coordinator.node_lock import NodeLock
from dmn.agent.coordinator.operations import NodeOperations
from dmn.agent.coordinator.retry_backoff import RetrySchedule
from dmn.agent.coordinator.sandbox_attachment import ABANDONED, SandboxAttachmentService
from dmn.agent.coordinator.verify import Refusal
from dmn.agent.journal.records import AttachmentIdentity, AttachmentRecord, AttachmentState
from dmn.agent.journal.store import JournalStore
from dmn.engine.runner import RunRefused
from dmn.host.pins import PinError

log = logging.getLogger("dmn.agent.coordinator.coordinator")


class ReconcileLoop:
    def __init__(
        self,
        config: NodeConfig,
        journal: JournalStore,
        operations: NodeOperations,
        attachments: SandboxAttachmentService,
        boot_id: Callable[[], str],
        lock: NodeLock,
        retries: RetrySchedule[AttachmentIdentity] | None = None,
        clock: Callable[[], float] = time.monotonic,
        orphan_grace: float = 120.0,
    ) -> None:
        self.config = config
        self.retries: RetrySchedule[AttachmentIdentity] = retries or RetrySchedule()
        self.clock = clock
        self.orphan_grace = orphan_grace
        self._orphan_seen: dict[AttachmentIdentity, float] = {}
        self.journal = journal
        self.operations = operations
        self.attachments = attachments
        self.boot_id = boot_id
        self._lock = lock

    def recover(self) -> None:
        """Recover every operation a crash left unfinished, then resolve the attachments of
        an earlier boot; before serving anything."""
        with self._lock.exclusive("recover"):
            for res in self.operations.recover():
                log.info("event=recovered operation=%s state=%s", res.operation_id, res.state)
            for rec in self.journal.attachments():
                self.attachments.release_leftover_pin(rec)  # a crash after Removed
            self.resolve_earlier_boots()

    def resolve_earlier_boots(self) -> list[AttachmentIdentity]:
        """Remove every attachment of this node recorded in another boot (its sandbox died
        with that boot); returns those now Removed. A failure leaves the record Removing
        (holds kept) for Synchronize to retry."""
        removed: list[AttachmentIdentity] = []
        with self._lock.exclusive("earlier boots"):
            boot = self.boot_id()
            for rec in self.journal.attachments():
                ident = rec.identity
                if (
                    rec.state is AttachmentState.REMOVED
                    or ident.node_uid != self.config.node_uid
                    or ident.boot_id == boot
                ):
                    continue
                try:
                    self.attachments.remove(rec)
                    removed.append(ident)
                    log.info(
                        "event=earlier-boot-removed sandbox=%s boot=%s",
                        ident.sandbox_id,
                        ident.boot_id,
                    )
                except (Refusal, RunRefused, PinError) as exc:
                    log.error(
                        "event=earlier-boot-cleanup-failed sandbox=%s error=%s",
                        ident.sandbox_id,
                        exc,
                    )
        return removed

    def synchronize(self, sandboxes: Sequence[tuple[str, str]]) -> list[AttachmentIdentity]:
        """Reconcile with the runtime's full sandbox list (NRI Synchronize, design §8.5).

        An attachment of this node whose (Pod UID, sandbox id) the runtime no longer has is
        removed from the journal's record alone; one that cannot be cleaned up stays
        Removing for the next attempt. That includes an attachment of an earlier boot that
        start-up could not finish (the runtime never lists a sandbox of an earlier boot).
        Returns what was removed.
        """
        live = set(sandboxes)
        removed: list[AttachmentIdentity] = []
        with self._lock.exclusive("synchronize"):
            boot = self.boot_id()
            for rec in self.journal.attachments():
                ident = rec.identity
                if rec.state is AttachmentState.REMOVED or ident.node_uid != self.config.node_uid:
                    continue
                if ident.boot_id == boot and (ident.pod_uid, ident.sandbox_id) in live:
                    continue
                try:
                    self.attachments.remove(rec)
                    removed.append(ident)
                except (Refusal, RunRefused, PinError) as exc:
                    log.error(
                        "event=sync-cleanup-failed sandbox=%s error=%s", ident.sandbox_id, exc
                    )
        if removed:
            log.info("event=synchronized removed=%d", len(removed))
        return removed

    def _pending(self, rec: AttachmentRecord, boot: str) -> bool:
        """Removing (a cleanup that failed, also one of an earlier boot), or Connecting of
        this boot with no run of it in flight."""
        ident = rec.identity
        if ident.node_uid != self.config.node_uid:
            return False
        if rec.state is AttachmentState.REMOVING:
            return True
        if ident.boot_id != boot:
            return False
        return rec.state is AttachmentState.CONNECTING and not self.attachments.in_flight(ident)

    def tick(self) -> list[AttachmentIdentity]:
        """Retry every due cleanup and resolve orphans (see the module doc); returns what
        ended Removed. A failure is logged and scheduled again with backoff and jitter."""
        now = self.clock()
        removed: list[AttachmentIdentity] = []
        boot = self.boot_id()  # a scan of reads; each retry owns its attachment and re-reads
        pending = [r.identity for r in self.journal.attachments() if self._pending(r, boot)]
        self.retries.keep_only(pending)
        self._orphan_seen = {i: t for i, t in self._orphan_seen.items() if i in pending}
        for ident in pending:
            if not self.retries.due(ident, now):
                continue
            try:
                # re-read under its keys: a hook may have finished it meanwhile
                with self.attachments.owning(ident, f"retry {ident.sandbox_id}") as rec:
                    if rec is None or not self._pending(rec, boot):
                        self.retries.succeeded(ident)
                        continue
                    orphan = rec.state is AttachmentState.CONNECTING
                    if orphan and now - self._orphan_seen.setdefault(ident, now) < (
                        self.orphan_grace
                    ):
                        continue  # not yet: the runtime may still retry it
                    if orphan:  # its sandbox may live on: a late attachment may come
                        self.attachments.remove(rec, f"{ABANDONED} its RunPodSandbox died")
                    else:
                        self.attachments.remove(rec)
                self.retries.succeeded(ident)
                removed.append(ident)
                log.info("event=cleanup-retried sandbox=%s orphan=%s", ident.sandbox_id, orphan)
            except (Refusal, RunRefused, PinError) as exc:
                due = self.retries.failed(ident, now)
                log.error(
                    "event=cleanup-retry-failed sandbox=%s failures=%d next_in=%.1fs error=%s",
                    ident.sandbox_id,
                    self.retries.failures(ident),
                    due - now,
                    exc,
                )
        return removed
