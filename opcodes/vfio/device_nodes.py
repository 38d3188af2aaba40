"""The character device nodes a VFIO grant hands to a container, found and verified in the kernel.

Group backend: ``/dev/vfio/<group>`` (its ``major:minor`` must equal the kernel's
``/sys/class/vfio/<group>/dev``) plus the container node ``/dev/vfio/vfio`` (the misc device
``/sys/class/misc/vfio/dev``). cdev backend (kernels with ``CONFIG_VFIO_DEVICE_CDEV``, 6.6+):
the function's ``/dev/vfio/devices/vfioN`` (``<function>/vfio-dev/vfioN/dev``) plus
``/dev/iommu`` (``/sys/class/misc/iommu/dev``); without it the backend is refused
(``E_VFIO_CDEV_UNAVAILABLE``). Paths are built from kernel-given names under the node's roots,
never from config.

A grant is carried in the output handle as one ``deviceNodes`` observation,
``"<path> <major>:<minor>,..."`` — what the agent turns into NRI CreateContainer device
adjustments and the CDI spec's ``deviceNodes``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dmn.opcodes.executor import ExecutorError
from dmn.opcodes.pci import function_sysfs as pci
from dmn.opcodes.pci import quiescence

_NODE = re.compile(r"^(/dev/[A-Za-z0-9_./-]+) (\d+):(\d+)$")


@dataclass(frozen=True, slots=True)
class DeviceNode:
    path: str
    """Path inside the container (the same as on the node)."""
    major: int
    minor: int

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "major": self.major, "minor": self.minor}

    @classmethod
    def from_json(cls, data: Any) -> DeviceNode:
        return cls(str(data["path"]), int(data["major"]), int(data["minor"]))


def encode(nodes: tuple[DeviceNode, ...]) -> str:
    return ",".join(f"{n.path} {n.major}:{n.minor}" for n in nodes)


def decode(text: str) -> tuple[DeviceNode, ...]:
    """The nodes of a ``deviceNodes`` observation; malformed entries raise ``E_VFIO_NODE``."""
    out: list[DeviceNode] = []
    for entry in filter(None, text.split(",")):
        match = _NODE.fullmatch(entry)
        if match is None or ".." in match.group(1):
            raise ExecutorError("E_VFIO_NODE", f"malformed device node entry {entry!r}")
        out.append(DeviceNode(match.group(1), int(match.group(2)), int(match.group(3))))
    return tuple(out)


def _kernel_dev(path: Path) -> tuple[int, int]:
    try:
        major, minor = path.read_text().strip().split(":")
        return int(major), int(minor)
    except (OSError, ValueError) as exc:
        raise ExecutorError("E_VFIO_NODE", f"the kernel lists no device at {path}") from exc


def _verified(dev_root: Path, relative: str, kernel: tuple[int, int]) -> DeviceNode:
    """The node ``dev_root/relative`` exists, is a character device, and is the kernel's."""
    path = dev_root / relative
    rdev = quiescence.node_device(path)
    if rdev is None:
        raise ExecutorError("E_VFIO_NODE", f"{path} is missing or not a character device")
    if (os.major(rdev), os.minor(rdev)) != kernel:
        raise ExecutorError(
            "E_VFIO_NODE",
            f"{path} is {os.major(rdev)}:{os.minor(rdev)}, the kernel's is {kernel[0]}:{kernel[1]}",
        )
    return DeviceNode("/dev/" + relative, *kernel)


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
