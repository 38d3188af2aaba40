"""The node mutation lock: a reader/writer node lock plus per-key locks in a fixed order.

Why not one lock: design §8.1 starts with one coarse node lock, and with it an executor
that is slow in one claim's NodePrepare (a PCI reset, a slow netlink call) delayed every
other Pod's RunPodSandbox, StopPodSandbox and NodePrepare. Operations of different claims
and sandboxes that touch disjoint resources have nothing to order between them; what must
stay exclusive is named by a key and serialised per key.

Two ways to hold it:

* :meth:`NodeMutationLock.hold` — an **ordinary operation**: the node lock *shared* (any
  number of them at once) plus exclusive ownership of the given :class:`LockKey`\\ s. Two
  holders never own the same key at once; holders of disjoint keys run concurrently.
* :meth:`NodeMutationLock.exclusive` — a **node-wide pass** (recovery at start, earlier-boot
  resolution, NRI Synchronize, retention and operator ``forget``/``resolve``, eswitch
  transitions): no other holder at all. It implies every key. Writers are preferred: once a
  pass waits, new ordinary operations wait behind it (a pass is never starved), while
  operations already inside go on and finish.

Keys and their order (deadlock freedom). A key is ``(rank, name)``; the ranks are
:data:`SANDBOX` < :data:`CLAIM` < :data:`DEVICE` < :data:`OPERATION`, and keys are ordered by
(rank, name). One call takes its new keys in that order, and a nested call may only add keys
that sort after every key its thread already owns (a sandbox's key, then its claims' once
the record names them, then their devices, then the runner's operation key); anything else
raises :class:`LockOrderError` before waiting. So every thread acquires in one global order
and no cycle of waiters can form. Taking the same key again is re-entrant, and so is any
:meth:`hold` inside :meth:`exclusive`; turning a held shared lock into :meth:`exclusive`
(an upgrade, which two threads could deadlock on) is a :class:`LockOrderError` too.

Bounded waits: a waiter gives up after ``timeout`` seconds with :class:`MutationLockTimeout`
(code ``E_NODE_LOCK_TIMEOUT``, naming what it wanted and what held it) instead of hanging a
kubelet or NRI callback forever; nothing was taken or changed.

Contract for holders: hold it only around journal commits and the native effects
themselves; never while waiting on the API server, the runtime, or status updates.
Per-thread state: which keys a thread owns is the thread's own (a lock taken in one thread
is released in the same thread).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import NamedTuple

_log = logging.getLogger(__name__)

SANDBOX = 0
"""One sandbox attachment (its record, pin, tombstone, status order)."""
CLAIM = 1
"""One claim (its preparation, its attachments' claim checks, its holds)."""
DEVICE = 2
"""One inventory item: an exclusive reservation or the parent of shares (share counts)."""
OPERATION = 3
"""One journaled operation (the runner's own key: a run, cleanup or recovery of it)."""

_RANKS = {SANDBOX: "sandbox", CLAIM: "claim", DEVICE: "device", OPERATION: "operation"}


class LockKey(NamedTuple):
    """What one holder owns exclusively; ordered by (rank, name)."""

    rank: int
    name: str

    def __str__(self) -> str:
        return f"{_RANKS.get(self.rank, str(self.rank))}/{self.name}"


def sandbox_key(attachment: str) -> LockKey:
    return LockKey(SANDBOX, attachment)


def claim_key(claim_uid: str) -> LockKey:
    return LockKey(CLAIM, claim_uid)


def device_key(inventory_id: str) -> LockKey:
    return LockKey(DEVICE, inventory_id)


def operation_key(operation_id: str) -> LockKey:
    return LockKey(OPERATION, operation_id)


class MutationLockTimeout(Exception):
    """The node mutation lock could not be taken in time; the caller should retry later."""

    code = "E_NODE_LOCK_TIMEOUT"

    def __init__(self, reason: str, holder: str, waited: float) -> None:
        self.reason = reason
        self.holder = holder
        super().__init__(
            f"node mutation lock busy: wanted for {reason!r}, held for {holder!r}, "
            f"waited {waited:.1f}s"
        )


class LockOrderError(RuntimeError):
    """A call would break the global key order (or upgrade shared to exclusive): a
    programming error, raised before waiting so that it can never deadlock."""


class _ThreadState(threading.local):
    def __init__(self) -> None:
        self.shared = 0  # nesting depth of hold()
        self.exclusive = 0  # nesting depth of exclusive()
        self.keys: set[LockKey] = set()


class NodeMutationLock:
    def __init__(self, timeout: float = 60.0) -> None:
        self._timeout = timeout
        self._cond = threading.Condition(threading.Lock())
        self._mine = _ThreadState()
        self._writer = ""  # the reason of the node-wide pass inside ("" when none)
        self._writers_waiting = 0
        self._readers: dict[int, str] = {}  # thread ident -> reason of its outermost hold
        self._owners: dict[LockKey, str] = {}  # key -> reason of its holder
        self._waiting: dict[int, str] = {}  # thread ident -> reason, while it waits

    @property
    def holder(self) -> str:
        """Why the lock is held right now ("" when free); for logs and diagnostics."""
        with self._cond:
            if self._writer:
                return self._writer
            return ", ".join(sorted(self._readers.values()))

    @property
    def waiting(self) -> str:
        """Why threads wait for the lock right now ("" when none); for diagnostics."""
        with self._cond:
            return ", ".join(sorted(self._waiting.values()))

    @property
    def passes_waiting(self) -> int:
        """How many node-wide passes wait for the operations inside to finish."""
        with self._cond:
            return self._writers_waiting

    def owned(self) -> frozenset[LockKey]:
        """The keys the calling thread owns (diagnostics and tests)."""
        return frozenset(self._mine.keys)

    @contextmanager
    def hold(
        self, reason: str, keys: Iterable[LockKey] = (), timeout: float | None = None
    ) -> Iterator[None]:
        """An ordinary operation: the node lock shared, ``keys`` owned exclusively."""
        mine = self._mine
        if mine.exclusive:
            yield  # a node-wide pass owns everything already
            return
        new = sorted(set(keys) - mine.keys)
        if new and mine.keys and new[0] <= max(mine.keys):
            raise LockOrderError(
                f"{reason}: {new[0]} does not sort after the held {max(mine.keys)}"
            )
        limit = self._timeout if timeout is None else timeout
        start = time.monotonic()
        me = threading.get_ident()
        with self._cond:
            outer = mine.shared == 0
            self._waiting[me] = reason
            try:
                if outer:
                    # a waiting pass goes first; a nested hold never waits for one (the
                    # pass waits for this very thread to leave)
                    if not self._cond.wait_for(self._no_pass, self._left(start, limit)):
                        raise MutationLockTimeout(
                            reason, self._writer or "a waiting node-wide pass", self._since(start)
                        )
                    self._readers[me] = reason
                taken: list[LockKey] = []
                for key in new:
                    if not self._cond.wait_for(partial(self._free, key), self._left(start, limit)):
                        holder = f"{key} by {self._owners.get(key, '?')}"
                        for k in taken:
                            del self._owners[k]
                        if outer:
                            del self._readers[me]
                        self._cond.notify_all()
                        raise MutationLockTimeout(reason, holder, self._since(start))
                    self._owners[key] = reason
                    taken.append(key)
            finally:
                del self._waiting[me]
            mine.shared += 1
            mine.keys.update(new)
        if outer:
            _log.debug("mutation_lock=shared reason=%s keys=%s", reason, ",".join(map(str, new)))
        try:
            yield
        finally:
            with self._cond:
                for key in new:
                    del self._owners[key]
                mine.keys.difference_update(new)
                mine.shared -= 1
                if mine.shared == 0:
                    del self._readers[me]
                self._cond.notify_all()

    @contextmanager
    def exclusive(self, reason: str, timeout: float | None = None) -> Iterator[None]:
        """A node-wide pass: no other holder while it runs (re-entrant in its thread)."""
        mine = self._mine
        if mine.exclusive:
            mine.exclusive += 1
            try:
                yield
            finally:
                mine.exclusive -= 1
            return
        if mine.shared:
            raise LockOrderError(f"{reason}: cannot upgrade a shared hold to exclusive")
        limit = self._timeout if timeout is None else timeout
        start = time.monotonic()
        me = threading.get_ident()
        with self._cond:
            self._writers_waiting += 1
            self._waiting[me] = reason
            try:
                got = self._cond.wait_for(self._idle, self._left(start, limit))
            finally:
                self._writers_waiting -= 1
                del self._waiting[me]
            if not got:
                self._cond.notify_all()  # ordinary operations waited behind this pass
                holder = self._writer or ", ".join(sorted(self._readers.values()))
                raise MutationLockTimeout(reason, holder, self._since(start))
            self._writer = reason
            mine.exclusive = 1
        _log.debug("mutation_lock=exclusive reason=%s", reason)
        try:
            yield
        finally:
            with self._cond:
                mine.exclusive = 0
                self._writer = ""
                self._cond.notify_all()

    def _free(self, key: LockKey) -> bool:
        return key not in self._owners

    def _no_pass(self) -> bool:
        return not self._writer and not self._writers_waiting

    def _idle(self) -> bool:
        return not self._writer and not self._readers

    @staticmethod
    def _left(start: float, limit: float) -> float:
        return max(0.0, limit - (time.monotonic() - start))

    @staticmethod
    def _since(start: float) -> float:
        return time.monotonic() - start
