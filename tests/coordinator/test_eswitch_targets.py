"""ManageEswitch policies -> the agent's eswitch targets, on recorded inventories (pure).

The node VM has no PCI SR-IOV PF with an eswitch (netdevsim is not a PCI device), so which PF
a policy manages, its reset family and every refusal are checked here against the recorded
reference node; the transitions themselves run on netdevsim in the kernel lab
(``tests/kernel_lab/test_lab_devlink.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from dmn.agent.coordinator.eswitch_modes import (
    EswitchModes,
    eswitch_pass,
    eswitch_targets,
    pf_families,
)
from dmn.agent.coordinator.node_lock import NodeLock
from dmn.agent.coordinator.operations import NodeOperations, device_environment
from dmn.agent.inventory import Inventory, ScanConfig, scan
from dmn.agent.journal.store import JournalStore
from dmn.agent.personas.build import build_personas
from dmn.api.policy import DeviceExposurePolicy
from dmn.engine.runner import Runner
from dmn.host.pins import NamespacePins
from dmn.opcodes.executor_table import default_executors
from tests.fixtures.policies import policy
from tests.fixtures.sysfs_layouts import (
    IB_HCA,
    MGMT,
    MLX_PF0,
    X710_PF,
    build_reference_node,
)

PERMIT = ["devlink/eswitch-configure/v1"]


def manage(
    name: str, address: str, mode: str = "switchdev", **management: Any
) -> DeviceExposurePolicy:
    body = {
        "profile": "ethernet-pf-vfs-v1",
        "mode": mode,
        "allowedModes": ["legacy", "switchdev"],
        "effectPermissions": PERMIT,
        **management,
    }
    return DeviceExposurePolicy.model_validate(
        {
            "metadata": {"name": name},
            "spec": {
                "action": "ManageEswitch",
                "selector": {"pciAddresses": [address]},
                "management": body,
            },
        }
    )


@pytest.fixture(scope="module")
def inventory(tmp_path_factory: pytest.TempPathFactory) -> Inventory:
    node = build_reference_node(Path(tmp_path_factory.mktemp("eswitch")))
    return scan(
        ScanConfig(
            sysfs_root=node.sysfs,
            node_uid="node-1",
            links=node.links,
            devlink=node.devlink,
            node_ips=node.node_ips,
        )
    )


def test_a_manage_eswitch_policy_names_one_pf_and_its_vf_family(inventory: Inventory) -> None:
    (target,), findings = eswitch_targets(inventory, [manage("x710", X710_PF)], {})
    assert findings == []
    pf = inventory.by_pci(X710_PF)
    assert pf is not None and target.inventory_id == pf.inventory_id
    assert (target.devlink, target.mode) == (f"pci/{X710_PF}", "switchdev")
    vfs = {i.inventory_id for i in inventory.items.values() if i.pf_pci_address == X710_PF}
    assert len(vfs) == 4 and target.family == {pf.inventory_id, *vfs}
    assert pf_families(inventory)[pf.inventory_id] == target.family
    assert target.operation_id.startswith("eswitch-") and target.scope.startswith("eswitch/")


@pytest.mark.adversarial
def test_what_an_eswitch_policy_may_not_manage_is_a_finding(inventory: Inventory) -> None:
    cases = [
        manage("mgmt", MGMT),  # protected (the management NIC), and no SR-IOV
        manage("hca", IB_HCA),  # an RDMA HCA: outside the Ethernet profile
        manage("vf", "0000:3b:00.2"),  # a VF, not a PF
        manage("roce", MLX_PF0),  # a RoCE PF is a registered RDMA device as well
        manage("restore-not-allowed", X710_PF, allowedModes=["switchdev"]),  # legacy now
        manage("stay", X710_PF, mode="legacy"),  # already there: a target, a no-op run
    ]
    targets, findings = eswitch_targets(inventory, cases, {})
    assert [t.policy for t in targets] == ["stay"]
    assert sorted(f.policy for f in findings) == [
        "hca", "mgmt", "restore-not-allowed", "roce", "vf",
    ]  # fmt: skip
    assert all(f.code.value == "E_POLICY_INVALID" for f in findings)


@pytest.mark.adversarial
def test_the_policy_shape_refuses_loose_management() -> None:
    with pytest.raises(ValidationError):
        manage("typo", X710_PF, mode="switchdev2")
    with pytest.raises(ValidationError):
        manage("extra", X710_PF, command="devlink dev eswitch set")


def test_a_pending_transition_fences_the_family_from_new_allocations(
    inventory: Inventory,
) -> None:
    """While the PF is not in the mode its ManageEswitch policy asks, its VFs' personas stay
    published but not allocatable (W_PENDING_DRAIN): the drain the transition waits for can
    finish. In the asked mode already, nothing is fenced; other families never are."""
    vfs = policy(
        "x710-vfs",
        persona="kernel",
        plugin="sriov-cni",
        mode="kernel",
        selector={"kind": "VF", "pfPciAddresses": [X710_PF]},
    )
    others = policy(
        "mlx-vfs",
        persona="kernel",
        plugin="sriov-cni",
        mode="kernel",
        selector={"kind": "VF", "pfPciAddresses": [MLX_PF0]},
    )
    pending = build_personas(inventory, [vfs, others, manage("x710", X710_PF)], {})
    x710 = [p for p in pending.personas if p.policy == "x710-vfs"]
    assert x710 and not any(p.allocation_ready for p in x710)
    assert all(p.allocation_ready for p in pending.personas if p.policy == "mlx-vfs")
    fenced = {f.device for f in pending.findings if f.code.value == "W_PENDING_DRAIN"}
    assert fenced == {p.name for p in x710}
    settled = build_personas(inventory, [vfs, manage("x710", X710_PF, mode="legacy")], {})
    assert settled.personas and all(p.allocation_ready for p in settled.personas)


def test_the_agent_pass_drains_from_the_api_and_the_journal_before_the_kernel(
    inventory: Inventory, tmp_path: Path
) -> None:
    """The maintenance pass with the real journal, runner and executors: a Node that is not
    cordoned, or a VF of the family allocated by the API (device name -> inventory ID through
    the published personas) keeps it Busy (E_RESET_DOMAIN_BUSY) and nothing is recorded;
    without either the kernel is asked first and the pass reports why it could not (this
    host has no devlink family at all: E_DEVLINK; a node without that PF: E_DEVICE_GONE from
    the executor), with nothing written."""
    vfs = policy(
        "x710-vfs",
        persona="kernel",
        plugin="sriov-cni",
        mode="kernel",
        selector={"kind": "VF", "pfPciAddresses": [X710_PF]},
    )
    policies = [vfs, manage("x710", X710_PF)]
    personas = build_personas(inventory, policies, {})
    allocated = {personas.personas[0].name}
    pins = NamespacePins(tmp_path / "agent", host_netns="/proc/self/ns/net")
    journal = JournalStore.open(tmp_path / "agent")
    try:
        runner = Runner(
            journal,
            default_executors(),
            env_factory=lambda op: device_environment(pins, tmp_path / "cdi"),
        )
        ops = NodeOperations(runner, pins, tmp_path / "cdi")
        modes = EswitchModes(journal, ops, NodeLock(runner.lock, journal))
        (busy,) = eswitch_pass(modes, inventory, policies, {}, personas, set(), cordoned=False)
        assert (busy.state, busy.code) == ("Busy", "E_RESET_DOMAIN_BUSY"), busy
        assert "cordoned" in busy.message
        (busy,) = eswitch_pass(modes, inventory, policies, {}, personas, allocated, cordoned=True)
        assert (busy.state, busy.code) == ("Busy", "E_RESET_DOMAIN_BUSY"), busy
        assert journal.operations() == []
        (refused,) = eswitch_pass(modes, inventory, policies, {}, personas, set(), cordoned=True)
        assert refused.state == "Refused", refused
        assert refused.code in ("E_DEVLINK", "E_DEVICE_GONE"), refused
        assert all(op.state.value == "Undone" for op in journal.operations())
    finally:
        journal.close()
        pins.close()
