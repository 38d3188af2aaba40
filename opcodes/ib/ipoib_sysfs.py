"""An IPoIB netdev as sysfs shows it, found by ifindex and written through its directory fd.

Kernel facts this module relies on (``drivers/infiniband/ulp/ipoib``, Linux 6.x):

* An IPoIB netdev has ``type`` 32 (ARPHRD_INFINIBAND) and a 20-byte hardware address:
  octet 0 carries flags (0x80, IPOIB_FLAGS_RC, is set when the device supports connected
  mode), octets 1-3 the QP number of the interface's own UD queue pair, octets 4-19 the port
  GID (8 bytes subnet prefix, 8 bytes interface id = the port GUID).
* ``ndo_set_mac_address`` (``ipoib_set_mac``) lets anyone with CAP_NET_ADMIN in the
  netdev's namespace rewrite the interface id, but ``ipoib_check_lladdr`` refuses any change
  to octets 0-11 (flags, QPN, subnet prefix). Those twelve octets are therefore kernel-set
  for the netdev's lifetime and tell two IPoIB netdevs of one port apart (a pkey child gets
  its own QP); the GUID octets are not proof. The permanent address (IFLA_PERM_ADDRESS,
  copied at registration) exists only in rtnetlink, not in sysfs.
* ``device`` links to the parent HCA function (``SET_NETDEV_DEV`` with the PCI device);
  ``dev_port`` is the HCA port number minus one (``dev_id`` repeats it for old userspace).
* ``mode`` (added by ``ipoib_cm_add_mode_attr``) reads ``datagram`` or ``connected``;
  writing one calls ``ipoib_set_mode``. The store returns success even when the kernel
  answered -EBUSY, so every write is read back. Switching to connected requires the RC flag
  (else -EINVAL) and sets the MTU to the connected-mode maximum (``ipoib_cm_max_mtu``,
  65520 without SRQ); switching to datagram lowers the MTU to ``min(mcast_mtu, mtu)``. A
  mode change therefore changes the MTU too, which is why the before-image records both.
* ``mtu`` writes go through ``dev_set_mtu`` → ``ipoib_change_mtu``, which refuses more than
  the connected maximum in connected mode and more than the IB link MTU minus the 4-byte
  encapsulation header in datagram mode.

Why a directory fd: names are tenant-writable; the netdev is found by the ``ifindex`` file
and its directory is opened once, then every read and write goes through that fd
(``openat``), so a rename between finding and writing cannot redirect a write to another
netdev (a kernfs directory fd stays attached to its node across a rename).
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dmn.opcodes.executor import ExecutorError

ARPHRD_INFINIBAND = 32
IPOIB_FLAGS_RC = 0x80
FIXED_OCTETS = 12
"""Flags, QPN and subnet prefix: the address octets ``ipoib_check_lladdr`` keeps fixed."""
MODES = ("datagram", "connected")
_PCI_ADDRESS = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


@dataclass(frozen=True, slots=True)
class IpoibPort:
    """What sysfs shows of one netdev; ``mode`` is "" when it has no ``mode`` attribute."""

    name: str
    ifindex: int
    type: int
    address: str
    mode: str
    mtu: int
    dev_port: int
    parent: str
    """The PCI address of the parent function; "" when ``device`` is missing or not PCI."""

    @property
    def fixed_address(self) -> str:
        return ":".join(self.address.split(":")[:FIXED_OCTETS])

    @property
    def guid(self) -> str:
        return ":".join(self.address.split(":")[FIXED_OCTETS:])

    @property
    def connected_supported(self) -> bool:
        first = self.address.split(":", 1)[0]
        return bool(first) and bool(int(first, 16) & IPOIB_FLAGS_RC)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "ifindex": self.ifindex,
            "type": self.type,
            "address": self.address,
            "mode": self.mode,
            "mtu": self.mtu,
            "devPort": self.dev_port,
            "parent": self.parent,
        }

    @classmethod
    def from_json(cls, data: Any) -> IpoibPort:
        return cls(
            name=str(data["name"]),
            ifindex=int(data["ifindex"]),
            type=int(data["type"]),
            address=str(data["address"]),
            mode=str(data["mode"]),
            mtu=int(data["mtu"]),
            dev_port=int(data["devPort"]),
            parent=str(data["parent"]),
        )


class PortDir:
    """One netdev's sysfs directory, held open by fd."""

    def __init__(self, fd: int, name: str) -> None:
        self.fd, self.name = fd, name

    def _read(self, attr: str, default: str | None = None) -> str:
        try:
            fd = os.open(attr, os.O_RDONLY | os.O_CLOEXEC, dir_fd=self.fd)
        except FileNotFoundError:
            if default is not None:
                return default
            raise
        try:
            return os.read(fd, 4096).decode("ascii", "replace").strip()
        finally:
            os.close(fd)

    def _parent(self) -> str:
        """The name of the directory ``device`` leads to (the kernel writes the link as
        ``../../../<bdf>``; a tree may write ``../..``): opened through the fd, named by
        the kernel's own ``/proc/self/fd`` link."""
        try:
            fd = os.open("device", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=self.fd)
        except OSError:
            return ""
        try:
            return os.path.basename(os.readlink(f"/proc/self/fd/{fd}"))
        finally:
            os.close(fd)

    def state(self) -> IpoibPort:
        parent = self._parent()
        try:
            return IpoibPort(
                name=self.name,
                ifindex=int(self._read("ifindex")),
                type=int(self._read("type")),
                address=self._read("address").lower(),
                mode=self._read("mode", default=""),
                mtu=int(self._read("mtu")),
                dev_port=int(self._read("dev_port", default="0"), 0),
                parent=parent if _PCI_ADDRESS.match(parent) else "",
            )
        except (OSError, ValueError) as exc:
            msg = f"{self.name}: unreadable netdev attribute: {exc}"
            raise ExecutorError("E_SYSFS", msg) from exc

    def write(self, attr: str, value: str) -> None:
        try:
            fd = os.open(attr, os.O_WRONLY | os.O_CLOEXEC, dir_fd=self.fd)
        except OSError as exc:
            raise ExecutorError("E_SYSFS_WRITE", f"{self.name}/{attr}: {exc.strerror}") from exc
        try:
            os.write(fd, f"{value}\n".encode())
        except OSError as exc:
            name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
            raise ExecutorError(
                "E_SYSFS_WRITE", f"{self.name}/{attr} <- {value}: {name} ({exc.strerror})"
            ) from exc
        finally:
            os.close(fd)


