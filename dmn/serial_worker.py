"""One background thread that handles queued items one at a time, in submission order.

Why: three parts of the node agent must not do slow I/O on the thread that asked for it —
log lines (a runtime's log pipe can block), attachment status writes and refusal Events (an
NRI hook must answer within its deadline and never wait on the API server). Each had its own
copy of the same thread, queue, flush marker and stop sentinel; this is that mechanism once.

Contract:

* ``handle(item)`` runs on the worker thread, for one item at a time, in the order the items
  were queued. An exception from it is logged and the next item runs; it never reaches the
  caller that queued the item.
* :meth:`put` waits for room when ``capacity`` items are pending (back-pressure);
  :meth:`offer` never waits and returns False when the queue is full (the caller drops and
  counts). ``capacity=0`` means unbounded, through a :class:`queue.SimpleQueue`, whose
  ``put`` is reentrant: a log record may be queued from a signal handler or a finalizer that
  interrupted another ``put`` on the same thread.
* :meth:`flush` waits until every item queued before it has been handled; :meth:`close`
  flushes, stops the thread and returns whether it stopped within the timeout.
* ``start_on_put=True`` (the status writer): the first item starts the thread, and an item
  queued after :meth:`close` starts a new one; one queued while ``close`` runs waits for it.
  ``start_on_put=False`` (log lines, refusal Events): only :meth:`start` starts the thread,
  and ``put``/``offer`` never take a lock or start a thread, so they never wait on a
  ``close`` — not even from a signal handler that interrupted that ``close`` on the same
  thread; items queued before ``start`` or after ``close`` stay queued, unhandled.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")


class _Stop:
    """The sentinel that ends one worker thread (an item may itself be None)."""


class SerialWorker(Generic[T]):
    def __init__(
        self,
        name: str,
        handle: Callable[[T], object],
        capacity: int = 0,
        start_on_put: bool = True,
    ) -> None:
        self.name = name
        self._handle = handle
        self._start_on_put = start_on_put
        self._queue: (
            queue.Queue[T | threading.Event | _Stop]
            | queue.SimpleQueue[T | threading.Event | _Stop]
        ) = queue.Queue(capacity) if capacity > 0 else queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    @property
    def pending(self) -> int:
        return self._queue.qsize()

    def start(self) -> SerialWorker[T]:
        if self._thread is None:
            with self._start_lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._drain, name=self.name, daemon=True)
                    self._thread.start()
        return self

    def put(self, item: T) -> None:
        """Queue ``item`` behind every earlier one, waiting while the queue is full."""
        if self._start_on_put:
            self.start()
        self._queue.put(item)

    def offer(self, item: T) -> bool:
        """Queue ``item`` unless the queue is full; never waits for room."""
        if self._start_on_put:
            self.start()
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            return False
        return True

    def flush(self, timeout: float) -> bool:
        """Wait until every item queued so far was handled; False on timeout."""
        if self._thread is None:
            return True
        done = threading.Event()
        try:
            self._queue.put(done, timeout=timeout)
        except queue.Full:
            return False
        return done.wait(timeout)

    def close(self, timeout: float) -> bool:
        """Handle what is pending, then stop the thread; False if it was still busy."""
        with self._start_lock:  # an item queued meanwhile waits for the next thread
            thread, self._thread = self._thread, None
            if thread is None:
                return True
            self._queue.put(_Stop())
            thread.join(timeout)
            if thread.is_alive():
                log.warning("event=worker-slow worker=%s pending=%d", self.name, self.pending)
                return False
            return True

    def _drain(self) -> None:
        while True:
            item = self._queue.get()
            if isinstance(item, _Stop):
                return
            if isinstance(item, threading.Event):
                item.set()
                continue
            try:
                self._handle(item)
            except Exception:
                log.exception("event=worker-item-failed worker=%s", self.name)
