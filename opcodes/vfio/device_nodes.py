"""The VFIO nodes of a function, found and verified in the kernel.

Group backend: ``/dev/vfio/<group>`` (its ``major:minor`` must equal the kernel's
``/sys/class/vfio/<group>/dev``) plus the container node ``/dev/vfio/vfio`` (the misc device
``/sys/class/misc/vfio/dev``). cdev backend (kernels with ``CONFIG_VFIO_DEVICE_CDEV``, 6.6+):
the function's ``/dev/vfio/devices/vfioN`` (``<function>/vfio-dev/vfioN/dev``) plus
``/dev/iommu`` (``/sys/class/misc/iommu/dev``); without it the backend is refused
(``E_VFIO_CDEV_UNAVAILABLE``). Paths are built from kernel-given names under the node's roots,
never from config.
"""

from __future__ import annotations

import re
from pathlib import Path

from dmn.opcodes.executor import ExecutorError
from dmn.opcodes.granted_nodes import DeviceNode, verified
from dmn.opcodes.pci import function_sysfs as pci


def _kernel_dev(path: Path) -> tuple[int, int]:
    try:
        major, minor = path.read_text().strip().split(":")
        return int(major), int(minor)
    except (OSError, ValueError) as exc:
        raise ExecutorError("E_VFIO_NODE", f"the kernel lists no device at {path}") from exc


def _verified(dev_root: Path, relative: str, kernel: tuple[int, int]) -> DeviceNode:
    return verified(dev_root, relative, kernel, "E_VFIO_NODE")


def group_nodes(sysfs: Path, dev_root: Path, group: str) -> tuple[DeviceNode, ...]:
    if not group.isdigit():
        raise ExecutorError("E_VFIO_NODE", f"{group!r} is not an IOMMU group number")
    container = _verified(dev_root, "vfio/vfio", _kernel_dev(sysfs / "class/misc/vfio/dev"))
    node = _verified(dev_root, f"vfio/{group}", _kernel_dev(sysfs / "class/vfio" / group / "dev"))
    return (container, node)


def cdev_nodes(sysfs: Path, dev_root: Path, address: str) -> tuple[DeviceNode, ...]:
    folder = pci.function_dir(sysfs, address) / "vfio-dev"
    try:
        names = sorted(
            e.name
            for e in folder.iterdir()
            if re.fullmatch(r"vfio\d+", e.name) and (e / "dev").is_file()
        )
    except FileNotFoundError:
        names = []  # before 6.6 a vfio-dev/vfioN device exists, but without a character node
    if len(names) != 1:
        raise ExecutorError(
            "E_VFIO_CDEV_UNAVAILABLE",
            f"{address} has no VFIO device cdev (this kernel offers the group backend only)",
        )
    iommu = _verified(dev_root, "iommu", _kernel_dev(sysfs / "class/misc/iommu/dev"))
    device = _verified(dev_root, f"vfio/devices/{names[0]}", _kernel_dev(folder / names[0] / "dev"))
    return (iommu, device)
