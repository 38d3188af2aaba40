"""Attachment status writes on one background thread, in the order they were submitted.

Why: NetworkAttachmentStatus objects and ResourceClaim ``status.devices`` are reporting,
never authority (the journal governs attach and cleanup), yet writing them took four to six
API round trips inside every RunPodSandbox and StopPodSandbox hook — most of the hook's time
(issue 15 profile). NRI hooks are serialised runtime-wide, so that time was the node's
Pod-start capacity. As for refusal Events (:mod:`dmn.agent.node_events`), a runtime hook
must not wait on the API server.

Contract:

* Writes run one at a time on one thread, in submission order, so an attachment's phases
  reach the API server in the order the coordinator decided them (created before
  Connecting, Ready before CleanupPending before Released).
* Nothing is dropped: when ``capacity`` writes are pending, :meth:`submit` waits for room
  (back-pressure, only while the API server is that far behind).
* A write that raises is logged and the next one runs (the reporters already log
  ``ApiFailure`` themselves); it never reaches the hook.
* :meth:`flush` waits until everything submitted before it has been written (tests and
  shutdown); :meth:`close` flushes and stops the thread. The thread starts on the first
  submission.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dmn.serial_worker import SerialWorker

CAPACITY = 1024


def _run(write: Callable[[], Any]) -> None:
    write()


class StatusWriter:
    def __init__(self, capacity: int = CAPACITY) -> None:
        self._worker: SerialWorker[Callable[[], Any]] = SerialWorker(
            "attachment-status", _run, capacity
        )

    def submit(self, write: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        """Queue ``write(*args, **kwargs)`` behind every earlier write."""
        self._worker.put(lambda: write(*args, **kwargs))

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every write submitted so far has run; False on timeout."""
        return self._worker.flush(timeout)

    def close(self, timeout: float = 30.0) -> None:
        """Write what is pending, then stop the thread (a later submit starts a new one)."""
        self._worker.close(timeout)
