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

So each opcode's boundaries are killed in exactly one matrix, its owner in :data:`OWNERS`
(the matrix on the substrate made for that opcode; ``linux/link-move`` and
``linux/link-configure`` are owned by the host-kernel matrices, which run outside the VM),
and the operation's boundaries only on the host.

A kernel-lab matrix (a ``tests.kernel_lab`` owner) kills by default at one *slice* of its
owned points: of the owned points of each phase, in boundary order, those at positions
``slice, slice + SLICES, ...`` (at least one). The slice is the checkout's commit count modulo
:data:`SLICES` (``git rev-list --count HEAD``), so consecutive commits of one branch kill at
complementary halves and every owned point is killed within :data:`SLICES` consecutive runs;
a run on one commit always kills at the same points (a failure reproduces). The run's header
names its slice (:func:`describe`). ``DMN_CRASH_MATRIX`` chooses otherwise:

* ``owned``: every owned point of every matrix (one whole cycle of slices in one run);
* ``full``: every boundary of every matrix; run it when an executor or the runner changes;
* ``slice:N``: slice ``N`` (e.g. to repeat another commit's CI run).

Host matrices (other owners) always kill at every owned point. Each matrix still surveys its
complete boundary list with one uninterrupted run and asserts it, so a new boundary is seen
even where it is not killed.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import TypeVar

from dmn.engine.bound import BoundProgram

FULL_ENV = "DMN_CRASH_MATRIX"
SLICES = 2
ROTATED_PREFIX = "tests.kernel_lab."
_REPO = Path(__file__).resolve().parents[1]
T = TypeVar("T")

# opcode -> the test module whose matrix kills at that opcode's boundaries by default
OWNERS: Mapping[str, str] = {
    "linux/link-move/v1": "tests.kernel.test_program_crashes",
    "linux/link-configure/v1": "tests.kernel.test_program_crashes",
    "linux/host-link-state/v1": "tests.kernel.test_host_link_state",
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


@cache
def _commit_slice() -> int:
    """The checkout's commit count modulo :data:`SLICES` (0 without git history)."""
    try:
        proc = subprocess.run(
            ["git", "rev-list", "--count", "HEAD"],
            cwd=_REPO, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        return int(proc.stdout.strip()) % SLICES
    except (OSError, ValueError, subprocess.SubprocessError):
        return 0


def mode() -> str:
    """This run's choice, resolved: ``full``, ``owned`` or ``slice:N`` (the default slice
    computed from the checkout). The kernel lab hands it to the guest as it is, so the guest
    collects and kills exactly as the host chose."""
    value = os.environ.get(FULL_ENV, "")
    if value in ("full", "owned"):
        return value
    if value.startswith("slice:"):
        try:
            return f"slice:{int(value.removeprefix('slice:')) % SLICES}"
        except ValueError as exc:
            raise ValueError(f"{FULL_ENV}={value!r}: expected full, owned or slice:N") from exc
    if value:
        raise ValueError(f"{FULL_ENV}={value!r}: expected full, owned or slice:N")
    return f"slice:{_commit_slice()}"


def describe() -> str:
    """One line for the session header: which kernel-lab kill points this run takes."""
    chosen = mode()
    if chosen == "full":
        return f"crash matrices: every boundary ({FULL_ENV}=full)"
    if chosen == "owned":
        return f"crash matrices: every owned kill point ({FULL_ENV}=owned)"
    return (
        f"crash matrices: kernel-lab kill points of {chosen} of {SLICES} "
        f"({FULL_ENV}=owned for all owned points, =full for every boundary)"
    )


def rotated(items: Sequence[T], owner: str = ROTATED_PREFIX) -> list[T]:
    """This run's slice of ``items`` (kill points in order) for ``owner``: all of them
    unless ``owner`` is a kernel-lab module and the run takes one slice; never none of a
    non-empty list."""
    chosen = mode()
    if not owner.startswith(ROTATED_PREFIX) or not chosen.startswith("slice:"):
        return list(items)
    index = int(chosen.removeprefix("slice:"))
    picked = list(items[index::SLICES])
    if not picked and items:
        picked = [items[index % len(items)]]
    return picked


def effect_kinds(program: BoundProgram) -> dict[str, str]:
    """Effect id -> opcode, as the boundary names spell the id."""
    return {effect.id: effect.kind for effect in program.effects}


def crash_points(
    names: Sequence[str],
    kinds: Mapping[str, str],
    owner: str,
    keep: Callable[[str], bool] = lambda name: False,
) -> list[int]:
    """Indices into ``names`` (one uninterrupted run's boundaries, in order) to kill at.

    ``owner`` is the calling test module (``__name__``). An effect whose opcode has no owner
    is killed everywhere it appears (nothing else would prove it). A kernel-lab owner gets
    this run's slice of them (:func:`rotated`), plus every owned boundary ``keep`` names:
    those a test's own assertions need killed in every run.
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
    kept = {index for index in picked if keep(names[index])}
    return sorted(kept | set(rotated([i for i in picked if i not in kept], owner)))
