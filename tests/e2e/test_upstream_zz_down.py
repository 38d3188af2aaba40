"""Last of the node e2e modules (the name sorts last): ``dmn lab kubeconfig`` and ``dmn lab
down`` on the session's lab, and the host compared with how it was before ``up``.

Everything the ``test_upstream*`` modules did — Pods, restarts of the agent, containerd
and kubelet, a tenant's link tricks — happened on this one lab, so this comparison covers
all of it. On a Helm-installed lab (``DMN_E2E_INSTALL=helm``, after
``test_helm_install.py``) the release is uninstalled first and checked to leave nothing that
would block the API server.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from dmn.api.cluster import Cluster
from dmn.lab.upstream.cluster import UpstreamLab
from tests.e2e import installed_driver
from tests.e2e.conftest import Session, host_snapshot
from tests.e2e.test_helm_install import uninstall_leaves_nothing_that_blocks_the_api_server

pytestmark = [pytest.mark.e2e]

if installed_driver.HELM:

    def test_helm_uninstall_leaves_nothing_that_blocks_the_api_server(
        upstream_lab: UpstreamLab, admin: Cluster
    ) -> None:
        uninstall_leaves_nothing_that_blocks_the_api_server(upstream_lab, admin)


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
