"""When to retry a failed cleanup: exponential backoff with jitter, per attachment.

Pure: :class:`RetryBackoff` says how long to wait after the n-th failure ("equal
jitter": half the exponential step plus a random share of the other half, so a retry is
never immediate yet retries of many sandboxes spread out), and :class:`RetrySchedule`
remembers, per key, how many attempts failed and when the next one is due. The reconcile
loop owns one schedule; nothing here does I/O.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class RetryBackoff:
    initial: float = 2.0
    cap: float = 300.0

    def delay(self, failures: int, rand: Callable[[], float] = random.random) -> float:
        """Seconds to wait after ``failures`` (>= 1) failed attempts."""
        step = min(self.cap, self.initial * 2.0 ** max(0, failures - 1))
        return float(step / 2 + rand() * step / 2)


@dataclass
class _Entry:
    failures: int
    due: float


@dataclass
class RetrySchedule(Generic[K]):
    backoff: RetryBackoff = field(default_factory=RetryBackoff)
    rand: Callable[[], float] = random.random
    _entries: dict[K, _Entry] = field(default_factory=dict)

    def due(self, key: K, now: float) -> bool:
        entry = self._entries.get(key)
        return entry is None or entry.due <= now

    def failed(self, key: K, now: float) -> float:
        """Record a failed attempt; returns when the next one is due."""
        entry = self._entries.get(key)
        failures = 1 if entry is None else entry.failures + 1
        due = now + self.backoff.delay(failures, self.rand)
        self._entries[key] = _Entry(failures, due)
        return due

    def succeeded(self, key: K) -> None:
        self._entries.pop(key, None)

    def failures(self, key: K) -> int:
        entry = self._entries.get(key)
        return 0 if entry is None else entry.failures

    def keep_only(self, keys: Iterable[K]) -> None:
        """Forget keys that need no retry any more (bounded by what is pending)."""
        live = set(keys)
        for key in [k for k in self._entries if k not in live]:
            del self._entries[key]
