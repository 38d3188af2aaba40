"""An administrator's EffectProgram plugin reaches the node only through the revision that
pinned it; the node rebuilds it, checks its digest and re-checks it with its own checker and
opcode registry before anything runs (issue 12.1)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from dmn.agent.coordinator import Refusal
from dmn.agent.coordinator.verify import pinned_effect_program, verify_operations
from dmn.controller.compile.compiler import compile_topology
from dmn.interpreter.lint import lint_paths
from dmn.interpreter.loader import load_builtin_plugins, load_plugins
from dmn.interpreter.pinned_plugins import plugin_from_pin, rebuild_pinned
from dmn.interpreter.source import load_yaml_documents
from dmn.opcodes.registry import default_registry

ROOT = Path(__file__).resolve().parents[2]
ADMIN = ROOT / "examples" / "plugins"
PLUGIN_DIR = ADMIN / "macvlan-modes" / "v1"


def _revision() -> dict[str, Any]:
    plugins = load_builtin_plugins()
    found, problems = load_plugins(str(PLUGIN_DIR))
    assert problems == []
    plugins.update(found)
    (doc,), problems = load_yaml_documents(
        (ADMIN / "macvlan-modes-topology.yaml").read_bytes(), "topology.yaml"
    )
    assert problems == []
    result = compile_topology(doc.data, plugins, default_registry(), uid="uid-1")
    assert result.compiled is not None, result.diagnostics
    return result.compiled.revision


def _pin(revision: dict[str, Any], name: str) -> dict[str, Any]:
    return next(p for p in revision["spec"]["plugins"] if p["name"] == name)


CONFIG = {"mode": "private", "ifName": "net1", "mtu": 1400, "up": True}


def test_the_revision_pins_the_admins_programs_and_the_node_rebuilds_them() -> None:
    pin = _pin(_revision(), "macvlan-modes")
    plugin, problems = plugin_from_pin(pin)
    assert problems == [] and plugin is not None
    assert plugin.contract_digest == pin["contractDigest"]
    assert set(plugin.programs) >= {"prepare", "connect"}
    checked = pinned_effect_program(pin, CONFIG, default_registry())
    assert checked is not None and checked.contract_digest == pin["contractDigest"]


def test_builtins_are_never_taken_from_a_revision() -> None:
    revision = _revision()
    revision["spec"]["plugins"].append(
        {
            "name": "macvlan-cni",
            "contractDigest": load_builtin_plugins()["macvlan-cni"].contract_digest,
            "descriptor": load_builtin_plugins()["macvlan-cni"].to_json(),
        }
    )
    assert pinned_effect_program(_pin(revision, "macvlan-cni"), CONFIG, default_registry()) is None


@pytest.mark.adversarial
def test_a_program_edited_after_pinning_is_refused_by_digest() -> None:
    pin = copy.deepcopy(_pin(_revision(), "macvlan-modes"))
    connect = pin["descriptor"]["programs"]["connect"]
    connect["effects"][0]["parameterBindings"].pop("mtu")
    with pytest.raises(Refusal) as info:
        pinned_effect_program(pin, CONFIG, default_registry())
    assert info.value.code == "E_CONTRACT_MISMATCH"


@pytest.mark.adversarial
def test_an_opcode_outside_the_grants_is_refused_on_the_node_with_lints_code(
    tmp_path: Path,
) -> None:
    """The controller bypassed: a revision written by hand whose pin is self-consistent
    (digest recomputed) but whose program runs an opcode the plugin does not allow."""
    pin = copy.deepcopy(_pin(_revision(), "macvlan-modes"))
    connect = pin["descriptor"]["programs"]["connect"]
    connect["effects"].append(
        {
            "id": "steal",
            "kind": "linux/link-move/v1",
            "inputs": {"interface": {"from": "call.prepared.parent"}},
        }
    )
    assert plugin_from_pin(pin)[1][0].code.value == "E_CONTRACT_MISMATCH"
    rebuilt, problems = rebuild_pinned(pin)
    assert problems == [] and rebuilt is not None
    forged = {**pin, "contractDigest": rebuilt.contract_digest}  # a consistent forgery
    with pytest.raises(Refusal) as info:
        pinned_effect_program(forged, CONFIG, default_registry())
    assert info.value.code == "E_EFFECT_DENIED"
    # `dmn lint` refuses the same plugin written out as a CR with that code (among the
    # others its full report lists; the node stops at the first)
    assert "E_EFFECT_DENIED" in _lint_codes_of(forged, tmp_path)


def _lint_codes_of(pin: dict[str, Any], tmp_path: Path) -> list[str]:
    descriptor = copy.deepcopy(pin["descriptor"]["descriptor"])
    descriptor["spec"]["hooks"] = {
        **descriptor["spec"].get("hooks", {}),
        **pin["descriptor"]["programs"],
    }
    cr = tmp_path / "forged.yaml"
    cr.write_text(json.dumps(descriptor))
    result = lint_paths([str(cr)])
    return sorted({d.code.value for d in result.diagnostics if d.severity.value == "error"})


# --- Operation steps: the same pin + node re-check path as the roots ----------------------

TUNE_DIR = ADMIN / "link-tune" / "v1"


def _tuned_revision() -> dict[str, Any]:
    plugins = load_builtin_plugins()
    for directory in (PLUGIN_DIR, TUNE_DIR):
        found, problems = load_plugins(str(directory))
        assert problems == []
        plugins.update(found)
    (doc,), problems = load_yaml_documents(
        (ADMIN / "link-tune-topology.yaml").read_bytes(), "topology.yaml"
    )
    assert problems == []
    result = compile_topology(doc.data, plugins, default_registry(), uid="uid-1")
    assert result.compiled is not None, result.diagnostics
    return result.compiled.revision


def test_an_admins_operation_step_runs_from_its_pin() -> None:
    revision = _tuned_revision()
    steps = verify_operations(revision, load_builtin_plugins(), default_registry())
    assert list(steps) == ["tune"]
    tune = steps["tune"]
    assert tune.plugin.name == "link-tune"
    assert tune.plugin.contract_digest == _pin(revision, "link-tune")["contractDigest"]
    assert tune.plugin.descriptor.spec.implementation.type == "EffectProgram"
    assert dict(tune.config) == {"mtu": 1300, "up": True}


def test_a_builtin_operation_step_runs_only_from_the_agents_copy() -> None:
    from tests.coordinator.test_operations import BOND_TOPOLOGY

    builtins = load_builtin_plugins()
    result = compile_topology(BOND_TOPOLOGY, builtins, default_registry(), uid="uid-1")
    assert result.compiled is not None, result.diagnostics
    revision = result.compiled.revision
    steps = verify_operations(revision, builtins, default_registry())
    assert steps["uplink"].plugin is builtins["bond-cni"]
    assert steps["tenant"].plugin is builtins["vlan-cni"]
    # a revision pinning another (self-consistent) vlan-cni contract finds no copy of it
    # here: refused, never run from the revision (builtins are not taken from pins)
    pin = _pin(revision, "vlan-cni")
    pin["descriptor"]["descriptor"]["spec"]["configSchema"]["properties"]["mtu"]["maximum"] = 1600
    rebuilt, problems = rebuild_pinned(pin)
    assert problems == [] and rebuilt is not None
    pin["contractDigest"] = rebuilt.contract_digest
    with pytest.raises(Refusal) as info:
        verify_operations(revision, builtins, default_registry())
    assert info.value.code == "E_PLUGIN_UNSUPPORTED"


@pytest.mark.adversarial
def test_an_operation_steps_program_outside_its_grants_is_refused_on_the_node() -> None:
    """The controller bypassed: the Operation plugin's pinned program, re-digested so the
    pin is self-consistent, moves the interface out (an opcode it does not allow)."""
    revision = _tuned_revision()
    pin = _pin(revision, "link-tune")
    pin["descriptor"]["programs"]["connect"]["effects"].append(
        {
            "id": "steal",
            "kind": "linux/link-move/v1",
            "inputs": {"interface": {"from": "effects.tune.interface"}},
        }
    )
    rebuilt, problems = rebuild_pinned(pin)
    assert problems == [] and rebuilt is not None
    pin["contractDigest"] = rebuilt.contract_digest
    with pytest.raises(Refusal) as info:
        verify_operations(revision, load_builtin_plugins(), default_registry())
    assert info.value.code == "E_EFFECT_DENIED"
    assert "link-tune" in info.value.message


@pytest.mark.adversarial
def test_an_operation_step_whose_plugin_is_not_pinned_is_refused() -> None:
    revision = _tuned_revision()
    revision["spec"]["plugins"] = [
        p for p in revision["spec"]["plugins"] if p["name"] != "link-tune"
    ]
    with pytest.raises(Refusal) as info:
        verify_operations(revision, load_builtin_plugins(), default_registry())
    assert info.value.code == "E_CONTRACT_MISMATCH"
