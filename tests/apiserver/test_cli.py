"""``python -m dmn.lab.apiserver`` serves until stopped."""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.request


def test_module_entry_point_serves_and_saves_state_on_sigterm(tmp_path) -> None:
    state = tmp_path / "state.json"
    proc = subprocess.Popen(
        [sys.executable, "-m", "dmn.lab.apiserver", "--port", "0", "--state", str(state)],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = None
        assert proc.stderr is not None
        for line in proc.stderr:
            match = re.search(r"url=(http://\S+)", line)
            if match:
                url = match.group(1)
                break
        assert url is not None
        with urllib.request.urlopen(url + "/version", timeout=60) as response:
            assert b"gitVersion" in response.read()
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    assert '"name":"kube-system"' in state.read_text()
