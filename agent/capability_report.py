"""The node agent's capability report on its Node (design §9.3; the format is
:mod:`dmn.api.node_capability`).

Why: the controller labels a Node eligible for a revision only while the node's agent runs
the contracts that revision pins, and admission keeps Pods of ours off Nodes without the
label. The agent is the only one that knows what it runs, so it writes the report: its
node, boot, build, NRI state, the short contract digest of every opcode its executors
implement and the contract digest of every plugin it ships. It rewrites the report every
``refresh`` seconds (so a silent agent's report expires) and at once when its NRI state
changes (so a Node becomes eligible as soon as its agent can gate containers).

One merge patch of one annotation; a failed write is logged and retried on the next tick.
The report is left in place when the agent stops: it expires on its own, and the
controller also stops trusting it once the agent's Pod is no longer Ready.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from dmn.api.cluster import ApiFailure, Cluster
from dmn.api.cluster import resources as r
from dmn.api.node_capability import ANNOTATION, DEFAULT_REFRESH_S, CapabilityReport

log = logging.getLogger(__name__)

#: How often the reporter looks for a change of NRI state between refreshes.
POLL_S = 1.0
#: Wait before retrying a write the API server refused or did not answer.
RETRY_S = 5.0


class CapabilityReporter:
    """Writes ``report()`` to the Node's annotation on a thread (see the module contract)."""

    def __init__(
        self,
        cluster: Cluster,
        node_name: str,
        report: Callable[[float], CapabilityReport],
        refresh: float = DEFAULT_REFRESH_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cluster = cluster
        self.node_name = node_name
        self.report = report
        self.refresh = refresh
        self.clock = clock
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="capability", daemon=True)
        self.written: CapabilityReport | None = None
        self._next_at = 0.0

    def start(self) -> CapabilityReporter:
        self._thread.start()
        return self

    def write_once(self, report: CapabilityReport | None = None) -> bool:
        """Write ``report`` (default: the current one); False when the API server refused or
        did not answer."""
        report = report if report is not None else self.report(self.clock())
        body = {"metadata": {"annotations": {ANNOTATION: report.to_annotation()}}}
        try:
            self.cluster.patch(r.NODES, self.node_name, body)
        except ApiFailure as exc:
            log.warning("event=capability-write-failed node=%s error=%s", self.node_name, exc)
            return False
        if self.written is None or _state(self.written) != _state(report):
            log.info(
                "event=capability-reported node=%s nri=%s opcodes=%d plugins=%d",
                self.node_name,
                report.nri_registered and report.nri_synchronized,
                len(report.opcodes),
                len(report.builtins),
            )
        self.written = report
        return True

    def tick(self) -> None:
        """One pass of the loop: write when the refresh is due or the NRI state changed."""
        now = self.clock()
        report = self.report(now)
        changed = self.written is not None and _state(report) != _state(self.written)
        if now < self._next_at and not changed:
            return
        ok = self.write_once(report)
        self._next_at = self.clock() + (self.refresh if ok else min(RETRY_S, self.refresh))

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception:  # the reporter must outlive any one bad pass
                log.exception("event=capability-pass-failed node=%s", self.node_name)
                self._next_at = self.clock() + RETRY_S
            self._stop.wait(POLL_S)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=POLL_S + 5)


def _state(report: CapabilityReport) -> tuple[object, ...]:
    """What a report says apart from when it was written."""
    return (
        report.boot_id,
        report.nri_registered,
        report.nri_synchronized,
        tuple(sorted(report.opcodes.items())),
        tuple(sorted(report.builtins.items())),
    )
