"""Is a PCI function (its IOMMU group, its reset domain) quiet enough to rebind or reset?

Why these checks, before any write:

* a function whose netdevice is administratively up is in use by the host (or by a tenant it
  was handed to): unbinding or resetting it pulls the device from under that user;
* binding a function to ``vfio-pci`` adds it to its IOMMU group; if the group's device node is
  open, the process holding it could take the new function too. Every other function of the
  group must also be one the host does not drive (no driver, a VFIO driver, or a PCIe bridge
  on ``pcieport``), else the group is not viable and host DMA shares the domain;
* unbinding ``vfio-pci`` while a process holds the group node blocks in the kernel until the
  process closes it, so undo refuses instead of hanging the agent;
* a reset of one function may reset others (a bus reset resets the whole secondary bus).

Who holds a VFIO node is read from ``/proc/<pid>/fd``: a ``stat`` of each open descriptor
gives the character device it refers to, across mount namespaces (a container's ``/dev``).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from dmn.opcodes.executor import ExecutorError
from dmn.opcodes.granted_nodes import node_device
from dmn.opcodes.pci import function_sysfs as pci

VFIO_DRIVERS = frozenset({"vfio-pci", "pci-stub"})
"""Drivers under which the host does not use a function (the kernel's viable-group rule)."""
BRIDGE_CLASS_PREFIX = "0x0604"


def holders(proc_root: Path, devices: Iterable[int]) -> tuple[int, ...]:
    """Pids holding an open descriptor on any of the character devices ``devices``
    (``st_rdev`` values), sorted; processes that exit meanwhile are skipped."""
    wanted = set(devices)
    found: set[int] = set()
    if not wanted:
        return ()
    for entry in proc_root.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fds = list((entry / "fd").iterdir())
        except OSError:
            continue  # exited, or a kernel thread
        for fd in fds:
            try:
                st = os.stat(fd)
            except OSError:
                continue
            if stat.S_ISCHR(st.st_mode) and st.st_rdev in wanted:
                found.add(int(entry.name))
                break
    return tuple(sorted(found))


def group_node(dev_root: Path, group: str) -> Path:
    if not group.isdigit():
        raise ExecutorError("E_SYSFS", f"{group!r} is not an IOMMU group number")
    return dev_root / "vfio" / group


def require_netdevs_down(root: Path, address: str, code: str) -> None:
    """Refuse (``code``) when a netdevice of the function is administratively up."""
    up = [n for n in pci.netdevs(root, address) if pci.netdev_up(root, address, n)]
    if up:
        raise ExecutorError(code, f"{address} drives {', '.join(up)}, which is up: in use")


def require_group_viable(root: Path, address: str, group: str) -> None:
    """Every other function of the group is one the host does not drive."""
    for peer in pci.group_members(root, group):
        if peer == address:
            continue
        driver = pci.driver_of(root, peer)
        identity = pci.read_identity(root, peer)
        bridge = identity is not None and identity.pci_class.startswith(BRIDGE_CLASS_PREFIX)
        if driver is None or driver in VFIO_DRIVERS or (bridge and driver == "pcieport"):
            continue
        raise ExecutorError(
            "E_IOMMU_GROUP_BUSY",
            f"IOMMU group {group} of {address} also holds {peer}, bound to host driver {driver}",
        )


def require_group_closed(dev_root: Path, proc_root: Path, group: str, code: str) -> None:
    """Refuse (``code``) while any process holds the group's VFIO node open."""
    device = node_device(group_node(dev_root, group))
    pids = holders(proc_root, () if device is None else (device,))
    if pids:
        raise ExecutorError(
            code, f"VFIO group {group} is open (pids {', '.join(map(str, pids))}): not quiescent"
        )


def reset_domain(root: Path, address: str, bus_reset: bool) -> tuple[str, ...]:
    """The functions a reset of ``address`` resets: itself, or every function on its bus
    (the children of its parent device) when the reset is a bus reset."""
    if not bus_reset:
        return (address,)
    folder = pci.function_dir(root, address).resolve().parent
    return tuple(
        sorted(
            e.name
            for e in folder.iterdir()
            if e.is_dir() and (e / "config").exists() and e.name.count(":") == 2
        )
    )
