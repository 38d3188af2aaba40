"""``dmn controller`` as a process: leader election, reconcile, clean SIGTERM exit."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request

import pytest

from dmn.api.cluster import Cluster
from dmn.api.cluster import resources as r
from dmn.lab.apiserver import LabApiServer
from tests.controller.support import example, ready, topology_settled, wait_for

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _get(port: int, path: str) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
        body: str = response.read().decode()
        return body


def test_controller_process(lab: LabApiServer, cluster: Cluster) -> None:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    port = _free_port()
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
            "--health-address",
            "127.0.0.1",
            "--health-port",
            str(port),
            "--log-format",
            "json",
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
        assert (ready(done) or {}).get("status") == "True", done["status"]
        lease = cluster.get(r.LEASES, "dra-multi-network-controller", "default")
        assert lease["spec"]["holderIdentity"] == "proc-1"
        assert _get(port, "/readyz") == "[+]api-reachable ok\nok\n"
        assert _get(port, "/livez").endswith("ok\n")
        # the counter moves once the reconcile returns, just after its status write
        wait_for(
            lambda: 'dmn_reconciles_total{kind="topology",result="ok"}' in _get(port, "/metrics"),
            timeout=30,
            what="the topology reconcile counted",
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out.decode()[-2000:]
    lines = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
    assert any(line.get("logger") == "dmn.controller" for line in lines), out.decode()[-2000:]
    lease = cluster.get(r.LEASES, "dra-multi-network-controller", "default")
    assert lease["spec"]["holderIdentity"] == ""  # released on shutdown
