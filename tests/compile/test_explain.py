"""``dmn explain``: the dry run binds each step's programs with the real binder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from dmn.cli.explain import run
from dmn.controller.compile.explain import explain_topology
from dmn.interpreter.loader import load_builtin_plugins

ROOT = Path(__file__).resolve().parents[2]
TOPOLOGIES = sorted((ROOT / "examples" / "topologies").glob("*.yaml"))


@pytest.mark.parametrize("path", TOPOLOGIES, ids=[p.name for p in TOPOLOGIES])
def test_every_example_explains(path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert run([str(path)]) == 0
    out = capsys.readouterr().out
    assert "connect — runs at Pod sandbox start" in out
    assert run([str(path), "--format", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["order"] and all(s["hooks"] for s in plan["steps"])


def test_bond_vlan_plan_in_order_with_bound_parameters_and_undo() -> None:
    doc = yaml.safe_load((ROOT / "examples/topologies/dual-vf-bond-vlan.yaml").read_text())
    plan = explain_topology(doc, load_builtin_plugins()).to_json()
    assert plan["order"] == ["left", "right", "uplink", "tenant"]
    assert plan["removalOrder"] == ["tenant", "uplink", "right", "left"]
    steps = {s["id"]: s for s in plan["steps"]}
    (connect,) = [h for h in steps["uplink"]["hooks"] if h["hook"] == "connect"]
    effects = connect["effects"]
    assert [e["id"] for e in effects] == ["create", "attach[0]", "attach[1]", "state"]
    assert effects[0]["kind"] == "linux/create-bond/v1"
    assert effects[0]["parameters"]["miimon"] == 100  # bound from config.monitorIntervalMs
    members = [i for e in effects[1:3] for i in e["inputs"] if i["port"] == "member"]
    assert [m["from"] for m in members] == [
        "step left output interface",
        "step right output interface",
    ]
    assert all(m["namespace"] == "pod" for m in members)
    assert connect["undo"] == {
        "hook": "remove",
        "order": ["state", "attach[1]", "attach[0]", "create"],
    }
    (left,) = [h for h in steps["left"]["hooks"] if h["hook"] == "connect"]
    move = left["effects"][0]
    assert move["kind"] == "linux/link-move/v1" and move["parameters"] == {"ifName": "vfleft"}
    assert move["inputs"][0]["namespace"] == "host"
    assert "back to the host namespace" in move["undo"]


def test_guards_follow_the_config() -> None:
    doc = yaml.safe_load((ROOT / "examples/topologies/vfio.yaml").read_text())
    plan = explain_topology(doc, load_builtin_plugins()).to_json()
    kinds = [e["kind"] for s in plan["steps"] for h in s["hooks"] for e in h["effects"]]
    assert "pci/driver-bind/v1" in kinds and "vfio/device-access/v1" in kinds
    assert "linux/link-move/v1" not in kinds


def test_a_topology_that_does_not_compile_prints_its_diagnostics(capsys) -> None:  # type: ignore[no-untyped-def]
    path = ROOT / "examples/negative/topologies/effect-denied.yaml"
    assert run([str(path)]) == 1
    assert "error[E_EFFECT_DENIED]" in capsys.readouterr().out
    assert run([str(ROOT / "no-such-file.yaml")]) == 2
    assert run(["--bogus"]) == 2
