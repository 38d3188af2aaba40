"""``json_logs.configure``'s writer thread, in real processes: the lines are the ones a
handler in the caller's thread wrote (text and JSON, ``extra=`` fields, exceptions, in
order); a thread that logs never waits for stderr, even when nobody reads it; ``flush``
puts what was logged before a line written directly; exit drains the queue."""

from __future__ import annotations

import json
import select
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = """
import logging, sys, threading
from dmn.observability import json_logs
json_logs.configure("INFO", sys.argv[1])
log = logging.getLogger("dmn.test")
args = ["a"]
log.info("event=first claim=%s", args)
args.append("changed later")  # the line keeps the value it was logged with
log.info("event=extra", extra={"pod": "p1"})
try:
    raise ValueError("boom")
except ValueError:
    log.exception("event=failed")
def many(n):
    for i in range(200):
        log.info("event=many thread=%d i=%d", n, i)
threads = [threading.Thread(target=many, args=(n,)) for n in range(3)]
for t in threads: t.start()
for t in threads: t.join()
log.debug("event=hidden")
json_logs.flush()
sys.stderr.write("LAST\\n")
"""


def _run(fmt: str) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, fmt], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stderr.splitlines()


def test_text_lines_in_order_with_their_values_and_flush_before_a_direct_line() -> None:
    lines = _run("text")
    assert lines[-1] == "LAST"  # flush wrote every queued line first
    assert "INFO dmn.test event=first claim=['a']" in lines[0]
    assert "event=failed" in lines[2] and any("ValueError: boom" in x for x in lines)
    many = [x for x in lines if "event=many" in x]
    assert len(many) == 600 and not any("event=hidden" in x for x in lines)
    for n in range(3):  # each thread's lines in its order
        mine = [x for x in many if f"thread={n} " in x]
        assert [int(x.rsplit("i=", 1)[1]) for x in mine] == list(range(200))


def test_json_lines_keep_extra_fields_and_the_exception() -> None:
    entries = [json.loads(x) for x in _run("json")[:-1]]
    assert entries[0]["msg"] == "event=first claim=['a']" and entries[0]["event"] == "first"
    assert entries[1]["pod"] == "p1"
    assert entries[2]["event"] == "failed" and "ValueError: boom" in entries[2]["exception"]
    assert "boom" not in entries[2]["msg"]


STUCK = """
import logging, sys
from dmn.observability import json_logs
json_logs.configure("INFO", "text")
log = logging.getLogger("dmn.test")
for i in range(3000):  # ~300 kB: several times a pipe's buffer
    log.info("event=line i=%d pad=%s", i, "x" * 80)
print("logged", flush=True)
sys.stdin.readline()
"""


def test_a_logging_thread_does_not_wait_for_a_stderr_nobody_reads() -> None:
    """On a node stderr is the runtime's log pipe; while its reader lags, a write blocks.
    The logging thread (an NRI hook's) carries on; the writer catches up once read."""
    proc = subprocess.Popen(
        [sys.executable, "-c", STUCK],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert proc.stdout is not None and proc.stdin is not None
        ready, _, _ = select.select([proc.stdout], [], [], 30)
        assert ready, "the logging thread blocked on stderr"  # unread all along
        assert proc.stdout.readline() == "logged\n"
        proc.stdin.write("\n")
        proc.stdin.flush()
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    lines = err.splitlines()
    assert len(lines) == 3000 and "i=2999 " in lines[-1]  # exit drained the queue
