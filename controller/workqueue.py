"""One rate-limited work queue shared by every reconciler (the client-go workqueue model).

Contract:
* a key is queued at most once (adding a queued key is a no-op);
* a key being processed is never handed to a second worker; if it is added meanwhile it
  is queued again when :meth:`done` is called (so no event is lost and no key runs twice
  concurrently);
* :meth:`retry` re-adds a key after a per-key exponential backoff (``base`` doubling up
  to ``cap``); :meth:`forget` resets it after a success;
* :meth:`add_after` schedules a key (periodic requeue, backoff, coalescing); a key already
  waiting keeps the earlier of its two times, so a storm of events that each schedule the
  same key ``delay`` ahead is one processing per window (as client-go's delaying queue);
* :meth:`shutdown` wakes every waiting worker; :meth:`get` then returns None.

A reconciler raises :class:`RetryLater` when the state it saw is transient (an object it
needs is still being deleted): the key is retried with backoff instead of waiting for
the next resync.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable, Hashable

Key = Hashable


class RetryLater(Exception):
    """Raised by a reconciler: converge again after the key's backoff."""


class RateLimitedQueue:
    def __init__(
        self,
        *,
        base: float = 0.01,
        cap: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.base = base
        self.cap = cap
        self.clock = clock
        self._cond = threading.Condition()
        self._queue: list[Key] = []
        self._queued: set[Key] = set()
        self._processing: set[Key] = set()
        self._dirty: set[Key] = set()
        self._failures: dict[Key, int] = {}
        self._delayed: list[tuple[float, int, Key]] = []
        self._waiting: dict[Key, float] = {}
        self._seq = itertools.count()
        self._shutdown = False

    def add(self, key: Key) -> None:
        with self._cond:
            self._add_locked(key)

    def _add_locked(self, key: Key) -> None:
        if self._shutdown:
            return
        if key in self._processing:
            self._dirty.add(key)
            return
        if key in self._queued:
            return
        self._queued.add(key)
        self._queue.append(key)
        self._cond.notify()

    def add_after(self, key: Key, delay: float) -> None:
        if delay <= 0:
            self.add(key)
            return
        with self._cond:
            due = self.clock() + delay
            waiting = self._waiting.get(key)
            if waiting is not None and waiting <= due:
                return
            self._waiting[key] = due
            heapq.heappush(self._delayed, (due, next(self._seq), key))
            self._cond.notify()

    def retry(self, key: Key) -> float:
        """Re-add ``key`` after its backoff; returns the delay used."""
        with self._cond:
            n = self._failures.get(key, 0)
            self._failures[key] = n + 1
        delay = float(min(self.cap, self.base * (2.0**n)))
        self.add_after(key, delay)
        return delay

    def forget(self, key: Key) -> None:
        with self._cond:
            self._failures.pop(key, None)

    def failures(self, key: Key) -> int:
        with self._cond:
            return self._failures.get(key, 0)

    def _promote_locked(self) -> float | None:
        now = self.clock()
        while self._delayed and self._delayed[0][0] <= now:
            due, _, key = heapq.heappop(self._delayed)
            if self._waiting.get(key) != due:
                continue  # superseded by an earlier time for the same key
            del self._waiting[key]
            self._add_locked(key)
        return self._delayed[0][0] - now if self._delayed else None

    def get(self, timeout: float | None = None) -> Key | None:
        """The next key to process (mark it with :meth:`done`), or None on shutdown/timeout."""
        deadline = None if timeout is None else self.clock() + timeout
        with self._cond:
            while True:
                wait = self._promote_locked()
                if self._shutdown:
                    return None
                if self._queue:
                    key = self._queue.pop(0)
                    self._queued.discard(key)
                    self._processing.add(key)
                    return key
                if deadline is not None:
                    left = deadline - self.clock()
                    if left <= 0:
                        return None
                    wait = left if wait is None else min(wait, left)
                self._cond.wait(wait)

    def done(self, key: Key) -> None:
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty:
                self._dirty.discard(key)
                self._add_locked(key)

    def shutdown(self) -> None:
        with self._cond:
            self._shutdown = True
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self._queue)
