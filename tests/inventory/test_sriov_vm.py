"""Inventory on a real kernel's sysfs with real SR-IOV VFs, an IOMMU and a real NIC driver.

This machine has no SR-IOV hardware, so the test boots the kernel lab's stock Debian kernel
(tests/kernel_lab/image.py, reused read-only) in its own qemu VM with a q35 machine, a VT-d
IOMMU, an NVMe controller with SR-IOV (the SR-IOV device QEMU 7.2 emulates) and an e1000e
NIC. Inside, ``sriov_vm/guest.py`` enables two VFs (one left unbound, one bound to vfio-pci),
enslaves the NIC to bond0 carrying the node IP and default route, and scans the real
``/sys`` with real rtnetlink. What this proves: PF/VF parentage and VF index, unbound and
vfio-pci bindings with their /dev/vfio group, IOMMU groups, the pcieRoot form and
netdev↔PCI joining as a real kernel lays them out, and the protection of a bond member.
What it does not: NIC-specific layouts (representors, RDMA, eswitch modes) — those stay
fixture-tested.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.kernel_lab.image import REPO_ROOT, ImageError, prepare

# Hard bounds so a wedged guest can never hang CI: qemu is killed after BOOT_TIMEOUT
# seconds (the guest normally finishes in ~20 s under TCG); pytest-timeout is the backstop
# for the whole module setup including a first-time kernel image preparation.
BOOT_TIMEOUT = 240
pytestmark = [pytest.mark.slow, pytest.mark.timeout(BOOT_TIMEOUT + 240)]

QEMU = "qemu-system-x86_64"
STAGE2 = Path(__file__).with_name("sriov_vm") / "stage2.sh"
SHARE = "security_model=none,multidevs=remap"


def boot(run_dir: Path) -> tuple[int, str]:
    image = prepare()
    # no_timer_check: see tests/kernel_lab/vm.py (VT-d interrupt remapping + a loaded TCG host
    # can fail the kernel's IO-APIC timer check and panic the boot)
    append = " ".join(
        (
            "console=ttyS0 quiet panic=-1 mitigations=off intel_iommu=on no_timer_check",
            f"lab.stage2={STAGE2}",
            f"lab.run={run_dir}",
            f"lab.modules={image.modules_dir}",
            f"lab.repo={REPO_ROOT}",
            f"lab.python={sys.executable}",
        )
    )
    command = [
        QEMU, "-accel", "tcg", "-M", "q35", "-cpu", "max", "-smp", "1", "-m", "768",
        "-nodefaults", "-nographic", "-serial", "stdio", "-no-reboot",
        "-kernel", str(image.vmlinux), "-initrd", str(image.initramfs), "-append", append,
        "-virtfs", f"local,path=/,mount_tag=hostroot,readonly=on,{SHARE}",
        "-virtfs", f"local,path={run_dir},mount_tag=labrun,{SHARE}",
        "-device", "isa-debug-exit,iobase=0xf4,iosize=0x04",
        "-device", "intel-iommu",
        "-device", "nvme-subsys,id=subsys0",
        "-device", "nvme,serial=dmn0001,subsys=subsys0,sriov_max_vfs=2,sriov_vq_flexible=4,"
                   "sriov_vi_flexible=2,max_ioqpairs=6,msix_qsize=4",
        # a NIC whose backend cannot reach anything: restrict=on isolates it completely
        "-netdev", "user,id=n0,restrict=on",
        "-device", "e1000e,netdev=n0",
    ]  # fmt: skip
    try:
        proc = subprocess.run(
            command, capture_output=True, text=True, timeout=BOOT_TIMEOUT, check=False
        )
    except subprocess.TimeoutExpired as exc:  # subprocess.run has killed qemu already
        raw = exc.stdout or b""
        output = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
        pytest.fail(f"SR-IOV VM did not finish within {BOOT_TIMEOUT}s:\n{output[-4000:]}")
    return proc.returncode, proc.stdout[-4000:]


@pytest.fixture(scope="module")
def vm() -> tuple[dict, dict]:  # type: ignore[type-arg]
    if shutil.which(QEMU) is None:
        pytest.skip("qemu-system-x86_64 is not installed")
    try:
        prepare()
    except ImageError as exc:
        pytest.skip(f"kernel lab image unavailable: {exc}")
    with tempfile.TemporaryDirectory(dir=REPO_ROOT / ".kernel-lab") as tmp:
        run_dir = Path(tmp)
        rc, console = boot(run_dir)
        # qemu exits with (status << 1) | 1 through isa-debug-exit: 1 means guest status 0
        assert rc == 1 and (run_dir / "inventory.json").is_file(), console
        return (
            json.loads((run_dir / "inventory.json").read_text()),
            json.loads((run_dir / "sysfs.json").read_text()),
        )


def test_real_vfs_have_parent_and_index(vm: tuple[dict, dict]) -> None:  # type: ignore[type-arg]
    inventory, raw = vm
    pfs = {bdf: f for bdf, f in raw["pci"].items() if f["virtfn"]}
    assert len(pfs) == 1
    ((pf, facts),) = pfs.items()
    vfs = {i["pciAddress"]: i for i in inventory["items"] if i["kind"] == "VF"}
    expected = {os.path.basename(target): int(name[6:]) for name, target in facts["virtfn"]}
    assert set(vfs) == set(expected) and len(vfs) == 2
    for bdf, item in vfs.items():
        assert item["pfPciAddress"] == pf
        assert item["vfIndex"] == expected[bdf]
        assert item["iommuGroup"] is not None
        assert item["pcieRoot"] == "pci0000:00"
    first, second = sorted(vfs)
    assert vfs[first]["binding"] == "unbound" and vfs[first]["driver"] == ""
    assert vfs[second]["binding"] == "vfio" and vfs[second]["driver"] == "vfio-pci"
    assert f"/dev/vfio/{vfs[second]['iommuGroup']}" in vfs[second]["vfioDevices"]


def test_real_nic_is_joined_and_protected(vm: tuple[dict, dict]) -> None:  # type: ignore[type-arg]
    inventory, raw = vm
    nic = raw["nic"]
    (item,) = [i for i in inventory["items"] if any(n["ifname"] == nic for n in i["netdevs"])]
    assert item["driver"] == "e1000e" and item["binding"] == "kernel"
    assert item["linkType"] == "ethernet"
    # the NIC is a member of bond0, which carries the node IP and the default route
    assert item["protected"] == ["member-of-protected"]
    assert inventory["defaultRouteInterfaces"] == ["bond0"]
    assert item["iommuGroup"] is not None  # VT-d puts every function in a group


def test_change_monitor_saw_the_vfs_and_the_bond(vm: tuple[dict, dict]) -> None:  # type: ignore[type-arg]
    _, raw = vm
    seen = ",".join(raw["watch"])
    assert "udev:pci:add" in seen  # kernel uevents for the new VF functions
    assert "rtnl:RTM_NEWLINK" in seen  # rtnetlink for bond0 and the enslaved NIC
