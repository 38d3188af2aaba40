"""Read PCI, net and RDMA facts from a sysfs tree rooted anywhere (design §5).

The root is injected: ``/sys`` on a node, a tree a test built elsewhere. Nothing here
mutates the tree, and every read that fails is reported as ``None`` (absent attribute) or
as an exception the scanner turns into an :class:`~dmn.agent.inventory.facts.Unknown` —
never as an invented default.

Joins go through the kernel's own links, never through names: a netdev belongs to the
PCI function that is the nearest PCI ancestor of its resolved ``device`` link (this also
covers virtio, where the netdev hangs below ``virtioN``), an RDMA device likewise, and
VF parentage comes from ``physfn``/``virtfnN``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from dmn.host.unknown import Unknown

BDF_RE = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
PCIE_ROOT_RE = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")
VIRTFN_RE = re.compile(r"^virtfn(\d+)$")

#: PCI Express extended capability ID of the Device Serial Number capability.
_DSN_CAP_ID = 0x0003
_EXT_CAP_START = 0x100


@dataclass(frozen=True, slots=True)
class RawFunction:
    """Facts of one PCI function exactly as sysfs states them."""

    address: str
    real_path: Path
    vendor: str
    device: str
    subsystem: str
    pci_class: str
    driver: str
    numa_node: int | None
    iommu_group: int | None
    sriov_total_vfs: int
    sriov_num_vfs: int
    virtfns: dict[int, str]
    physfn: str
    reset_methods: tuple[str, ...]
    serial: str
    vfio_cdevs: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RawNetdev:
    ifname: str
    pci_address: str  # "" when the netdev has no PCI ancestor
    type: int
    phys_port_name: str
    phys_switch_id: str
    dev_port: int
    address: str


@dataclass(frozen=True, slots=True)
class RawRdma:
    name: str
    pci_address: str
    link_layer: str
    node_guid: str
    char_devices: tuple[str, ...]


class SysfsTree:
    """Read-only view of a sysfs tree; ``root`` is the directory that plays ``/sys``."""

    def __init__(self, root: Path) -> None:
        self.root = root

    # -- primitive reads -------------------------------------------------------------

    @staticmethod
    def _read(path: Path) -> str | None:
        try:
            return path.read_text().strip()
        except OSError:
            return None

    @staticmethod
    def _link_name(path: Path) -> str:
        try:
            return os.path.basename(os.readlink(path))
        except OSError:
            return ""

    @staticmethod
    def _driver(real: Path) -> str:
        """The bound driver, ``""`` only when there is provably none (no ``driver`` link);
        any other failure raises, so an unreadable binding never reads as "unbound"."""
        try:
            return os.path.basename(os.readlink(real / "driver"))
        except FileNotFoundError:
            return ""

    def _int(self, path: Path) -> int | None:
        text = self._read(path)
        if text is None:
            return None
        try:
            return int(text, 0)
        except ValueError:
            return None

    # -- PCI -------------------------------------------------------------------------

    def pci_addresses(self) -> list[str]:
        base = self.root / "bus" / "pci" / "devices"
        try:
            names = os.listdir(base)
        except OSError:
            return []
        return sorted(n for n in names if BDF_RE.match(n))

    def function(self, address: str) -> RawFunction:
        """Read one function; raises ``OSError`` if the function itself vanished."""
        path = self.root / "bus" / "pci" / "devices" / address
        real = path.resolve(strict=True)
        virtfns: dict[int, str] = {}
        physfn = ""
        vfio: list[str] = []
        for entry in sorted(os.listdir(real)):
            m = VIRTFN_RE.match(entry)
            if m:
                virtfns[int(m.group(1))] = self._link_name(real / entry)
            elif entry == "physfn":
                physfn = self._link_name(real / entry)
            elif entry == "vfio-dev":
                vfio = sorted(os.listdir(real / entry))
        group = self._link_name(real / "iommu_group")
        numa = self._int(real / "numa_node")
        sub_v = self._read(real / "subsystem_vendor") or ""
        sub_d = self._read(real / "subsystem_device") or ""
        return RawFunction(
            address=address,
            real_path=real,
            vendor=self._read(real / "vendor") or "",
            device=self._read(real / "device") or "",
            subsystem=f"{sub_v}:{sub_d}" if sub_v or sub_d else "",
            pci_class=self._read(real / "class") or "",
            driver=self._driver(real),
            numa_node=numa if numa is not None and numa >= 0 else None,
            iommu_group=int(group) if group.isdigit() else None,
            sriov_total_vfs=self._int(real / "sriov_totalvfs") or 0,
            sriov_num_vfs=self._int(real / "sriov_numvfs") or 0,
            virtfns=virtfns,
            physfn=physfn,
            reset_methods=tuple((self._read(real / "reset_method") or "").split()),
            serial=self._serial(real / "config"),
            vfio_cdevs=tuple(vfio),
        )

    def _serial(self, config: Path) -> str:
        """The PCIe Device Serial Number from extended config space, or ``""``.

        Extended capabilities start at 0x100; each header is a little-endian dword of
        capability ID (16 bits), version (4) and next offset (12). The DSN capability
        carries the 64-bit serial in the two following dwords, low dword first.

        Only the chain's headers and the serial are read (``pread`` at each offset), not
        the whole 4 KiB: the kernel reads config space a dword at a time, and on a
        virtual machine each dword is a trap to the hypervisor — reading every function's
        whole space made it the largest part of an inventory rescan.
        """
        try:
            fd = os.open(config, os.O_RDONLY)
        except OSError:
            return ""
        try:
            offset = _EXT_CAP_START
            seen: set[int] = set()
            while 0x100 <= offset <= 0xFFF - 11 and offset not in seen:
                seen.add(offset)
                head = os.pread(fd, 4, offset)
                if len(head) < 4:
                    return ""
                header = int.from_bytes(head, "little")
                if header in (0, 0xFFFFFFFF):
                    return ""
                if header & 0xFFFF == _DSN_CAP_ID:
                    body = os.pread(fd, 8, offset + 4)
                    if len(body) < 8:
                        return ""
                    low = int.from_bytes(body[:4], "little")
                    high = int.from_bytes(body[4:], "little")
                    raw = ((high << 32) | low).to_bytes(8, "big")
                    return "-".join(f"{b:02x}" for b in raw)
                offset = (header >> 20) & 0xFFC
            return ""
        except OSError:
            return ""
        finally:
            os.close(fd)

    @staticmethod
    def pcie_root(real_path: Path) -> str:
        """The ``pci<domain>:<bus>`` component of a function's resolved path.

        This is the upstream ``resource.kubernetes.io/pcieRoot`` value: the kernel names
        the root bus directory ``pci%04x:%02x``.
        """
        for part in real_path.parts:
            if PCIE_ROOT_RE.match(part):
                return part
        return ""

    def iommu_group_members(self, group: int) -> list[str] | Unknown:
        """Members of an IOMMU group; Unknown if the group cannot be listed (an unreadable
        group must never read as "alone in its group")."""
        base = self.root / "kernel" / "iommu_groups" / str(group) / "devices"
        try:
            return sorted(n for n in os.listdir(base) if BDF_RE.match(n))
        except OSError as exc:
            return Unknown(f"iommu group {group}: {exc.strerror or exc}")

    # -- ancestry --------------------------------------------------------------------

    @staticmethod
    def _pci_ancestor(real: Path) -> str:
        for part in reversed(real.parts):
            if BDF_RE.match(part):
                return part
        return ""

    def _device_pci(self, class_entry: Path) -> str:
        try:
            real = (class_entry / "device").resolve(strict=True)
        except OSError:
            return ""
        return self._pci_ancestor(real)

    # -- net -------------------------------------------------------------------------

    def netdevs(self) -> list[RawNetdev]:
        base = self.root / "class" / "net"
        try:
            names = sorted(os.listdir(base))
        except OSError:
            return []
        out: list[RawNetdev] = []
        for name in names:
            entry = base / name
            if not entry.is_dir():  # e.g. bonding_masters, a control file beside the links
                continue
            out.append(
                RawNetdev(
                    ifname=name,
                    pci_address=self._device_pci(entry),
                    type=self._int(entry / "type") or 0,
                    phys_port_name=self._read(entry / "phys_port_name") or "",
                    phys_switch_id=self._read(entry / "phys_switch_id") or "",
                    dev_port=self._int(entry / "dev_port") or 0,
                    address=self._read(entry / "address") or "",
                )
            )
        return out

    # -- RDMA ------------------------------------------------------------------------

    def rdma_devices(self) -> list[RawRdma]:
        base = self.root / "class" / "infiniband"
        try:
            names = sorted(os.listdir(base))
        except OSError:
            return []
        chars = self._rdma_char_devices()
        out: list[RawRdma] = []
        for name in names:
            entry = base / name
            ports = entry / "ports"
            layer = ""
            try:
                first = sorted(os.listdir(ports), key=lambda p: int(p) if p.isdigit() else 0)
                if first:
                    layer = self._read(ports / first[0] / "link_layer") or ""
            except OSError:
                layer = ""
            out.append(
                RawRdma(
                    name=name,
                    pci_address=self._device_pci(entry),
                    link_layer=layer,
                    node_guid=self._read(entry / "node_guid") or "",
                    char_devices=tuple(sorted(chars.get(name, ()))),
                )
            )
        return out

    def _rdma_char_devices(self) -> dict[str, list[str]]:
        """Map ibdev name to its /dev/infiniband character devices via each ``ibdev`` file."""
        out: dict[str, list[str]] = {}
        for cls in ("infiniband_verbs", "infiniband_mad"):
            base = self.root / "class" / cls
            try:
                names = os.listdir(base)
            except OSError:
                continue
            for name in names:
                ibdev = self._read(base / name / "ibdev")
                if ibdev:
                    out.setdefault(ibdev, []).append(f"/dev/infiniband/{name}")
        return out
