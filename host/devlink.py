"""The devlink generic-netlink requests the eswitch executor needs, in a given namespace.

A devlink instance lives in a network namespace (netdevsim puts it where its device was
created; ``devlink dev reload netns`` moves one), so the socket is created inside the host
namespace of the call (:func:`open_in`). Requests: resolve the ``devlink`` family id
(``CTRL_CMD_GETFAMILY``), read and set the eswitch mode (``DEVLINK_CMD_ESWITCH_GET``/``SET``,
only the mode attribute: inline mode and encapsulation are never written) and list the
instance's ports with their netdevs (``DEVLINK_CMD_PORT_GET`` dump). Numbers are the kernel's
uapi (``include/uapi/linux/devlink.h``, ``genetlink.h``).
"""

from __future__ import annotations

import errno
import re
import socket
from dataclasses import dataclass

from dmn.host.errors import HostError
from dmn.host.netlink_wire import (
    NETLINK_GENERIC,
    NetlinkFailure,
    as_int,
    as_text,
    genl_family,
    genl_header,
    text,
    transact,
    u16,
)
from dmn.host.netns import LinkEnvironment, netlink_sockets_in

CMD_PORT_GET, CMD_ESWITCH_GET, CMD_ESWITCH_SET = 5, 29, 30
ATTR_BUS_NAME, ATTR_DEV_NAME, ATTR_PORT_INDEX = 1, 2, 3
ATTR_PORT_NETDEV_IFINDEX, ATTR_PORT_NETDEV_NAME, ATTR_ESWITCH_MODE, ATTR_PORT_FLAVOUR = 6, 7, 25, 77
MODES = {"legacy": 0, "switchdev": 1}
FLAVOURS = {0: "physical", 1: "cpu", 2: "dsa", 3: "pcipf", 4: "pcivf", 5: "virtual", 7: "pcisf"}


@dataclass(frozen=True, slots=True)
class DevlinkPort:
    """One devlink port: the only authority for which representor belongs to which function.

    ``flavour`` follows devlink: ``physical`` (uplink), ``pcipf``, ``pcivf``, ``pcisf``.
    ``device`` is the devlink handle (``pci/0000:03:00.0``); ``controller`` is 0 for the local
    host, ``external`` marks a port of another host (SmartNIC/DPU case). The eswitch
    executor's dump fills index, flavour and netdev; the inventory's every field.
    """

    index: int
    flavour: str
    netdev_index: int | None = None
    netdev_name: str = ""
    device: str = ""
    controller: int = 0
    pfnum: int | None = None
    vfnum: int | None = None
    external: bool = False


