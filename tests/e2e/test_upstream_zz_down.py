"""Last of the node e2e modules (the name sorts last): ``dmn lab kubeconfig`` and ``dmn lab
down`` on the session's lab, and the host compared with how it was before ``up``.

Everything the ``test_upstream*`` modules did — Pods, restarts of the agent, containerd
and kubelet, a tenant's link tricks — happened on this one lab, so this comparison covers
all of it.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.e2e.conftest import Session, host_snapshot

pytestmark = [pytest.mark.e2e]


def test_down_leaves_the_host_as_before(upstream_session: Session) -> None:
    lab = upstream_session.lab
    state_dir = str(lab.layout.root.parent)
    kubeconfig = subprocess.run(
        [sys.executable, "-m", "dmn", "lab", "kubeconfig", "--state-dir", state_dir],
        capture_output=True,
        text=True,
    )
    assert kubeconfig.stdout.strip() == str(lab.admin_kubeconfig)
    down = subprocess.run(
        [sys.executable, "-m", "dmn", "lab", "down", "--state-dir", state_dir],
        capture_output=True,
        text=True,
    )
    assert down.returncode == 0, down.stderr
    assert not lab.layout.root.exists()
    assert not lab.running()
    assert host_snapshot() == upstream_session.before