@contextmanager
def port_at(root: Path, ifindex: int) -> Iterator[PortDir | None]:
    """The netdev of ``root``'s namespace whose ``ifindex`` file holds ``ifindex``, opened;
    None when no netdev there has it. The index is read again through the opened fd, so
    the yielded directory is the netdev with that ifindex even if it was renamed meanwhile."""
    net = root / "class" / "net"
    try:
        names = sorted(os.listdir(net))
    except OSError as exc:
        raise ExecutorError("E_SYSFS", f"{net}: {exc.strerror}") from exc
    for name in names:
        try:
            fd = os.open(net / name, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            continue  # gone meanwhile, or a control file such as bonding_masters
        port = PortDir(fd, name)
        try:
            if int(port._read("ifindex", default="0")) == ifindex:
                yield port
                return
        except ValueError:
            pass
        finally:
            os.close(fd)
    yield None


def find_hardware(root: Path, parent: str, dev_port: int, fixed: str) -> list[int]:
    """The ifindexes of the netdevs in ``root``'s namespace with this parent function, port and
    kernel-fixed address octets (what an IPoIB netdev is known by after its namespace died
    and the kernel returned it to the host)."""
    out = []
    net = root / "class" / "net"
    for name in sorted(os.listdir(net)):
        try:
            fd = os.open(net / name, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            state = PortDir(fd, name).state()
        except ExecutorError:
            continue
        finally:
            os.close(fd)
        same_port = (state.parent, state.dev_port) == (parent, dev_port)
        if state.type == ARPHRD_INFINIBAND and same_port and state.fixed_address == fixed:
            out.append(state.ifindex)
    return out
