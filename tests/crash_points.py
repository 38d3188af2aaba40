"""Which journal boundaries a kernel-lab crash matrix kills at.

Every SIGKILL under qemu's TCG costs seconds (a fresh child, recovery and cleanup in the
parent, the world read back), and the kernel-lab matrices together were over half of the
VM's half-hour in CI. Most of their kill points repeat what another matrix already proves:

* the operation's own boundaries (``before-intent``, ``after-intent``, ``before-completed``,
  ``after-completed``, ``after-compensated``) are the runner's logic, the same for every
  executor; ``tests/journal`` and the host-kernel matrices (``tests/kernel/
  test_program_crashes.py``, ``tests/coordinator/test_crash.py``) kill at every one of them;
* an effect's boundaries (``after-before-image:``, ``after-apply:``, ``after-outcome:``,
  ``after-undoing:``, ``after-undo:``) exercise its executor's capture/observe/undo/recover,
  which is the same code in every program that uses the opcode.

So by default each opcode's boundaries are killed in exactly one matrix, its owner in
:data:`OWNERS` (the matrix on the substrate made for that opcode; ``linux/link-move`` and
``linux/link-configure`` are owned by the host-kernel matrices, which run outside the VM),
and the operation's boundaries only on the host. ``DMN_CRASH_MATRIX=full`` kills at every
boundary of every matrix, as before; run it when an executor or the runner changes.

Each matrix still surveys its complete boundary list with one uninterrupted run and asserts
it, so a new boundary is seen even where it is not killed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from dmn.engine.bound import BoundProgram

FULL_ENV = "DMN_CRASH_MATRIX"

# opcode -> the test module whose matrix kills at that opcode's boundaries by default
OWNERS: Mapping[str, str] = {
    "linux/link-move/v1": "tests.kernel.test_program_crashes",
    "linux/link-configure/v1": "tests.kernel.test_program_crashes",
    "linux/create-macvlan/v1": "tests.journal.test_kernel_crash",  # a test plugin's line
    "linux/create-macvlan/v2": "tests.kernel.test_program_crashes",
    "linux/create-ipvlan/v1": "tests.kernel_lab.test_lab_program_crashes",  # a test plugin's
    "linux/create-ipvlan/v2": "tests.kernel_lab.test_lab_program_crashes",
    "linux/create-bond/v1": "tests.kernel_lab.test_lab_programs",
    "linux/attach-master/v1": "tests.kernel_lab.test_lab_programs",
    "linux/create-vlan/v1": "tests.kernel_lab.test_lab_programs",
    "representor/configure/v1": "tests.kernel_lab.test_lab_switchdev",
    "sriov/vf-configure/v1": "tests.kernel_lab.test_lab_sriov",
    "bridge/port-attach/v1": "tests.kernel_lab.test_lab_bridge",
    "bridge/port-vlan/v1": "tests.kernel_lab.test_lab_bridge",
    "bridge/shared-uplink-vlan/v1": "tests.kernel_lab.test_lab_shared_uplink",
    "ovs/port-attach/v1": "tests.kernel_lab.test_lab_ovs",
    "pci/driver-bind/v1": "tests.kernel_lab.test_lab_pci",
    "vfio/device-access/v1": "tests.kernel_lab.test_lab_pci",
    "pci/function-reset/v1": "tests.kernel_lab.test_lab_pci",
    "rdma/netns-assign/v1": "tests.kernel_lab.test_lab_rdma",
    "rdma/device-access/v1": "tests.kernel_lab.test_lab_rdma",
    "devlink/eswitch-configure/v1": "tests.kernel_lab.test_lab_devlink",
    "ib/port-configure/v1": "tests.kernel.test_ib_programs",
    "sysctl/interface/v1": "tests.kernel.test_program_crashes",  # a test plugin's line
    "ethtool/features/v1": "tests.kernel.test_program_crashes",
    "ip/addresses/v1": "tests.kernel.test_program_crashes",
    "ip/routes/v1": "tests.kernel.test_program_crashes",
    "ip/neighbours/v1": "tests.kernel.test_program_crashes",
    "ip/rules/v1": "tests.kernel.test_program_crashes",
    "ip/pool-addresses/v1": "tests.kernel.test_ip_pool_crashes",
    "ip/carried-host-config/v1": "tests.kernel.test_program_crashes",
    # API effects: the whole agent killed on the lab node (their world is the API server)
    "multus/shadow-nad/v1": "tests.coordinator.test_multus_crash",  # one executor class with
    "multus/shadow-nad-shared/v1": "tests.coordinator.test_multus_crash",  # this one
    "multus/pod-selection/v1": "tests.coordinator.test_multus_crash",
    "multus/binding-ready/v1": "tests.coordinator.test_multus_crash",
}  # share/hold-parent has none: macvlan (host) and ipvlan (lab) shares differ in the kernel


def full_matrix() -> bool:
    return os.environ.get(FULL_ENV, "") == "full"


def effect_kinds(program: BoundProgram) -> dict[str, str]:
    """Effect id -> opcode, as the boundary names spell the id."""
    return {effect.id: effect.kind for effect in program.effects}


def crash_points(names: Sequence[str], kinds: Mapping[str, str], owner: str) -> list[int]:
    """Indices into ``names`` (one uninterrupted run's boundaries, in order) to kill at.

    ``owner`` is the calling test module (``__name__``). An effect whose opcode has no owner
    is killed everywhere it appears (nothing else would prove it).
    """
    if full_matrix():
        return list(range(len(names)))
    picked = []
    for index, name in enumerate(names):
        _, _, effect = name.partition(":")
        if not effect:
            continue  # the operation's own boundary
        kind = kinds.get(effect)
        if kind is None:
            raise AssertionError(f"boundary {name!r} names no effect of the program")
        if OWNERS.get(kind, owner) == owner:
            picked.append(index)
    return picked
