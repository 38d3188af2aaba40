"""``dmn inventory`` over a fixture tree: JSON out, reason-coded errors for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dmn.cli import dispatch
from tests.fixtures.sysfs_layouts import MLX_PF0, SysfsBuilder, add_connectx5_switchdev

POLICY = """
apiVersion: networking.dra-multi-network.schseba.github.io/v1alpha1
kind: DeviceExposurePolicy
metadata: {name: pf-kernel}
spec:
  selector: {kind: PF}
  exposure: {persona: kernel, plugin: host-cni, mode: kernel}
"""


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    b = SysfsBuilder(tmp_path / "sys")
    add_connectx5_switchdev(b, vfs_per_pf=1)
    return b.root


def test_inventory_preview_with_policy_and_slices(
    sysfs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text(POLICY)
    argv = ["--sysfs", str(sysfs), "--policy", str(policy), "--slices", "--node-name", "n1"]
    assert dispatch("inventory", argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert MLX_PF0 in {i["pciAddress"] for i in out["inventory"]["items"]}
    # the netdevs of a fixture tree are not in this machine's rtnetlink: unknown, not free
    assert out["personas"] == []
    assert {f["code"] for f in out["findings"]} == {"W_UNKNOWN_STATE"}
    assert out["slices"][0]["spec"]["pool"]["name"] == "n1"


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("spec: [unclosed", "E_SYNTAX"),
        (POLICY.replace("selector: {kind: PF}", "selector: {kind: Bond}"), "E_SCHEMA"),
    ],
)
def test_bad_policy_files_are_reason_coded(
    sysfs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, code: str
) -> None:
    policy = tmp_path / "bad.yaml"
    policy.write_text(text)
    assert dispatch("inventory", ["--sysfs", str(sysfs), "--policy", str(policy)]) == 2
    err = capsys.readouterr().err
    assert f"error[{code}]" in err and "Traceback" not in err


def test_missing_policy_file(sysfs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert dispatch("inventory", ["--sysfs", str(sysfs), "--policy", "/nonexistent.yaml"]) == 2
    assert "error[E_IO]" in capsys.readouterr().err
