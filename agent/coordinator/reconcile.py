"""The reconcile loop: bring the journal's view and the node back together.

* :meth:`ReconcileLoop.recover` (at start, before anything is served): settle every
  operation a crash left unfinished through the runner's recovery.
* :meth:`ReconcileLoop.synchronize` (NRI Synchronize, seed 000 §11.5): remove attachments
  of this boot whose sandbox the runtime no longer has.

Not done yet (said plainly): a periodic retry of cleanups that failed (RemovePodSandbox
errors are retried only at the next Synchronize) and reconciliation of attachments of an
older boot; both belong here.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from dmn.agent.coordinator.config import NodeConfig
from dmn.agent.coordinator.operations import NodeOperations
from dmn.agent.coordinator.sandbox_attachment import SandboxAttachmentService
from dmn.agent.coordinator.verify import Refusal
from dmn.agent.journal.records import AttachmentIdentity, AttachmentState
from dmn.agent.journal.store import JournalStore
from dmn.agent.netns.pins import PinError
from dmn.engine.runner import RunRefused

log = logging.getLogger("dmn.agent.coordinator.coordinator")


class ReconcileLoop:
    def __init__(
        self,
        config: NodeConfig,
        journal: JournalStore,
        operations: NodeOperations,
        attachments: SandboxAttachmentService,
        boot_id: Callable[[], str],
        lock: threading.RLock,
    ) -> None:
        self.config = config
        self.journal = journal
        self.operations = operations
        self.attachments = attachments
        self.boot_id = boot_id
        self._lock = lock

    def recover(self) -> None:
        """Recover every operation a crash left unfinished, before serving anything."""
        with self._lock:
            for res in self.operations.recover():
                log.info("event=recovered operation=%s state=%s", res.operation_id, res.state)

    def synchronize(self, sandboxes: Sequence[tuple[str, str]]) -> list[AttachmentIdentity]:
        """Reconcile with the runtime's full sandbox list (NRI Synchronize, seed 000 §11.5).

        An attachment of this node and boot whose (Pod UID, sandbox id) the runtime no
        longer has is removed from the journal's record alone, through its pin; one that
        cannot be cleaned up stays Removing for the next attempt. Attachments of an
        earlier boot are left alone: their pins are gone with the reboot, and undoing a
        connect without its pinned sandbox is refused and quarantined by the runner (seen
        in a simulated reboot), so boot reconciliation needs executor support first.
        Returns what was removed.
        """
        live = set(sandboxes)
        removed: list[AttachmentIdentity] = []
        with self._lock:
            boot = self.boot_id()
            for rec in self.journal.attachments():
                ident = rec.identity
                if rec.state is AttachmentState.REMOVED or ident.node_uid != self.config.node_uid:
                    continue
                if ident.boot_id != boot or (ident.pod_uid, ident.sandbox_id) in live:
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
