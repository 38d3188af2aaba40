"""``dmn lab up/apply/get/down`` round trips through real subprocesses and the kubeconfig."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dmn.api.cluster import Cluster, connect
from dmn.api.cluster import resources as r
from dmn.controller.conditions import condition_true
from dmn.lab.state_dir import StateDir
from tests.lab.support import REPO, dmn_lab, ensure_stopped, no_traceback, ok
from tests.waiting import wait_for

EXAMPLE = REPO / "examples" / "topologies" / "host-device.yaml"


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "lab"
    yield root
    ensure_stopped(root)


def _wait_ready(state_dir: Path, name: str) -> dict[str, Any]:
    """Poll through the lab's kubeconfig until the topology is Ready=True (bounded)."""
    with Cluster(connect(kubeconfig=str(StateDir(state_dir).kubeconfig))) as cluster:

        def ready() -> dict[str, Any] | None:
            topo = cluster.get(r.NETWORK_TOPOLOGIES, name)
            return topo if condition_true(topo, "Ready") else None

        return wait_for(ready, what=f"topology {name} Ready")


def test_detached_round_trip_and_restart_keeps_state(state_dir: Path) -> None:
    up = dmn_lab("up", "--detach", "--state-dir", str(state_dir))
    ok(up)
    state = StateDir(state_dir)
    pid = state.running_pid()
    assert pid is not None and f"pid={pid}" in up.stdout
    assert state.kubeconfig.exists()

    # the kubeconfig works for the official client as-is
    with Cluster(connect(kubeconfig=str(state.kubeconfig))) as cluster:
        assert len(cluster.list(r.CUSTOM_RESOURCE_DEFINITIONS).items) == 7
        assert {p["metadata"]["name"] for p in cluster.list(r.NETWORK_PLUGINS).items} >= {
            "host-cni",
            "macvlan-cni",
        }

    again = dmn_lab("up", "--state-dir", str(state_dir))
    assert again.returncode == 2 and "E_LAB_RUNNING" in again.stderr

    applied = dmn_lab("apply", "-f", str(EXAMPLE), "--state-dir", str(state_dir))
    ok(applied)
    assert "NetworkTopology/host-device applied" in applied.stdout
    topo = _wait_ready(state_dir, "host-device")
    revision = topo["status"]["revision"]["name"]
    shown = dmn_lab("get", "topology", "host-device", "-o", "json", "--state-dir", str(state_dir))
    assert json.loads(shown.stdout)["status"]["revision"]["name"] == revision

    table = dmn_lab("get", "topologies", "--state-dir", str(state_dir))
    assert f"host-device  Ready=True  reason=RevisionReady  revision={revision}" in table.stdout
    classes = dmn_lab("get", "deviceclasses", "-o", "yaml", "--state-dir", str(state_dir))
    listed = yaml.safe_load(classes.stdout)
    assert listed["kind"] == "List"
    # the revision's class and the root's stable class that follows the newest revision
    assert sorted(c["metadata"]["name"] for c in listed["items"]) == sorted(
        [f"host-device-nic-{revision.rsplit('-', 1)[1]}", "host-device-nic"]
    )
    slices = dmn_lab("get", "slices", "-o", "name", "--state-dir", str(state_dir))
    assert slices.stdout.split() == ["lab-node-network-counters-0", "lab-node-network-devices-0"]

    down = dmn_lab("down", "--state-dir", str(state_dir))
    ok(down)
    assert state.running_pid() is None and not state.kubeconfig.exists()
    assert state.apiserver_state.exists()
    gone = dmn_lab("get", "topology", "--state-dir", str(state_dir))
    assert gone.returncode == 2 and "E_LAB_NOT_RUNNING" in gone.stderr

    # up again: the objects come back from the state dir and the controller picks them up
    ok(dmn_lab("up", "--detach", "--state-dir", str(state_dir)))
    topo = _wait_ready(state_dir, "host-device")
    assert topo["status"]["revision"]["name"] == revision
    ok(dmn_lab("down", "--state-dir", str(state_dir)))


def test_policy_change_republishes_slices(state_dir: Path, tmp_path: Path) -> None:
    ok(dmn_lab("up", "--detach", "--state-dir", str(state_dir)))
    kubeconfig = str(StateDir(state_dir).kubeconfig)
    with Cluster(connect(kubeconfig=kubeconfig)) as cluster:
        cluster.delete(r.DEVICE_EXPOSURE_POLICIES, "lab-link-ipvlan")

        def republished() -> dict[str, Any] | None:
            [devices] = [
                s for s in cluster.list(r.RESOURCE_SLICES).items if s["spec"].get("devices")
            ]
            return devices if len(devices["spec"]["devices"]) == 4 else None

        devices = wait_for(republished, what="slices without the ipvlan personas")
        assert len(devices["spec"]["devices"]) == 4  # 2 links x (kernel, macvlan)
        assert devices["spec"]["pool"]["generation"] == 2
    ok(dmn_lab("down", "--state-dir", str(state_dir)))


def test_foreground_up_stops_cleanly_on_sigterm(state_dir: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "dmn", "lab", "up", "--state-dir", str(state_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        state = StateDir(state_dir)

        def running() -> bool:
            assert proc.poll() is None, proc.communicate()
            return state.running_pid() == proc.pid

        wait_for(running, what="the lab to record its pid")
        os.kill(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "lab up url=http://127.0.0.1:" in out and out.rstrip().endswith("lab down")
    assert "Traceback" not in err
    assert not state.pid_file.exists() and state.apiserver_state.exists()


def test_no_traceback_on_foreground_interrupt(state_dir: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "dmn", "lab", "up", "--state-dir", str(state_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        wait_for(
            lambda: StateDir(state_dir).running_pid() == proc.pid,
            what="the lab to record its pid",
        )
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    result = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    no_traceback(result)
    assert proc.returncode == 0
