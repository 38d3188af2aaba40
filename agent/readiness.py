"""Node agent readiness: what the DaemonSet's readiness probe asks (``dmn node-ready``).

Why a file and a command, not an HTTP port: the agent runs in the host network, so any
port it opens is a port on the node; kubelet can run an exec probe inside the container
instead. The running agent re-evaluates three facts every few seconds and writes them,
synced, to ``<state-dir>/readiness.json`` (temp file + fsync + rename):

* ``kubeletRegistered`` — kubelet called NotifyRegistrationStatus with success on our
  registration socket (cleared again when kubelet reports a failure);
* ``nriConnected`` — the NRI plugin is registered with the runtime and its first
  Synchronize completed (cleared when the runtime connection drops);
* ``journalWritable`` — the journal is open in this process and answers a read, and the
  state directory (where the journal lives) accepted this synced write.

``dmn node-ready`` exits 0 only if the file is fresh (written less than ``--max-age``
seconds ago: a dead or hung agent stops refreshing it, and a write that fails leaves it
stale) and all three facts are true; otherwise it prints one reason-coded line and exits
1. It imports nothing heavy, so a probe costs one small Python start.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

log = logging.getLogger(__name__)

FILE_NAME = "readiness.json"
DEFAULT_STATE_DIR = "/var/lib/dra-multi-network"
DEFAULT_INTERVAL = 5.0
DEFAULT_MAX_AGE = 30.0


@dataclass(frozen=True)
class Readiness:
    """The three facts; field names are the JSON keys of the readiness file."""

    kubeletRegistered: bool
    nriConnected: bool
    journalWritable: bool

    @property
    def ready(self) -> bool:
        return self.kubeletRegistered and self.nriConnected and self.journalWritable

    def missing(self) -> list[str]:
        return [name for name, ok in asdict(self).items() if not ok]


def write(state_dir: Path, facts: Readiness, now: float | None = None) -> None:
    """Write ``facts`` durably; raises OSError if the state directory refuses the write."""
    target = state_dir / FILE_NAME
    tmp = state_dir / f".{FILE_NAME}.tmp"
    body = json.dumps({**asdict(facts), "ready": facts.ready, "writtenAt": now or time.time()})
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, body.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, target)


def check(state_dir: Path, max_age: float, now: float | None = None) -> tuple[bool, str]:
    """(ready, reason) as the probe reports it; the reason names the first failing fact."""
    path = state_dir / FILE_NAME
    try:
        doc = json.loads(path.read_text())
        written = float(doc["writtenAt"])
        facts = Readiness(
            bool(doc["kubeletRegistered"]), bool(doc["nriConnected"]), bool(doc["journalWritable"])
        )
    except FileNotFoundError:
        return False, f"E_AGENT_NOT_READY: {path} does not exist (agent not started yet)"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return False, f"E_AGENT_NOT_READY: {path} is unreadable: {exc}"
    age = (now or time.time()) - written
    if age > max_age:
        return False, f"E_READINESS_STALE: {path} is {age:.0f}s old (max {max_age:.0f}s)"
    if not facts.ready:
        return False, f"E_AGENT_NOT_READY: not yet {', '.join(facts.missing())}"
    return True, "ready"


class ReadinessReporter:
    """Re-evaluates ``probe`` every ``interval`` seconds and writes the result (a thread)."""

    def __init__(
        self, state_dir: Path, probe: Callable[[], Readiness], interval: float = DEFAULT_INTERVAL
    ) -> None:
        self.state_dir = state_dir
        self.probe = probe
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="readiness", daemon=True)
        self.last: Readiness | None = None

    def start(self) -> ReadinessReporter:
        self._thread.start()
        return self

    def report_once(self) -> Readiness:
        try:
            facts = self.probe()
        except Exception as exc:  # a probe must never kill the reporter
            log.warning("event=readiness-probe-failed error=%s", exc)
            facts = Readiness(False, False, False)
        try:
            write(self.state_dir, facts)
        except OSError as exc:  # the file goes stale: the probe reports the agent not ready
            log.warning("event=readiness-write-failed dir=%s error=%s", self.state_dir, exc)
            facts = Readiness(facts.kubeletRegistered, facts.nriConnected, False)
        if facts != self.last:
            log.info("event=readiness ready=%s missing=%s", facts.ready, ",".join(facts.missing()))
        self.last = facts
        return facts

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.report_once()
            self._stop.wait(self.interval)

    def stop(self) -> None:
        """Stop reporting and withdraw the file, so a stopped agent is never reported ready."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.interval + 5)
        try:
            (self.state_dir / FILE_NAME).unlink(missing_ok=True)
        except OSError as exc:
            log.warning("event=readiness-withdraw-failed error=%s", exc)
