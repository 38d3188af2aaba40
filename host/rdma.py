"""A minimal RDMA netlink (``NETLINK_RDMA``, nldev client) speaker — no shell, no ``rdma`` tool.

pyroute2 has no RDMA family, and the requests the ``rdma/*`` executors need are few: list the
devices a namespace sees (``RDMA_NLDEV_CMD_GET`` dump), which netdevice each device's ports
are associated with (``RDMA_NLDEV_CMD_PORT_GET`` dump), read the netns mode
(``RDMA_NLDEV_CMD_SYS_GET``), move a device to a namespace (``RDMA_NLDEV_CMD_SET`` with
``RDMA_NLDEV_NET_NS_FD``) and ask which character device serves a device
(``RDMA_NLDEV_CMD_GET_CHARDEV``: uverbs, umad, rdma_cm). A socket answers for the namespace
it was created in, so :func:`open_in` creates it inside a namespace (the thread enters it only
for ``socket()``). Numbers are the kernel's uapi (``include/uapi/rdma/rdma_netlink.h``).
"""

from __future__ import annotations

import errno
import os
import socket
from dataclasses import dataclass
from typing import Any

from dmn.host.errors import HostError
from dmn.host.netlink_wire import NetlinkFailure, as_int, as_text, text, transact, u8, u32
from dmn.host.netns import netlink_sockets_in

NETLINK_RDMA = 20
RDMA_NL_NLDEV = 5
CMD_GET, CMD_SET, CMD_PORT_GET, CMD_SYS_GET, CMD_SYS_SET, CMD_GET_CHARDEV = 1, 2, 5, 6, 7, 15
ATTR_DEV_INDEX, ATTR_DEV_NAME, ATTR_PORT_INDEX, ATTR_NODE_GUID = 1, 2, 3, 6
ATTR_NDEV_INDEX, ATTR_NDEV_NAME = 50, 51
ATTR_SYS_NETNS_MODE, ATTR_NET_NS_FD = 66, 68
ATTR_CHARDEV_TYPE, ATTR_CHARDEV_NAME, ATTR_CHARDEV_ABI, ATTR_CHARDEV = 69, 70, 71, 72


@dataclass(frozen=True, slots=True)
class RdmaDev:
    index: int
    name: str
    node_guid: str
    """As sysfs prints it: four groups of four hex digits separated by colons."""


@dataclass(frozen=True, slots=True)
class RdmaPort:
    """One port of an RDMA device and the netdevice the kernel associates with it
    (``ib_device_get_netdev``: the RoCE/iWARP netdev, the IPoIB parent). ``netdev_index`` is
    0 when the port has none *in the asking namespace* — the kernel reports the netdev only
    to a socket of the namespace it lives in, so an ifindex here is one of that namespace."""

    device: RdmaDev
    port: int
    netdev_index: int
    netdev_name: str


def guid_text(value: int) -> str:
    raw = f"{value:016x}"
    return ":".join(raw[i : i + 4] for i in range(0, 16, 4))


class RdmaNetlink:
    """One NETLINK_RDMA socket; its answers are those of the namespace it was made in."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> RdmaNetlink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, cmd: int, attrs: bytes = b"", dump: bool = False) -> list[dict[int, bytes]]:
        """Send one request; the parsed attributes of every answer (an error raises
        :class:`RdmaError` carrying the errno)."""
        try:
            return transact(
                self._sock,
                (RDMA_NL_NLDEV << 10) + cmd,
                attrs,
                dump=dump,
                code="E_RDMA_NETLINK",
                what=f"RDMA netlink command {cmd}",
            )
        except NetlinkFailure as exc:
            raise RdmaError(exc.errno, str(exc)) from exc

    def devices(self) -> list[RdmaDev]:
        """Every RDMA device this namespace sees."""
        return [
            RdmaDev(
                as_int(a[ATTR_DEV_INDEX]),
                as_text(a.get(ATTR_DEV_NAME, b"")),
                guid_text(int.from_bytes(a.get(ATTR_NODE_GUID, b"\0" * 8), "little")),
            )
            for a in self.request(CMD_GET, dump=True)
            if ATTR_DEV_INDEX in a
        ]

    def ports(self, dev: RdmaDev) -> list[RdmaPort]:
        """Every port of ``dev`` with its associated netdevice (``PORT_GET`` dump of one
        device: the kernel dumps ports per device index)."""
        answers = self.request(CMD_PORT_GET, u32(ATTR_DEV_INDEX, dev.index), dump=True)
        return [
            RdmaPort(
                dev,
                as_int(a[ATTR_PORT_INDEX]),
                as_int(a[ATTR_NDEV_INDEX]) if ATTR_NDEV_INDEX in a else 0,
                as_text(a.get(ATTR_NDEV_NAME, b"")),
            )
            for a in answers
            if ATTR_PORT_INDEX in a
            and ATTR_DEV_INDEX in a
            and as_int(a[ATTR_DEV_INDEX]) == dev.index
        ]

    def netns_shared(self) -> bool:
        """Whether RDMA devices are shared by every namespace (the kernel's default mode)."""
        answer = self.request(CMD_SYS_GET)
        mode = answer[0].get(ATTR_SYS_NETNS_MODE) if answer else None
        if mode is None:
            raise RdmaError(errno.EPROTO, "RDMA netlink reported no netns mode")
        return bool(as_int(mode))

    def set_netns_shared(self, shared: bool) -> None:
        self.request(CMD_SYS_SET, u8(ATTR_SYS_NETNS_MODE, int(shared)))

    def move(self, index: int, netns_fd: int) -> None:
        """Move device ``index`` into the namespace ``netns_fd`` (exclusive mode only)."""
        self.request(CMD_SET, u32(ATTR_DEV_INDEX, index) + u32(ATTR_NET_NS_FD, netns_fd))

    def chardev(self, kind: str, index: int | None = None, port: int | None = None) -> Any:
        """``(major, minor, name)`` of the character device of ``kind`` serving device
        ``index`` (port ``port`` for umad; none for the global rdma_cm)."""
        attrs = text(ATTR_CHARDEV_TYPE, kind)
        if index is not None:
            attrs = u32(ATTR_DEV_INDEX, index) + attrs
        if port is not None:
            attrs += u32(ATTR_PORT_INDEX, port)
        answer = self.request(CMD_GET_CHARDEV, attrs)
        if not answer or ATTR_CHARDEV not in answer[0]:
            raise RdmaError(errno.ENOENT, f"no {kind} character device")
        dev = as_int(answer[0][ATTR_CHARDEV])
        return os.major(dev), os.minor(dev), as_text(answer[0].get(ATTR_CHARDEV_NAME, b""))


class RdmaError(HostError):
    """An RDMA netlink error; ``errno`` is the kernel's."""

    def __init__(self, err: int, message: str) -> None:
        super().__init__("E_RDMA_NETLINK", message)
        self.errno = err


def open_in(netns_fd: int) -> RdmaNetlink:
    """An RDMA netlink speaker for the namespace ``netns_fd``."""
    try:
        (fd,) = netlink_sockets_in(netns_fd, 1, NETLINK_RDMA)
    except OSError as exc:  # no RDMA core in this kernel (EPROTONOSUPPORT)
        raise RdmaError(exc.errno or 0, f"NETLINK_RDMA socket: {exc.strerror}") from exc
    return RdmaNetlink(socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_RDMA, fileno=fd))
