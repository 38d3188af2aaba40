"""``dmn controller`` as a process: leader election, reconcile, clean SIGTERM exit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from dmn.api.cluster import Cluster
from dmn.api.cluster import resources as r
from dmn.lab.apiserver import LabApiServer
from tests.controller.support import example, topology_settled, wait_for

pytestmark = pytest.mark.slow


def test_controller_process(lab: LabApiServer, cluster: Cluster) -> None:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dmn",
            "controller",
            "--url",
            lab.url,
            "--lease-namespace",
            "default",
            "--identity",
            "proc-1",
            "--resync",
            "2",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        topo = example("shared-ipvlan")
        topo["metadata"]["name"] = "via-process"
        cluster.create(r.NETWORK_TOPOLOGIES, topo)
        done = wait_for(
            topology_settled(cluster, "via-process"), timeout=90, what="Ready via process"
        )
        assert done["status"]["conditions"][0]["status"] == "True"
        lease = cluster.get(r.LEASES, "dra-multi-network-controller", "default")
        assert lease["spec"]["holderIdentity"] == "proc-1"
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out.decode()[-2000:]
    lease = cluster.get(r.LEASES, "dra-multi-network-controller", "default")
    assert lease["spec"]["holderIdentity"] == ""  # released on shutdown
