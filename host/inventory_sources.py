"""Live kernel state behind small interfaces: links/routes, devlink and RDMA port netdevs.

The scanner never talks netlink itself; it asks a :class:`LinkSource`, a
:class:`DevlinkSource` and (optionally) an :class:`RdmaSource`. On a node these are the
pyroute2-backed classes and :class:`NetlinkRdma` below; fixture tests pass
:class:`RecordedLinks` / :class:`RecordedDevlink` / :class:`RecordedRdma` holding facts
recorded from real hardware. A source that cannot answer raises :class:`LiveQueryError`; the scanner
turns that into Unknown facts (never into "no default route" or "legacy mode").
"""

from __future__ import annotations

import errno
import logging
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from dmn.host.devlink import DevlinkPort
from dmn.host.rtnetlink.links import IFF_UP, Address, LinkState

T = TypeVar("T")

log = logging.getLogger(__name__)


class LiveQueryError(Exception):
    """A live query failed; the facts it would have produced are Unknown."""


class LinkSource(Protocol):
    def links(self) -> Sequence[LinkState]:
        """Every link of the host namespace with addresses filled in."""

    def default_route_ifindexes(self) -> frozenset[int]:
        """Interfaces that carry a default route (any family, any main/default table)."""


class DevlinkSource(Protocol):
    def eswitch_mode(self, pci_address: str) -> str | None:
        """``legacy`` or ``switchdev``; ``None`` when the device has no eswitch."""

    def ports(self) -> Sequence[DevlinkPort]:
        """Every devlink port with flavour and controller/pf/vf numbers."""


@dataclass(frozen=True, slots=True)
class RdmaPortNetdev:
    """The kernel's association of one RDMA device port with a host netdevice (by ifindex)."""

    rdma_device: str
    node_guid: str
    port: int
    ifindex: int


class RdmaSource(Protocol):
    def port_netdevs(self) -> Sequence[RdmaPortNetdev]:
        """Every RDMA port of the host namespace that the kernel associates with a netdev
        of that namespace; empty when the kernel has no RDMA core."""


@dataclass
class RecordedRdma:
    """RDMA port associations recorded from a real node; ``fail`` simulates a dump error."""

    ports: Sequence[RdmaPortNetdev] = ()
    fail: str = ""

    def port_netdevs(self) -> Sequence[RdmaPortNetdev]:
        if self.fail:
            raise LiveQueryError(self.fail)
        return self.ports


@dataclass
class RecordedLinks:
    """Link facts recorded from a real node (fixtures); ``fail`` simulates a dump error."""

    states: Sequence[LinkState] = ()
    default_routes: frozenset[int] = frozenset()
    fail: str = ""

    def links(self) -> Sequence[LinkState]:
        if self.fail:
            raise LiveQueryError(self.fail)
        return self.states

    def default_route_ifindexes(self) -> frozenset[int]:
        if self.fail:
            raise LiveQueryError(self.fail)
        return self.default_routes


@dataclass
class RecordedDevlink:
    """Devlink facts recorded from real hardware; a missing PCI address has no eswitch."""

    modes: Mapping[str, str] = field(default_factory=dict)
    port_list: Sequence[DevlinkPort] = ()
    fail: str = ""

    def eswitch_mode(self, pci_address: str) -> str | None:
        if self.fail:
            raise LiveQueryError(self.fail)
        return self.modes.get(pci_address)

    def ports(self) -> Sequence[DevlinkPort]:
        if self.fail:
            raise LiveQueryError(self.fail)
        return self.port_list


_MAIN_TABLE = 254


class Pyroute2Links:
    """Links and default routes of a network namespace through rtnetlink.

    ``netns`` names a namespace under /var/run/netns (the lab and tests use it); the
    default is the agent's own (host) namespace.
    """

    def __init__(self, netns: str | None = None) -> None:
        self.netns = netns

    def _dump(self, read: Callable[[Any], T]) -> T:
        """``read(ipr)`` on a fresh socket of the namespace. Each query dumps only what it
        reads: a scan calls :meth:`links` and :meth:`default_route_ifindexes` once each,
        and a route dump of a node with many Pods is as large as its link dump."""
        from pyroute2 import IPRoute

        kwargs = {"netns": self.netns} if self.netns else {}
        try:
            with IPRoute(**kwargs) as ipr:
                return read(ipr)
        except Exception as exc:  # any netlink failure makes the facts Unknown
            raise LiveQueryError(f"rtnetlink dump failed: {exc}") from exc

    def links(self) -> Sequence[LinkState]:
        links, addrs = self._dump(lambda ipr: (list(ipr.get_links()), list(ipr.get_addr())))
        by_index: dict[int, list[Address]] = {}
        for a in addrs:
            by_index.setdefault(a["index"], []).append(
                Address(int(a["family"]), str(a.get("IFA_ADDRESS")), int(a["prefixlen"]))
            )
        out: list[LinkState] = []
        for msg in links:
            info = msg.get("IFLA_LINKINFO")
            kind = (info.get("IFLA_INFO_KIND") if info else None) or ""
            index = int(msg["index"])
            netnsid = msg.get("IFLA_LINK_NETNSID")
            out.append(
                LinkState(
                    index=index,
                    name=str(msg.get("IFLA_IFNAME")),
                    mtu=int(msg.get("IFLA_MTU") or 0),
                    mac=str(msg.get("IFLA_ADDRESS") or ""),
                    up=bool(msg["flags"] & IFF_UP),
                    operstate=str(msg.get("IFLA_OPERSTATE") or "UNKNOWN"),
                    kind=str(kind),
                    master=int(msg.get("IFLA_MASTER") or 0),
                    lower=int(msg.get("IFLA_LINK") or 0),
                    link_netnsid=-1 if netnsid is None else int(netnsid),
                    perm_mac=str(msg.get("IFLA_PERM_ADDRESS") or ""),
                    addresses=tuple(sorted(by_index.get(index, ()), key=lambda a: a.cidr)),
                )
            )
        return out

    def default_route_ifindexes(self) -> frozenset[int]:
        routes = self._dump(lambda ipr: list(ipr.get_routes()))
        out: set[int] = set()
        for r in routes:
            if r["family"] not in (socket.AF_INET, socket.AF_INET6) or r["dst_len"] != 0:
                continue
            if (r.get("RTA_TABLE") or r.get("table")) not in (_MAIN_TABLE, None):
                continue
            oif = r.get("RTA_OIF")
            if oif:
                out.add(int(oif))
            for hop in r.get("RTA_MULTIPATH") or ():
                if hop.get("oif"):
                    out.add(int(hop["oif"]))
        return frozenset(out)


