"""Kernel lab, guest side: run the requested tests with pytest inside the booted VM.

Started by ``guest_stage2.sh`` as ``python -m tests.kernel_lab.guest <run-dir>``. The run
directory is the host folder shared read-write; ``request.json`` names the node ids the host
selected. The harness plugin, seeing ``DMN_KERNEL_LAB_GUEST``, streams every serialised test
report into ``reports.jsonl`` there, which the host replays into its own session.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.crash_points import FULL_ENV

GUEST_ENV = "DMN_KERNEL_LAB_GUEST"
PROFILED_ENV = "DMN_KERNEL_LAB_PROFILED"


def _uptime() -> str:
    return Path("/proc/uptime").read_text().split()[0]


def _profiled(run_dir: Path, hz: int) -> int:
    """Run this module again under py-spy, every subprocess sampled too (crash children, agents,
    CLIs); the session's status is the inner run's ``guest_rc``, not py-spy's."""
    spy = Path(sys.executable).parent / "py-spy"
    if not spy.is_file():
        print(f"LAB-PROFILE-SKIPPED no {spy}", flush=True)
        return -1
    argv = [str(spy), "record", "--rate", str(hz), "--subprocesses", "--nonblocking",
            "--format", "raw", "--output", str(run_dir / "profile.txt"),
            "--", sys.executable, "-m", "tests.kernel_lab.guest", str(run_dir)]  # fmt: skip
    subprocess.run(argv, env={**os.environ, PROFILED_ENV: "1"}, check=False)
    try:
        return int((run_dir / "guest_rc").read_text())
    except (OSError, ValueError):
        return 1


def main(argv: list[str]) -> int:
    run_dir = Path(argv[0])
    request = json.loads((run_dir / "request.json").read_text())
    if request.get("profile_hz") and not os.environ.get(PROFILED_ENV):
        rc = _profiled(run_dir, int(request["profile_hz"]))
        if rc >= 0:
            return rc
    os.environ[GUEST_ENV] = str(run_dir)
    if request.get("crash_matrix"):
        os.environ[FULL_ENV] = str(request["crash_matrix"])
    import pytest  # imported after the environment is set: the plugin reads it at load time

    print(f"LAB-PYTEST-START uptime={_uptime()}", flush=True)
    args = [
        "-p",
        "no:cacheprovider",
        # no lab test uses hypothesis; its plugin imports it whole (about half a second on
        # the host, many times that under TCG)
        "-p",
        "no:hypothesispytest",
        "-o",
        f"timeout={int(request.get('per_test_timeout', 900))}",
        "-v",
        "-rA",
        *request["nodeids"],
    ]
    rc = int(pytest.main(args))
    print(f"LAB-PYTEST-END rc={rc} uptime={_uptime()}", flush=True)
    (run_dir / "guest_rc").write_text(f"{rc}\n")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
