"""The one way tests wait for something that happens in another thread or process.

Contract of :func:`wait_for`: call ``probe`` until it returns a truthy value and return that
value — first after ``interval`` seconds, then at intervals growing by half each time up to
:data:`MAX_INTERVAL` (a probe is usually an API read or a netlink dump: at a fixed 20 per
second under the kernel lab's emulation the waiting test took the CPU from the very thread or
process it waited for); exceptions of the ``tolerate`` types count as "not
yet". The probe is called once more after the deadline, so a slow machine that finishes
just as time runs out is not reported as a failure. On timeout it raises
``AssertionError`` naming ``what`` and the last value seen. Tests never assert how long it
took (wall-clock is for benchmarks).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

TIMEOUT = 60.0
MAX_INTERVAL = 1.0 if "DMN_KERNEL_LAB_GUEST" in os.environ else 0.25


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
        interval = min(interval * 1.5, max(MAX_INTERVAL, interval))
