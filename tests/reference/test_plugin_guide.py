"""docs/plugin-authors.md stays true: its manifests are the shipped ``examples/workloads``
files, its Operation example lints and compiles, and the commands it gives run clean."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "plugin-authors.md"
WORKLOADS = ROOT / "examples" / "workloads"


def _blocks() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for body in re.findall(r"```yaml\n(.*?)```", GUIDE.read_text(), re.S):
        docs.extend(d for d in yaml.safe_load_all(body) if d is not None)
    return docs


def _named(kind: str, name: str) -> dict[str, Any]:
    (doc,) = [d for d in _blocks() if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def _shipped(path: str) -> dict[str, Any]:
    return yaml.safe_load((WORKLOADS / path).read_text())  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("kind", "name", "path"),
    [
        ("NetworkPlugin", "macvlan-vepa", "10-plugin.yaml"),
        ("DeviceExposurePolicy", "links-as-vepa-macvlan", "20-policy.yaml"),
        ("NetworkTopology", "vepa-macvlan", "30-topology.yaml"),
        ("ResourceClaimTemplate", "vepa-macvlan", "40-claim-template.yaml"),
    ],
)
def test_the_guide_shows_the_shipped_manifests(kind: str, name: str, path: str) -> None:
    assert _named(kind, name) == _shipped(path)


def test_the_guides_pod_is_the_shipped_pod_without_lab_only_fields() -> None:
    shipped = _shipped("50-pod.yaml")
    shipped["spec"].pop("terminationGracePeriodSeconds")
    for container in shipped["spec"]["containers"]:
        container.pop("imagePullPolicy")
    assert _named("Pod", "vepa-a") == shipped


def _dmn(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dmn", *args], capture_output=True, text=True, check=False
    )


def test_the_operation_example_lints_and_composes_on_a_vf(tmp_path: Path) -> None:
    plugin = tmp_path / "tenant-vlan.yaml"
    plugin.write_text(yaml.safe_dump(_named("NetworkPlugin", "tenant-vlan")))
    lint = _dmn("lint", str(plugin))
    assert lint.returncode == 0, lint.stdout + lint.stderr
    topology = {
        "apiVersion": "networking.dra-multi-network.schseba.github.io/v1alpha1",
        "kind": "NetworkTopology",
        "metadata": {"name": "vf-tenant"},
        "spec": {
            "effectBudget": {
                "allow": ["linux/link-move/v1", "linux/link-configure/v1", "linux/create-vlan/v1"]
            },
            "steps": [
                {
                    "id": "vf",
                    "kind": "Allocation",
                    "pluginRef": {"name": "sriov-cni"},
                    "config": {"mode": "kernel", "ifName": "vf0", "mtu": 1500, "up": True},
                },
                {
                    "id": "tenant",
                    "kind": "Operation",
                    "pluginRef": {"name": "tenant-vlan"},
                    "inputs": {"parent": {"from": "vf.interface"}},
                    "config": {"ifName": "tenant7", "vlanId": 7},
                },
            ],
        },
    }
    path = tmp_path / "vf-tenant.yaml"
    path.write_text(yaml.safe_dump(topology))
    compiled = _dmn("compile", str(path), "--plugins", str(plugin))
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    explained = _dmn("explain", str(path), "--plugins", str(plugin))
    assert explained.returncode == 0, explained.stdout + explained.stderr
    assert "step tenant (tenant-vlan)" in explained.stdout
    assert "parameters: ifName='tenant7', mtu=1500, vlanId=7" in explained.stdout


def test_the_guides_commands_run_clean() -> None:
    plugin = str(WORKLOADS / "10-plugin.yaml")
    topology = str(WORKLOADS / "30-topology.yaml")
    assert _dmn("lint", plugin).returncode == 0
    explained = _dmn("explain", topology, "--plugins", plugin)
    assert explained.returncode == 0, explained.stdout + explained.stderr
    assert "config: ifName='net1', mtu=1400, mode='vepa', up=True" in explained.stdout
    compiled = _dmn("compile", topology, "--plugins", plugin)
    assert compiled.returncode == 0, compiled.stdout + compiled.stderr
    assert "kind: DeviceClass" in compiled.stdout
