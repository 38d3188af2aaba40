"""The attachment status writer: in order, nothing dropped, failures contained."""

from __future__ import annotations

import threading

from dmn.agent.coordinator.status_writer import StatusWriter


def test_writes_run_in_submission_order_and_a_failure_does_not_stop_them() -> None:
    writer = StatusWriter()
    seen: list[int] = []

    def fail() -> None:
        raise RuntimeError("api server said no")

    for i in range(50):
        writer.submit(seen.append, i)
        if i == 10:
            writer.submit(fail)
    assert writer.flush()
    assert seen == list(range(50))
    writer.close()


def test_a_full_queue_waits_instead_of_dropping() -> None:
    writer = StatusWriter(capacity=2)
    gate = threading.Event()
    seen: list[int] = []
    writer.submit(gate.wait)  # the thread is busy until the gate opens
    filler = threading.Thread(target=lambda: [writer.submit(seen.append, i) for i in range(6)])
    filler.start()
    filler.join(0.2)
    assert filler.is_alive()  # back-pressure: the submitter waits for room
    gate.set()
    filler.join(5)
    writer.close()
    assert seen == list(range(6))


def test_close_writes_what_is_pending_and_a_later_submit_starts_again() -> None:
    writer = StatusWriter()
    assert writer.flush()  # nothing started yet
    seen: list[str] = []
    writer.submit(seen.append, "a")
    writer.close()
    assert seen == ["a"]
    writer.submit(seen.append, "b")
    writer.close()
    assert seen == ["a", "b"]
