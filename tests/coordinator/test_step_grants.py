"""A bridge step's grants come from the policy that exposed the consumed device, and a step
whose program would name an ungranted alias or VLAN is refused before anything runs (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from dmn.agent.coordinator.step_grants import StepGrants, check_step, granting_roots
from dmn.agent.personas.model import Persona
from dmn.interpreter.loader import load_builtin_plugins
from dmn.opcodes.device_environment import BridgeGrant, OvsBridgeGrant

BRIDGE = BridgeGrant("tenant-br", "tenantbr0", frozenset({100, 200, 300}), "02:00:00:00:be:01")
OVS = OvsBridgeGrant("tenant-ovs", "brovs0", frozenset({100}))
WHERE = "revision.spec.normalizedSpec.steps[attach]"
PLUGINS = load_builtin_plugins()


def persona(
    bridges: tuple[BridgeGrant, ...] = (BRIDGE,), ovs: tuple[OvsBridgeGrant, ...] = (OVS,)
) -> Persona:
    return Persona(
        name="vf0-kernel",
        inventory_id="vf0",
        persona="kernel",
        plugin="sriov-cni",
        mode="kernel",
        link_type="ethernet",
        pci_address="0000:18:00.2",
        pf_pci_address="0000:18:00.0",
        rdma_capable=False,
        allocation_ready=True,
        policy="switchdev-vfs",
        policy_digest="sha256:0",
        allow_multiple_allocations=False,
        children=None,
        consumptions=(),
        grants=(),
        effect_permissions=(),
        bridge_grants=bridges,
        ovs_bridge_grants=ovs,
    )


def test_persona_keeps_its_bridge_grants_across_a_restart() -> None:
    p = persona()
    assert Persona.from_json(p.to_json()) == p
    legacy = {k: v for k, v in p.to_json().items() if "ridgeGrants" not in k}
    assert Persona.from_json(legacy).bridge_grants == ()  # records written before them


def test_granting_roots_follow_inputs_through_operations() -> None:
    steps: dict[str, Any] = {
        "vf": {"id": "vf"},
        "other": {"id": "other"},
        "attach": {"id": "attach", "inputs": {"representor": {"from": "vf.representor"}}},
        "later": {"id": "later", "inputs": {"representor": {"from": "attach.representor"}}},
        "both": {"id": "both", "inputs": {"m": [{"from": "vf.x"}, {"from": "other.x"}]}},
    }
    assert granting_roots("attach", steps, ["vf", "other"]) == ["vf"]
    assert granting_roots("later", steps, ["vf", "other"]) == ["vf"]
    assert sorted(granting_roots("both", steps, ["vf", "other"])) == ["other", "vf"]


def test_grants_are_what_every_feeding_persona_grants() -> None:
    narrower = BridgeGrant(BRIDGE.alias, BRIDGE.name, frozenset({100}), BRIDGE.mac)
    grants = StepGrants.of([persona(), persona(bridges=(narrower,), ovs=())])
    assert grants.bridges == {} and grants.ovs_bridges == {}
    assert StepGrants.of([persona()]).bridges == {"tenant-br": BRIDGE}
    assert StepGrants.of([]) == StepGrants()


def test_granted_bridge_steps_pass() -> None:
    grants = StepGrants.of([persona()])
    config = {"bridge": "tenant-br", "vlan": 100, "trunk": [200, 300], "mtu": 1450}
    assert check_step(PLUGINS["accelerated-bridge-cni"], config, grants, WHERE) is None
    ovs = {"bridge": "tenant-ovs", "vlan": 100, "mtu": 1450}
    assert check_step(PLUGINS["ovs-cni"], ovs, grants, WHERE) is None
    bond = {"ifName": "bond0", "mtu": 1500, "up": True, "mode": "active-backup"}
    assert check_step(PLUGINS["bond-cni"], bond, StepGrants(), WHERE) is None


@pytest.mark.parametrize(
    ("plugin", "config", "grants", "code", "field"),
    [
        (
            "accelerated-bridge-cni",
            {"bridge": "tenant-br", "vlan": 100, "mtu": 1450},
            StepGrants(),  # the policy grants no bridge at all
            "E_BRIDGE_GRANT",
            "bridge",
        ),
        (
            "accelerated-bridge-cni",
            # a bridge's netdev name is no alias: only the grant's alias resolves
            {"bridge": "tenantbr0", "vlan": 100, "mtu": 1450},
            None,
            "E_BRIDGE_GRANT",
            "bridge",
        ),
        (
            "accelerated-bridge-cni",
            {"bridge": "tenant-br", "vlan": 101, "mtu": 1450},
            None,
            "E_VLAN_DENIED",
            "vlan",
        ),
        (
            "accelerated-bridge-cni",
            {"bridge": "tenant-br", "vlan": 100, "trunk": [200, 4000], "mtu": 1450},
            None,
            "E_VLAN_DENIED",
            "trunk",
        ),
        (
            "ovs-cni",
            {"bridge": "tenant-br", "vlan": 100, "mtu": 1450},  # a Linux bridge's alias
            None,
            "E_OVS_BRIDGE_GRANT",
            "bridge",
        ),
        (
            "ovs-cni",
            {"bridge": "tenant-ovs", "vlan": 200, "mtu": 1450},
            None,
            "E_VLAN_DENIED",
            "vlan",
        ),
    ],
)
def test_ungranted_aliases_and_vlans_are_refused_at_the_config_field(
    plugin: str, config: dict[str, Any], grants: StepGrants | None, code: str, field: str
) -> None:
    problem = check_step(PLUGINS[plugin], config, grants or StepGrants.of([persona()]), WHERE)
    assert problem is not None and problem.code == code, problem
    assert problem.field == f"{WHERE}.config.{field}"