class Pyroute2Devlink:
    """Devlink eswitch modes and ports through the devlink generic-netlink family."""

    def _call(self, method: str, *args: Any) -> list[Any]:
        from pyroute2 import DL

        try:
            with DL() as dl:
                return list(getattr(dl, method)(*args))
        except Exception as exc:
            raise LiveQueryError(f"devlink {method} failed: {exc}") from exc

    def eswitch_mode(self, pci_address: str) -> str | None:
        from pyroute2 import DL
        from pyroute2.netlink import NLM_F_REQUEST
        from pyroute2.netlink.devlink import DEVLINK_NAMES, devlinkcmd

        msg = devlinkcmd()
        msg["cmd"] = DEVLINK_NAMES["DEVLINK_CMD_ESWITCH_GET"]
        msg["version"] = 1
        msg["attrs"] = [("DEVLINK_ATTR_BUS_NAME", "pci"), ("DEVLINK_ATTR_DEV_NAME", pci_address)]
        try:
            with DL() as dl:
                replies = list(dl.nlm_request(msg, msg_type=dl.prid, msg_flags=NLM_F_REQUEST))
        except Exception as exc:
            if getattr(exc, "code", None) == 95:  # EOPNOTSUPP: the device has no eswitch
                return None
            raise LiveQueryError(f"devlink eswitch get {pci_address} failed: {exc}") from exc
        for reply in replies:
            mode = reply.get("DEVLINK_ATTR_ESWITCH_MODE")
            if mode is not None:
                return "switchdev" if int(mode) == 1 else "legacy"
        return None

    def ports(self) -> Sequence[DevlinkPort]:
        out: list[DevlinkPort] = []
        for msg in self._call("port_list"):
            flavour = {0: "physical", 1: "cpu", 2: "dsa", 3: "pcipf", 4: "pcivf", 7: "pcisf"}
            out.append(
                DevlinkPort(
                    device=f"{msg.get('DEVLINK_ATTR_BUS_NAME')}/{msg.get('DEVLINK_ATTR_DEV_NAME')}",
                    index=int(msg.get("DEVLINK_ATTR_PORT_INDEX") or 0),
                    flavour=flavour.get(int(msg.get("DEVLINK_ATTR_PORT_FLAVOUR") or 0), "other"),
                    netdev_name=str(msg.get("DEVLINK_ATTR_PORT_NETDEV_NAME") or ""),
                    controller=int(msg.get("DEVLINK_ATTR_PORT_CONTROLLER_NUMBER") or 0),
                    pfnum=_opt_int(msg.get("DEVLINK_ATTR_PORT_PCI_PF_NUMBER")),
                    vfnum=_opt_int(msg.get("DEVLINK_ATTR_PORT_PCI_VF_NUMBER")),
                    external=bool(msg.get("DEVLINK_ATTR_PORT_EXTERNAL")),
                )
            )
        return out


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


class NetlinkRdma:
    """RDMA port associations through NETLINK_RDMA (a device dump, then each device's
    ports), asked in the host namespace: the kernel reports a port's netdev only to a socket
    of the namespace the netdev lives in, so every ifindex answered is a host ifindex.

    ``netns`` names a namespace under /var/run/netns (the lab and tests, like
    :class:`Pyroute2Links`); the default is the agent's own namespace."""

    def __init__(self, netns: str | None = None) -> None:
        self.netns = netns

    def port_netdevs(self) -> Sequence[RdmaPortNetdev]:
        from dmn.host.rdma import RdmaError, open_in

        path = f"/var/run/netns/{self.netns}" if self.netns else "/proc/self/ns/net"
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError as exc:
            raise LiveQueryError(f"RDMA netlink: open {path}: {exc.strerror}") from exc
        try:
            try:
                nl = open_in(fd)
            except RdmaError as exc:
                if exc.errno == errno.EPROTONOSUPPORT:  # no RDMA core: no RDMA devices
                    return []
                raise LiveQueryError(f"RDMA netlink: {exc}") from exc
            with nl:
                return [
                    RdmaPortNetdev(p.device.name, p.device.node_guid, p.port, p.netdev_index)
                    for dev in nl.devices()
                    for p in nl.ports(dev)
                    if p.netdev_index
                ]
        except RdmaError as exc:
            raise LiveQueryError(f"RDMA netlink port dump failed: {exc}") from exc
        finally:
            os.close(fd)
