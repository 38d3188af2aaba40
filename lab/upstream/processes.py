"""The upstream lab's daemons: started detached, recorded, stopped by their record only.

Each process runs in its own session with stdout/stderr appended to ``<lab>/logs/<name>.log``.
Its pid and kernel start time (``/proc/<pid>/stat`` field 22) go to ``<lab>/procs.json``
the moment it starts; a recorded pid is ours only while its start time still matches, so
``down`` never signals a recycled pid.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)


def start_time(pid: int) -> int | None:
    """The kernel start time of a *running* ``pid``; None when it is gone or a zombie.

    A zombie has exited but keeps its /proc entry until its parent reaps it; when ``down``
    runs in another process than the one that started the lab (``dmn lab down`` from a
    test whose process is the parent), the lab's exited daemons stay zombies, and counting
    them alive made ``down`` wait out every stop timeout (about 25 s per process)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name may contain spaces and parentheses: fields start after the last ')'
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):  # zombie or dead: exited, only not yet reaped
        return None
    return int(fields[19])


@dataclass(frozen=True)
class ProcRecord:
    name: str
    pid: int
    started: int  # /proc/<pid>/stat start time, in clock ticks since boot
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] | None = None  # variables the lab set over the inherited ones

    def alive(self) -> bool:
        return start_time(self.pid) == self.started


class ProcessTable:
    """The record of the lab's processes (``procs.json``), in start order."""

    def __init__(self, lab_dir: Path) -> None:
        self.file = lab_dir / "procs.json"
        self.logs = lab_dir / "logs"

    def load(self) -> list[ProcRecord]:
        try:
            return [ProcRecord(**x) for x in json.loads(self.file.read_text())]
        except FileNotFoundError:
            return []

    def _save(self, records: list[ProcRecord]) -> None:
        tmp = self.file.with_name(self.file.name + ".tmp")
        tmp.write_text(json.dumps([asdict(r) for r in records], indent=1))
        os.replace(tmp, self.file)

    def get(self, name: str) -> ProcRecord | None:
        return next((r for r in self.load() if r.name == name), None)

    def start(
        self, name: str, argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> ProcRecord:
        self.logs.mkdir(parents=True, exist_ok=True)
        with (self.logs / f"{name}.log").open("ab") as out:
            child = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env={**os.environ, **env} if env else None,
                cwd=cwd,
            )
        started = start_time(child.pid)
        record = ProcRecord(name, child.pid, started if started is not None else -1, argv, env)
        records = [r for r in self.load() if r.name != name] + [record]
        self._save(records)
        log.info("event=process-started name=%s pid=%d", name, child.pid)
        return record

    def stop(self, name: str, timeout: float = 20.0) -> bool:
        """SIGTERM, then SIGKILL after ``timeout``; drops the record. True if it was alive."""
        record = self.get(name)
        if record is None:
            return False
        was_alive = record.alive()
        if was_alive:
            _terminate(record, timeout)
        self._save([r for r in self.load() if r.name != name])
        return was_alive

    def restart(self, name: str, timeout: float = 20.0) -> ProcRecord:
        """Stop the recorded process and start it again with the same command line."""
        record = self.get(name)
        if record is None:
            raise KeyError(name)
        self.stop(name, timeout)
        return self.start(name, record.argv, record.env)

    def stop_all(self, timeout: float = 20.0) -> None:
        for record in reversed(self.load()):
            self.stop(record.name, timeout)

    def tail(self, name: str, lines: int = 5) -> str:
        try:
            text = (self.logs / f"{name}.log").read_text(errors="replace").splitlines()
        except OSError:
            return "no log"
        return " | ".join(text[-lines:])


def _terminate(record: ProcRecord, timeout: float) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(record.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _reap(record.pid)
        if not record.alive():
            return
        time.sleep(0.1)
    log.warning("event=process-killed name=%s pid=%d", record.name, record.pid)
    with contextlib.suppress(ProcessLookupError):
        os.kill(record.pid, signal.SIGKILL)
    for _ in range(50):
        _reap(record.pid)
        if not record.alive():
            return
        time.sleep(0.1)


def _reap(pid: int) -> None:
    """Collect our own child's exit status (a zombie still has its start time)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)
