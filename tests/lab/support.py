"""Run ``dmn lab`` as users do: a subprocess of this interpreter, with bounded waits."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

from dmn.lab.state_dir import StateDir
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]


def dmn_lab(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dmn", "lab", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )


def ensure_stopped(state_dir: Path) -> None:
    """Stop a lab a failed test left running (by its own pid file only)."""
    pid = StateDir(state_dir).running_pid()
    if pid is None:
        return
    os.kill(pid, signal.SIGTERM)
    with contextlib.suppress(AssertionError):  # not stopped in time: killed below
        wait_for(
            lambda: StateDir(state_dir).running_pid() != pid,
            timeout=30,
            interval=0.1,
            what="the lab to stop",
        )
    if StateDir(state_dir).running_pid() == pid:
        os.kill(pid, signal.SIGKILL)


def no_traceback(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stderr, result.stderr
    assert "Traceback" not in result.stdout, result.stdout


def ok(result: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    """Assert exit 0, showing everything the command said when it did not."""
    assert result.returncode == 0, (result.args, result.returncode, result.stdout, result.stderr)
    return result
