"""Contract and bound-program digests do not depend on the process: the same documents
and call give the same SHA-256 in interpreters with different hash seeds (which change
set and dict iteration order), so a node and the controller agree on a digest."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from .digests import digests

ROOT = Path(__file__).resolve().parents[2]


def _digests_in_subprocess(seed: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    done = subprocess.run(
        [sys.executable, "-m", "tests.programs.digests"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, str] = json.loads(done.stdout)
    return result


def test_digests_are_stable_across_processes_and_hash_seeds() -> None:
    here = digests()
    assert len(here) == 14 and all(v.startswith("sha256:") for v in here.values())
    assert len(set(here.values())) == len(here)
    assert _digests_in_subprocess("1") == here
    assert _digests_in_subprocess("2727") == here
