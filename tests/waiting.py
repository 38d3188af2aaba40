"""The one way tests wait for something that happens in another thread or process.

Contract of :func:`wait_for`: call ``probe`` every ``interval`` seconds until it returns a
truthy value and return that value; exceptions of the ``tolerate`` types count as "not
yet". The probe is called once more after the deadline, so a slow machine that finishes
just as time runs out is not reported as a failure. On timeout it raises
``AssertionError`` naming ``what`` and the last value seen. Tests never assert how long it
took (wall-clock is for benchmarks).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

TIMEOUT = 60.0


def wait_for(
    probe: Callable[[], T],
    *,
    timeout: float = TIMEOUT,
    interval: float = 0.05,
    what: str = "",
    tolerate: tuple[type[BaseException], ...] = (),
) -> T:
    deadline = time.monotonic() + timeout
    last: T | None = None
    while True:
        expired = time.monotonic() >= deadline
        try:
            last = probe()
        except tolerate:
            last = None
        if last:
            return last
        if expired:
            raise AssertionError(f"timed out waiting for {what or probe}: last={last!r}")
        time.sleep(interval)
