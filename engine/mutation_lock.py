"""The node mutation lock: one lock serialising preparation, effects, cleanup and recovery.

Seed 000 §11.1 asks for one context-aware node lock, initially coarse. Across processes the
journal's single-writer lock already excludes a second agent, so this lock only orders the
threads of one agent. It is re-entrant (the coordinator may hold it around a whole
NodePrepare while the runner takes it again per operation) and bounded: a waiter gives up
after ``timeout`` seconds with :class:`MutationLockTimeout` instead of hanging a kubelet or
NRI callback forever.

Contract for holders: hold it only around journal commits and the native effects
themselves; never while waiting on the API server, the runtime, or status updates.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

_log = logging.getLogger(__name__)


class MutationLockTimeout(Exception):
    """The node mutation lock could not be taken in time; the caller should retry later."""

    def __init__(self, reason: str, holder: str, waited: float) -> None:
        self.reason = reason
        self.holder = holder
        super().__init__(
            f"node mutation lock busy: wanted for {reason!r}, held for {holder!r}, "
            f"waited {waited:.1f}s"
        )


class NodeMutationLock:
    def __init__(self, timeout: float = 60.0) -> None:
        self._lock = threading.RLock()
        self._timeout = timeout
        self._holder = ""
        self._depth = 0

    @property
    def holder(self) -> str:
        """Why the lock is held right now ("" when free); for logs and diagnostics."""
        return self._holder

    @contextmanager
    def hold(self, reason: str, timeout: float | None = None) -> Iterator[None]:
        limit = self._timeout if timeout is None else timeout
        start = time.monotonic()
        if not self._lock.acquire(timeout=limit):
            raise MutationLockTimeout(reason, self._holder, time.monotonic() - start)
        self._depth += 1
        outer = self._depth == 1
        if outer:
            self._holder = reason
            _log.debug("mutation_lock=acquired reason=%s", reason)
        try:
            yield
        finally:
            self._depth -= 1
            if outer:
                self._holder = ""
            self._lock.release()
