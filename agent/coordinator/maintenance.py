"""Periodic node maintenance, off every hook path: cleanup retries, eswitch modes, retention.

One daemon thread wakes every ``reconcile_interval`` seconds and runs the reconcile loop's
:meth:`~.reconcile.ReconcileLoop.tick` (failed cleanups retried with backoff and jitter,
orphaned Connecting attachments resolved) and the agent's ManageEswitch pass
(:mod:`.eswitch_modes`), and every ``retention_interval`` seconds
collects terminal journal records under :class:`~dmn.agent.journal.store.Retention`
(:meth:`.node_services.NodeServices.collect_terminal`): Removed attachments and Released
preparations whose operations are all Undone, older than ``max_age`` or beyond the
``max_count`` newest. Without it the journal grows with every Pod the node ever ran, and
every scan the services make under the node lock grows with it (20k Removed attachments:
a scan of ~170 ms, see ``benchmarks/journal_retention.py``).

The services are looked up on every pass (the agent may restart them). A failed pass is
logged and tried again at the next one; a journal that failed a commit stops the agent
through the store's failure listeners, not here.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from dmn.agent.journal.store import Retention

if TYPE_CHECKING:
    from dmn.agent.coordinator.node_services import NodeServices

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MaintenanceConfig:
    reconcile_interval: float = 10.0
    retention_interval: float = 300.0
    retention: Retention = field(default_factory=Retention)

    def __post_init__(self) -> None:
        if self.reconcile_interval <= 0 or self.retention_interval <= 0:
            raise ValueError("maintenance intervals must be positive")
        if self.retention.max_age < 0 or self.retention.max_count < 0:
            raise ValueError("retention limits must not be negative")


class Maintenance:
    def __init__(
        self,
        services: Callable[[], NodeServices | None],
        config: MaintenanceConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
        eswitch: Callable[[NodeServices], object] | None = None,
    ) -> None:
        self.services = services
        #: the ManageEswitch pass (the agent's: it knows the published inventory and policies)
        self.eswitch = eswitch
        self.config = config or MaintenanceConfig()
        self.clock = clock
        self.passes = 0
        self.collected = 0
        self._next_retention = 0.0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Maintenance:
        self._next_retention = self.clock() + self.config.retention_interval
        self._thread = threading.Thread(target=self._loop, name="maintenance", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.wait(self.config.reconcile_interval):
            self.run_once()

    def run_once(self, *, retention: bool | None = None) -> None:
        """One pass: the reconcile tick, and retention when due (or when ``retention``)."""
        services = self.services()
        if services is None or not services.journal.writable()[0]:
            return  # closed (restarting) or failed: nothing to maintain here
        try:
            services.reconcile.tick()
        except Exception:  # never let one bad pass end maintenance
            log.exception("event=maintenance-reconcile-failed")
        if self.eswitch is not None:
            try:
                self.eswitch(services)
            except Exception:
                log.exception("event=maintenance-eswitch-failed")
        now = self.clock()
        if retention or (retention is None and now >= self._next_retention):
            self._next_retention = now + self.config.retention_interval
            try:
                self.collected += services.collect_terminal(self.config.retention)
            except Exception:
                log.exception("event=maintenance-retention-failed")
        self.passes += 1
