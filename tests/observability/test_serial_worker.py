"""SerialWorker, the one background-thread mechanism behind the log writer, the attachment
status writer and refusal Events: order, bounded offers, flush, close and restart, and a
handler failure that never reaches the caller."""

from __future__ import annotations

import signal
import threading

import pytest

from dmn.serial_worker import SerialWorker


def test_items_are_handled_in_order_and_a_failing_item_does_not_stop_the_rest() -> None:
    seen: list[int] = []

    def handle(item: int) -> None:
        if item == 7:
            raise RuntimeError("boom")
        seen.append(item)

    worker: SerialWorker[int] = SerialWorker("t-order", handle)
    for i in range(40):
        worker.put(i)
    assert worker.flush(5)
    assert seen == [i for i in range(40) if i != 7]
    assert worker.close(5)


def test_offer_refuses_instead_of_waiting_when_the_bounded_queue_is_full() -> None:
    gate = threading.Event()
    seen: list[str] = []

    def handle(item: str) -> None:
        gate.wait(5)
        seen.append(item)

    worker: SerialWorker[str] = SerialWorker("t-offer", handle, capacity=2)
    assert worker.offer("busy")  # taken by the thread, which then waits on the gate
    while worker.pending:
        threading.Event().wait(0.01)
    assert worker.offer("a") and worker.offer("b")
    assert not worker.offer("c")  # full: the caller drops it, nothing waits
    gate.set()
    assert worker.flush(5)
    assert seen == ["busy", "a", "b"]
    assert worker.close(5)


def test_flush_before_start_is_immediate_and_close_then_put_starts_a_new_thread() -> None:
    seen: list[str] = []
    worker: SerialWorker[str] = SerialWorker("t-restart", seen.append)
    assert worker.flush(0.01)
    assert worker.close(0.01)
    worker.put("a")
    assert worker.close(5)
    assert seen == ["a"]
    worker.put("b")
    assert worker.close(5)
    assert seen == ["a", "b"]


def test_close_reports_a_handler_still_busy_after_the_timeout() -> None:
    gate = threading.Event()
    worker: SerialWorker[int] = SerialWorker("t-slow", lambda _: gate.wait(5))
    worker.put(1)
    assert not worker.close(0.05)
    gate.set()


@pytest.mark.adversarial
def test_an_unbounded_worker_accepts_an_item_from_a_signal_handler() -> None:
    """A SIGTERM handler logs, so the log writer takes items from signal handlers; the
    unbounded queue is a SimpleQueue, whose put is reentrant (this test only shows the
    handler's item arrives in order with the rest, not an interrupted put)."""
    seen: list[str] = []
    worker: SerialWorker[str] = SerialWorker("t-signal", seen.append)
    previous = signal.signal(signal.SIGUSR1, lambda *_: worker.put("from-handler"))
    try:
        for i in range(200):
            if i == 100:
                signal.raise_signal(signal.SIGUSR1)
            worker.put(str(i))
        assert worker.flush(5)
    finally:
        signal.signal(signal.SIGUSR1, previous)
        worker.close(5)
    assert "from-handler" in seen and len(seen) == 201


@pytest.mark.adversarial
def test_without_start_on_put_a_put_during_close_neither_waits_nor_starts_a_thread() -> None:
    """The log writer's mode: a record logged while ``close`` drains (another thread, or a
    signal handler on the closing one) is queued at once and never handled by a new thread."""
    gate = threading.Event()
    seen: list[str] = []

    def handle(item: str) -> None:
        gate.wait(5)
        seen.append(item)

    worker: SerialWorker[str] = SerialWorker("t-nowait", handle, start_on_put=False)
    worker.put("before-start")
    assert worker.pending == 1  # queued, not handled: only start() starts the thread
    worker.start()
    closer = threading.Thread(target=worker.close, args=(5,))
    closer.start()
    while not worker._start_lock.locked():
        threading.Event().wait(0.01)
    worker.put("during-close")  # returns although close holds the lock
    gate.set()
    closer.join(5)
    assert seen == ["before-start"]
    assert worker.pending == 1  # queued behind the stop marker, left unhandled
    assert all(t.name != "t-nowait" for t in threading.enumerate())