class Devlink:
    """One generic netlink socket bound to the devlink family, in one namespace."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        family = genl_family(sock, "devlink", "E_DEVLINK")
        if family is None:
            raise HostError("E_DEVLINK", "the kernel has no devlink family")
        self._family = family

    @staticmethod
    def _genl(cmd: int) -> bytes:
        return genl_header(cmd)

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> Devlink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, cmd: int, attrs: bytes, dump: bool = False) -> list[dict[int, bytes]]:
        return transact(
            self._sock, self._family, self._genl(cmd) + attrs, dump=dump, code="E_DEVLINK",
            what=f"devlink command {cmd}", skip=4,
        )  # fmt: skip

    @staticmethod
    def _handle(bus: str, dev: str) -> bytes:
        return text(ATTR_BUS_NAME, bus) + text(ATTR_DEV_NAME, dev)

    def eswitch_mode(self, bus: str, dev: str) -> str:
        answers = self._request(CMD_ESWITCH_GET, self._handle(bus, dev))
        raw = answers[0].get(ATTR_ESWITCH_MODE) if answers else None
        if raw is None:
            raise HostError("E_DEVLINK", f"{bus}/{dev} reports no eswitch mode")
        value = as_int(raw)
        return next((k for k, v in MODES.items() if v == value), str(value))

    def set_eswitch_mode(self, bus: str, dev: str, mode: str) -> None:
        self._request(CMD_ESWITCH_SET, self._handle(bus, dev) + u16(ATTR_ESWITCH_MODE, MODES[mode]))

    def ports(self, bus: str, dev: str) -> list[DevlinkPort]:
        out: list[DevlinkPort] = []
        for a in self._request(CMD_PORT_GET, b"", dump=True):
            if (as_text(a.get(ATTR_BUS_NAME, b"")), as_text(a.get(ATTR_DEV_NAME, b""))) != (
                bus,
                dev,
            ):
                continue
            ifindex = a.get(ATTR_PORT_NETDEV_IFINDEX)
            out.append(
                DevlinkPort(
                    index=as_int(a.get(ATTR_PORT_INDEX, b"\0\0\0\0")),
                    flavour=FLAVOURS.get(as_int(a.get(ATTR_PORT_FLAVOUR, b"\0\0")), "other"),
                    netdev_index=as_int(ifindex) if ifindex is not None else None,
                    netdev_name=as_text(a.get(ATTR_PORT_NETDEV_NAME, b"")),
                )
            )
        return out


def open_in(netns_fd: int) -> Devlink:
    try:
        (fd,) = netlink_sockets_in(netns_fd, 1, NETLINK_GENERIC)
    except OSError as exc:
        raise NetlinkFailure("E_DEVLINK", exc.errno or 0, f"generic netlink: {exc}") from exc
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_GENERIC, fileno=fd)
    try:
        return Devlink(sock)
    except BaseException:
        sock.close()
        raise


DEVLINK_HANDLE = re.compile(r"^(pci|netdevsim)/([A-Za-z0-9:._-]{1,64})$")
"""A devlink instance handle as the inventory observes it (``pci/<address>``,
``netdevsim/<dev>``)."""
_QUIESCE_FLAVOURS = frozenset({"pcivf", "pcisf", "virtual"})
IFF_UP = 0x1


def eswitch_mode_of(dl: Devlink, bus: str, dev: str) -> str | None:
    """The eswitch mode, or None when the instance is gone (ENODEV/ENOENT)."""
    try:
        return dl.eswitch_mode(bus, dev)
    except NetlinkFailure as exc:
        if exc.errno in (errno.ENODEV, errno.ENOENT):
            return None
        if exc.errno == errno.EOPNOTSUPP:
            raise HostError("E_ESWITCH_UNSUPPORTED", f"{bus}/{dev} has no eswitch") from exc
        raise


def require_quiescent(env: LinkEnvironment, dl: Devlink, bus: str, dev: str) -> None:
    """Refuse (``E_RESET_DOMAIN_BUSY``) while any VF/SF/virtual port of the instance has its
    netdev administratively up: a mode change would reset that port's datapath."""
    ipr = env.rtnl(env.host)
    for port in dl.ports(bus, dev):
        if port.flavour not in _QUIESCE_FLAVOURS or port.netdev_index is None:
            continue
        links = ipr.link("get", index=port.netdev_index)
        if links and int(links[0]["flags"]) & IFF_UP:
            raise HostError(
                "E_RESET_DOMAIN_BUSY",
                f"{bus}/{dev} port {port.index} ({port.flavour}, {port.netdev_name}) is up: "
                "the eswitch is not drained",
            )


def undrained(env: LinkEnvironment, devlink: str) -> str:
    """Why the eswitch ``devlink`` (``pci/<address>``, ``netdevsim/<dev>``) is not drained in
    the kernel now (a VF/SF/virtual port's netdev is up), ``""`` when it is or the instance
    is gone. For a caller that must not start a transition — or a restore — the executor
    would refuse: a refused undo is left quarantined for inspection."""
    match = DEVLINK_HANDLE.fullmatch(devlink)
    if match is None:
        return f"{devlink!r} is not a devlink instance handle"
    bus, dev = match.group(1), match.group(2)
    with open_in(env.fd(env.host)) as dl:
        if eswitch_mode_of(dl, bus, dev) is None:
            return ""
        try:
            require_quiescent(env, dl, bus, dev)
        except HostError as exc:
            return str(exc)
    return ""
