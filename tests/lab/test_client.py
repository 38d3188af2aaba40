"""The client commands in-process against one lab control plane run by this module."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from dmn.lab import cli
from dmn.lab.cluster import LabCluster, LabError
from dmn.lab.state_dir import StateDir
from tests.lab.support import REPO


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StateDir]:
    state = StateDir(tmp_path_factory.mktemp("lab"))
    with LabCluster(state, resync=2.0):
        state.write_pid(os.getpid())  # this process runs the lab
        yield state
        state.clear_runtime(os.getpid())


def _run(capsys: pytest.CaptureFixture[str], lab: StateDir, *argv: str) -> tuple[int, str, str]:
    rc = cli.run([*argv, "--state-dir", str(lab.root)])
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def test_apply_directory_and_get(lab: StateDir, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = _run(capsys, lab, "apply", "-f", str(REPO / "examples" / "topologies"))
    assert rc == 0 and out.count(" applied") == len(
        list((REPO / "examples/topologies").glob("*.yaml"))
    )
    rc, out, _ = _run(capsys, lab, "get", "plugins", "-o", "name")
    assert rc == 0 and "macvlan-cni" in out.split()
    rc, out, _ = _run(capsys, lab, "get", "policies", "-o", "json")
    names = {p["metadata"]["name"] for p in json.loads(out)["items"]}
    assert names == {"lab-link-kernel", "lab-link-macvlan", "lab-link-ipvlan"}
    rc, out, _ = _run(capsys, lab, "get", "node", "lab-node", "-o", "yaml")
    assert rc == 0 and yaml.safe_load(out)["kind"] == "Node"


def test_apply_refused_by_the_api_server(
    lab: StateDir, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: networking.dra-multi-network.schseba.github.io/v1alpha1\n"
        "kind: NetworkTopology\nmetadata: {name: structurally-bad}\nspec: {steps: nope}\n"
    )
    rc, _, err = _run(capsys, lab, "apply", "-f", str(bad))
    assert rc == 1 and "error[E_INVALID]" in err and "spec.steps" in err


def test_apply_unknown_kind(
    lab: StateDir, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w}\n")
    rc, _, err = _run(capsys, lab, "apply", "-f", str(bad))
    assert rc == 1 and "error[E_UNKNOWN_KIND]" in err


def test_get_missing_object(lab: StateDir, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = _run(capsys, lab, "get", "topology", "no-such-topology")
    assert rc == 1 and "error[E_NOT_FOUND]" in err


def test_second_lab_on_a_busy_state_dir_is_refused(
    lab: StateDir, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, _, err = _run(capsys, lab, "up")
    assert rc == 2 and "error[E_LAB_RUNNING]" in err


def test_corrupt_state_file_is_a_start_error(tmp_path: Path) -> None:
    state = StateDir(tmp_path)
    state.apiserver_state.write_text("{not json")
    with pytest.raises(LabError) as info:
        LabCluster(state).start()
    assert info.value.code == "E_LAB_START" and "apiserver.json" in info.value.message
