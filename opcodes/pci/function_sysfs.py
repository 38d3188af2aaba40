"""Reading and writing one PCI function through sysfs (no shell, no path from config).

A function is named by its PCI address (``0000:01:00.0``), which the agent's inventory put in
the handle's ``pciAddress`` observation; it is checked against :data:`PCI_ADDRESS_PATTERN`
before it becomes part of any path, and every path starts at the environment's sysfs root.
:class:`FunctionIdentity` is what the kernel says the function *is* (vendor, device,
subsystem, class) — a tenant cannot write it — so a function replaced at the same address
(hot-unplug and replug of other hardware) is never mistaken for the recorded one.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from dmn.opcodes.executor import EffectContext, ExecutorError
from dmn.vocabulary.handles import Handle

PCI_ADDRESS_PATTERN = r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-1][0-9a-f]\.[0-7]$"
IFF_UP = 0x1


@dataclass(frozen=True, slots=True)
class FunctionIdentity:
    """The function at ``address`` as the kernel describes it."""

    address: str
    vendor: str
    device: str
    subsystem_vendor: str
    subsystem_device: str
    pci_class: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> FunctionIdentity:
        return cls(**{k: str(data[k]) for k in cls.__dataclass_fields__})


def devices_dir(root: Path) -> Path:
    return root / "bus/pci/devices"


def function_dir(root: Path, address: str) -> Path:
    """The function's sysfs directory; the address is validated first (never a free path)."""
    if not re.fullmatch(PCI_ADDRESS_PATTERN, address):
        raise ExecutorError("E_DEVICE_IDENTITY", f"{address!r} is not a PCI address")
    return devices_dir(root) / address


def handle_address(ctx: EffectContext, handle: Handle) -> str:
    """The handle's ``pciAddress`` observation (put there by the inventory, not by config)."""
    address = str(handle.observations.get("pciAddress", "") or "")
    if not re.fullmatch(PCI_ADDRESS_PATTERN, address):
        raise ExecutorError(
            "E_DEVICE_IDENTITY", f"handle {handle.id} observes no PCI address ({address!r})"
        )
    return address


def _read(path: Path) -> str:
    return path.read_text().strip()


def read_identity(root: Path, address: str) -> FunctionIdentity | None:
    """The function's identity, or None when no function is at ``address``."""
    folder = function_dir(root, address)
    try:
        return FunctionIdentity(
            address=address,
            vendor=_read(folder / "vendor"),
            device=_read(folder / "device"),
            subsystem_vendor=_read(folder / "subsystem_vendor"),
            subsystem_device=_read(folder / "subsystem_device"),
            pci_class=_read(folder / "class"),
        )
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ExecutorError("E_SYSFS", f"read {folder}: {exc.strerror}") from exc


def _link_name(path: Path) -> str | None:
    try:
        return os.path.basename(os.readlink(path))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ExecutorError("E_SYSFS", f"readlink {path}: {exc.strerror}") from exc


def driver_of(root: Path, address: str) -> str | None:
    """The bound driver's name, or None when the function is unbound."""
    return _link_name(function_dir(root, address) / "driver")


def driver_override(root: Path, address: str) -> str | None:
    """``driver_override`` (None when unset: the kernel prints ``(null)``)."""
    try:
        value = _read(function_dir(root, address) / "driver_override")
    except OSError as exc:
        raise ExecutorError("E_SYSFS", f"read driver_override of {address}: {exc}") from exc
    return None if value in ("", "(null)") else value


def iommu_group(root: Path, address: str) -> str | None:
    """The function's IOMMU group number, or None without an IOMMU."""
    return _link_name(function_dir(root, address) / "iommu_group")


def group_members(root: Path, group: str) -> tuple[str, ...]:
    """Every function in IOMMU group ``group`` (the kernel's list, sorted)."""
    if not group.isdigit():
        raise ExecutorError("E_SYSFS", f"{group!r} is not an IOMMU group number")
    folder = root / "kernel/iommu_groups" / group / "devices"
    try:
        return tuple(sorted(entry.name for entry in folder.iterdir()))
    except OSError as exc:
        raise ExecutorError("E_SYSFS", f"list {folder}: {exc.strerror}") from exc


def netdevs(root: Path, address: str) -> tuple[str, ...]:
    """The kernel netdevices this function drives (its ``net/`` folder), sorted."""
    folder = function_dir(root, address) / "net"
    try:
        return tuple(sorted(entry.name for entry in folder.iterdir()))
    except FileNotFoundError:
        return ()
    except OSError as exc:
        raise ExecutorError("E_SYSFS", f"list {folder}: {exc.strerror}") from exc


def netdev_up(root: Path, address: str, name: str) -> bool:
    """Whether the function's netdev ``name`` is administratively up (``IFF_UP``)."""
    path = function_dir(root, address) / "net" / name / "flags"
    try:
        return bool(int(_read(path), 16) & IFF_UP)
    except FileNotFoundError:
        return False
    except (OSError, ValueError) as exc:
        raise ExecutorError("E_SYSFS", f"read {path}: {exc}") from exc


def write_attribute(path: Path, value: str, codes: Mapping[int, str] | None = None) -> None:
    """One sysfs write (an attribute of a function or a driver); errors keep their errno in
    the message, and ``codes`` maps an errno the caller understands to its reason code."""
    try:
        with open(path, "w") as attr:
            attr.write(value)
    except OSError as exc:
        code = (codes or {}).get(exc.errno or 0, "E_SYSFS_WRITE")
        raise ExecutorError(code, f"write {value.strip()!r} to {path}: {exc}") from exc
