"""The rate-limited work queue's contract."""

from __future__ import annotations

import threading

from dmn.controller.workqueue import RateLimitedQueue
from tests.controller.support import FakeClock


def test_dedup_and_order() -> None:
    q = RateLimitedQueue()
    for k in ["a", "b", "a", "c", "b"]:
        q.add(k)
    assert len(q) == 3
    assert [q.get(0), q.get(0), q.get(0)] == ["a", "b", "c"]
    assert q.get(0) is None


def test_key_added_while_processing_is_requeued_once_after_done() -> None:
    q = RateLimitedQueue()
    q.add("a")
    assert q.get(0) == "a"
    q.add("a")
    q.add("a")
    assert q.get(0) is None  # never handed to a second worker while in flight
    q.done("a")
    assert q.get(0) == "a"
    q.done("a")
    assert q.get(0) is None


def test_backoff_doubles_and_forget_resets() -> None:
    clock = FakeClock()
    q = RateLimitedQueue(base=1.0, cap=5.0, clock=clock)
    delays = [q.retry("k") for _ in range(5)]
    assert delays == [1.0, 2.0, 4.0, 5.0, 5.0]
    assert q.get(0) is None
    clock.now = 1.0
    assert q.get(0) == "k"  # all scheduled retries collapse into one queued key
    q.done("k")
    q.forget("k")
    assert q.failures("k") == 0
    assert q.retry("k") == 1.0


def test_add_after_and_shutdown_wakes_workers() -> None:
    q = RateLimitedQueue()
    q.add_after("later", 0.05)
    assert q.get(30.0) == "later"
    got: list[object] = []
    t = threading.Thread(target=lambda: got.append(q.get()))
    t.start()
    q.shutdown()
    t.join(30)
    assert got == [None]
    q.add("x")
    assert q.get(0) is None


def test_add_after_coalesces_a_waiting_key_at_its_earliest_time() -> None:
    clock = FakeClock()
    q = RateLimitedQueue(clock=clock)
    for _ in range(50):  # a storm of events, each scheduling the same key a window ahead
        q.add_after("topology", 1.0)
    q.add_after("topology", 3.0)  # later than the waiting time: changes nothing
    clock.now = 0.5
    q.add_after("topology", 0.2)  # earlier: the key now falls due at 0.7
    assert q.get(0) is None
    clock.now = 0.7
    assert q.get(0) == "topology"
    q.done("topology")
    clock.now = 5.0
    assert q.get(0) is None  # the superseded times do not run it again
    q.add_after("topology", 1.0)  # no longer waiting: scheduled afresh
    clock.now = 6.0
    assert q.get(0) == "topology"
