"""A container-like process that opens a VFIO grant exactly as a runtime would hand it over.

Run as ``ip netns exec <sandbox> unshare --mount --propagation private <python> -m
tests.kernel_lab.vfio_probe <cdi-spec.json> <pci-address> <out.json> [--hold]`` inside the
kernel lab. In its own mount namespace it mounts an empty tmpfs on ``/dev`` and creates only the
``deviceNodes`` the CDI spec lists (what a runtime does with a CDI device or an NRI device
adjustment), then uses the real VFIO uAPI through them: the container's API version and type1
IOMMU, the group's viability, attaching the group to the container, getting the device fd of
the granted function and reading its vendor id from PCI config space through VFIO. Results go
to ``out.json``. With ``--hold`` it keeps everything open until stdin closes (a busy consumer).
With ``-`` as the PCI address (an RDMA grant) it only opens each granted node read-write.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import stat
import struct
import sys
from pathlib import Path
from typing import Any


def _io(nr: int) -> int:
    return (ord(";") << 8) | nr  # _IO(VFIO_TYPE, VFIO_BASE + n), VFIO_BASE = 100


VFIO_GET_API_VERSION = _io(100)
VFIO_CHECK_EXTENSION = _io(101)
VFIO_SET_IOMMU = _io(102)
VFIO_GROUP_GET_STATUS = _io(103)
VFIO_GROUP_SET_CONTAINER = _io(104)
VFIO_GROUP_GET_DEVICE_FD = _io(106)
VFIO_DEVICE_GET_INFO = _io(107)
VFIO_DEVICE_GET_REGION_INFO = _io(108)
VFIO_TYPE1_IOMMU = 1
VFIO_GROUP_FLAGS_VIABLE = 1
VFIO_DEVICE_FLAGS_PCI = 1 << 1
VFIO_PCI_CONFIG_REGION_INDEX = 7
MS_NOSUID = 2


def _mount_empty_dev() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(b"tmpfs", b"/dev", b"tmpfs", MS_NOSUID, b"mode=0755") != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount tmpfs on /dev: {os.strerror(err)}")


def _create_nodes(spec: dict[str, Any]) -> list[str]:
    made = []
    for device in spec["devices"]:
        for node in device["containerEdits"]["deviceNodes"]:
            path = Path(node["path"])
            path.parent.mkdir(parents=True, exist_ok=True)
            os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(node["major"], node["minor"]))
            made.append(str(path))
    return made


def probe(spec_path: Path, address: str, hold: bool) -> dict[str, Any]:
    spec = json.loads(spec_path.read_text())
    _mount_empty_dev()
    made = _create_nodes(spec)
    out: dict[str, Any] = {"nodes": made}
    out["dev"] = sorted(str(p) for p in Path("/dev").rglob("*") if not p.is_dir())
    group = next(p for p in made if Path(p).name.isdigit())
    container = os.open("/dev/vfio/vfio", os.O_RDWR)
    out["api"] = fcntl.ioctl(container, VFIO_GET_API_VERSION)
    out["type1"] = fcntl.ioctl(container, VFIO_CHECK_EXTENSION, VFIO_TYPE1_IOMMU)
    gfd = os.open(group, os.O_RDWR)
    status = bytearray(struct.pack("II", 8, 0))
    fcntl.ioctl(gfd, VFIO_GROUP_GET_STATUS, status, True)
    out["viable"] = bool(struct.unpack("II", status)[1] & VFIO_GROUP_FLAGS_VIABLE)
    fcntl.ioctl(gfd, VFIO_GROUP_SET_CONTAINER, bytearray(struct.pack("i", container)), True)
    fcntl.ioctl(container, VFIO_SET_IOMMU, VFIO_TYPE1_IOMMU)
    dfd = fcntl.ioctl(gfd, VFIO_GROUP_GET_DEVICE_FD, bytearray(address.encode() + b"\0"), True)
    info = bytearray(struct.pack("IIII", 16, 0, 0, 0))
    fcntl.ioctl(dfd, VFIO_DEVICE_GET_INFO, info, True)
    _, flags, regions, irqs = struct.unpack("IIII", info)
    out["device"] = {"pci": bool(flags & VFIO_DEVICE_FLAGS_PCI), "regions": regions, "irqs": irqs}
    region = bytearray(struct.pack("IIIIQQ", 32, 0, VFIO_PCI_CONFIG_REGION_INDEX, 0, 0, 0))
    fcntl.ioctl(dfd, VFIO_DEVICE_GET_REGION_INFO, region, True)
    offset = struct.unpack("IIIIQQ", region)[5]
    out["vendor"] = f"0x{struct.unpack('<H', os.pread(dfd, 2, offset))[0]:04x}"
    # a node the spec did not list does not exist here, whatever the host has
    out["other_group_visible"] = any(
        p.name.isdigit() and str(p) != group for p in Path("/dev/vfio").iterdir()
    )
    if hold:
        out["held"] = True
        fds = (container, gfd, dfd)
        return out | {"_fds": fds}
    for fd in (dfd, gfd, container):
        os.close(fd)
    return out


def open_only(spec_path: Path) -> dict[str, Any]:
    """Any grant (RDMA): create the spec's nodes in an empty /dev and open each read-write."""
    spec = json.loads(spec_path.read_text())
    _mount_empty_dev()
    made = _create_nodes(spec)
    opened = []
    for path in made:
        fd = os.open(path, os.O_RDWR)
        opened.append(path)
        os.close(fd)
    dev = sorted(str(p) for p in Path("/dev").rglob("*") if not p.is_dir())
    return {"nodes": made, "opened": opened, "dev": dev}


def main(argv: list[str]) -> int:
    spec, address, out_path = Path(argv[0]), argv[1], Path(argv[2])
    hold = "--hold" in argv[3:]
    result = open_only(spec) if address == "-" else probe(spec, address, hold)
    result.pop("_fds", None)
    tmp = out_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    os.replace(tmp, out_path)
    if hold:
        sys.stdin.read()  # the fds stay open until the test closes our stdin
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
