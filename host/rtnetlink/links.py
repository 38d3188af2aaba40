"""Reading links back from rtnetlink: snapshots, lookups by identity, ownership checks.

Executors decide from what the kernel says now, never from a remembered name or ifindex
alone. A :class:`LinkState` is the JSON-able snapshot that goes into before-images; the
lookups here prefer proof of identity (ownership alias, ifindex together with MAC) over a
name, and callers decide what a match authorises.
"""

from __future__ import annotations

import secrets
import socket
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from pyroute2.netlink.exceptions import NetlinkError

from dmn.host.errors import HostError
from dmn.host.rtnetlink.link_reader import LinkReader
from dmn.host.rtnetlink.link_writer import encode

IFF_UP = 0x1
NONCE_PREFIX = "dmn"


@dataclass(frozen=True, slots=True)
class Address:
    family: int
    address: str
    prefixlen: int

    @property
    def cidr(self) -> str:
        """``address/prefixlen``."""
        return f"{self.address}/{self.prefixlen}"

    @classmethod
    def from_cidr(cls, cidr: str) -> Address:
        address, _, prefixlen = cidr.partition("/")
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        return cls(int(family), address, int(prefixlen))


@dataclass(frozen=True, slots=True)
class LinkState:
    """One kernel link as read back: the fields executors record and restore, and the facts
    the inventory judges a link by. The one model of a link (0 stands for "none" in
    ``lower``/``master``, "" for an absent text attribute)."""

    index: int
    name: str
    alias: str = ""
    mtu: int = 0
    mac: str = ""
    up: bool = False
    kind: str = ""
    lower: int = 0
    master: int = 0
    info: dict[str, Any] = field(default_factory=dict)
    addresses: tuple[Address, ...] = ()
    link_netnsid: int = -1
    """Namespace id (as seen from the link's namespace) of ``lower``'s namespace; -1: same."""
    perm_mac: str = ""
    """IFLA_PERM_ADDRESS: the hardware's permanent MAC (set by the driver, not writable)."""
    parent_dev: str = ""
    """IFLA_PARENT_DEV_NAME: the bus device behind the netdev (e.g. a PCI address)."""
    parent_bus: str = ""
    """IFLA_PARENT_DEV_BUS_NAME: that device's bus (``pci``, ``netdevsim``, ...)."""
    operstate: str = ""
    """IFLA_OPERSTATE as ``ip link`` names it (``UP``, ``DOWN``, ...); read by the inventory's
    dumps only ("" elsewhere, and then left out of :meth:`to_json`, so before-images stay as
    they were)."""

    @property
    def local_lower(self) -> int:
        """``lower`` when it is another link of this namespace, else 0 (none, itself, or a
        link of the namespace ``link_netnsid`` names)."""
        return self.lower if self.link_netnsid == -1 and self.lower != self.index else 0

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["addresses"] = [asdict(a) for a in self.addresses]
        if not self.operstate:
            del out["operstate"]
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LinkState:
        return cls(
            index=int(data["index"]),
            name=str(data["name"]),
            alias=str(data.get("alias", "")),
            mtu=int(data["mtu"]),
            mac=str(data.get("mac", "")),
            up=bool(data["up"]),
            kind=str(data.get("kind", "")),
            lower=int(data.get("lower", 0)),
            master=int(data.get("master", 0)),
            info=dict(data.get("info", {})),
            addresses=tuple(Address(**a) for a in data.get("addresses", ())),
            link_netnsid=int(data.get("link_netnsid", -1)),
            perm_mac=str(data.get("perm_mac", "")),
            parent_dev=str(data.get("parent_dev", "")),
            parent_bus=str(data.get("parent_bus", "")),
            operstate=str(data.get("operstate", "")),
        )


def nonce_name() -> str:
    """A fresh random link name (15 chars), journaled before the link is created with it."""
    return NONCE_PREFIX + secrets.token_hex(6)


def _info(msg: Any) -> tuple[str, dict[str, Any]]:
    linkinfo = msg.get_attr("IFLA_LINKINFO")
    if linkinfo is None:
        return "", {}
    kind = linkinfo.get_attr("IFLA_INFO_KIND") or ""
    data = linkinfo.get_attr("IFLA_INFO_DATA")
    info: dict[str, Any] = {}
    if data is not None and hasattr(data, "get"):
        for name, value in data.get("attrs", []):
            if isinstance(value, str | int | bool):
                info[name] = value
    return str(kind), info


def _state(msg: Any, addresses: tuple[Address, ...] = ()) -> LinkState:
    kind, info = _info(msg)
    return LinkState(
        index=int(msg["index"]),
        name=str(msg.get_attr("IFLA_IFNAME")),
        alias=str(msg.get_attr("IFLA_IFALIAS") or ""),
        mtu=int(msg.get_attr("IFLA_MTU") or 0),
        mac=str(msg.get_attr("IFLA_ADDRESS") or ""),
        up=bool(msg["flags"] & IFF_UP),
        kind=kind,
        lower=int(msg.get_attr("IFLA_LINK") or 0),
        master=int(msg.get_attr("IFLA_MASTER") or 0),
        info=info,
        addresses=addresses,
        link_netnsid=_netnsid(msg.get_attr("IFLA_LINK_NETNSID")),
        perm_mac=str(msg.get_attr("IFLA_PERM_ADDRESS") or ""),
        parent_dev=str(msg.get_attr("IFLA_PARENT_DEV_NAME") or ""),
        parent_bus=str(msg.get_attr("IFLA_PARENT_DEV_BUS_NAME") or ""),
    )


def _netnsid(value: Any) -> int:
    return -1 if value is None else int(value)


def addresses_of(ipr: Any, index: int) -> tuple[Address, ...]:
    """The link's addresses (IPv6 link-local ones left out), sorted; through the lean
    reader when the socket carries one."""
    reader = _reader(ipr)
    if reader is not None:
        found = reader.addresses(index)
    else:
        found = [
            (int(m["family"]), str(m.get_attr("IFA_ADDRESS")), int(m["prefixlen"]))
            for m in ipr.get_addr(index=index)
        ]
    out = [
        Address(family, address, prefixlen)
        for family, address, prefixlen in found
        # link-local: the kernel makes these, restoring them is not ours to do
        if not (family == 10 and address.startswith("fe80:"))
    ]
    return tuple(sorted(out, key=lambda a: (a.family, a.address)))


def _from_reader(fields: dict[str, Any], addresses: tuple[Address, ...] = ()) -> LinkState:
    flags = int(fields["flags"])
    return LinkState(
        index=int(fields["index"]),
        name=str(fields["name"]),
        alias=str(fields["alias"]),
        mtu=int(fields["mtu"]),
        mac=str(fields["mac"]),
        up=bool(flags & IFF_UP),
        kind=str(fields["kind"]),
        lower=int(fields["lower"]),
        master=int(fields["master"]),
        info=dict(fields["info"]),
        addresses=addresses,
        link_netnsid=int(fields["link_netnsid"]),
        perm_mac=str(fields.get("perm_mac", "")),
        parent_dev=str(fields.get("parent_dev", "")),
        parent_bus=str(fields.get("parent_bus", "")),
    )


def _reader(ipr: Any) -> LinkReader | None:
    """The fast reader: ``ipr`` itself, or the one a :class:`LinkEnvironment` socket carries
    (a plain IPRoute has none and is read through pyroute2)."""
    if isinstance(ipr, LinkReader):
        return ipr
    reader = getattr(ipr, "link_reader", None)
    return reader if isinstance(reader, LinkReader) else None


def all_links(ipr: Any, kinds: tuple[str, ...] = ()) -> list[LinkState]:
    """Every link of the socket's namespace; with ``kinds``, only links of those kinds.

    A kind filter is also sent to the kernel (one dump per kind), which then returns only
    those links when it knows the kind; the result is filtered here in every case.
    """
    reader = _reader(ipr)
    if reader is None:
        links = [_state(m) for m in ipr.get_links()]
    elif kinds:
        links = [_from_reader(f) for kind in kinds for f in reader.dump(kind)]
    else:
        links = [_from_reader(f) for f in reader.dump()]
    return [link for link in links if link.kind in kinds] if kinds else links


def by_index(ipr: Any, index: int, with_addresses: bool = False) -> LinkState | None:
    if index <= 0:
        return None
    reader = _reader(ipr)
    if reader is not None:
        fields = reader.get(index=index)
        if fields is None:
            return None
        return _from_reader(fields, addresses_of(ipr, index) if with_addresses else ())
    try:
        msgs = ipr.get_links(index)
    except NetlinkError as exc:
        if exc.code == 19:  # ENODEV
            return None
        raise
    if not msgs:
        return None
    return _state(msgs[0], addresses_of(ipr, index) if with_addresses else ())


def by_name(ipr: Any, name: str, with_addresses: bool = False) -> LinkState | None:
    """The link called ``name``, looked up by the kernel (no dump)."""
    reader = _reader(ipr)
    if reader is not None:
        fields = reader.get(name=name)
        if fields is None:
            return None
        index = int(fields["index"])
        return _from_reader(fields, addresses_of(ipr, index) if with_addresses else ())
    try:
        msgs = ipr.link("get", ifname=name)
    except NetlinkError as exc:
        if exc.code == 19:  # ENODEV
            return None
        raise
    if not msgs:
        return None
    index = int(msgs[0]["index"])
    return _state(msgs[0], addresses_of(ipr, index) if with_addresses else ())


def by_alias(ipr: Any, alias: str) -> list[LinkState]:
    """Every link carrying exactly this alias (more than one is a conflict for the caller)."""
    return [link for link in all_links(ipr) if link.alias == alias]


def owned(ipr: Any, alias: str, names: tuple[str, ...] = (), dump: bool = True) -> LinkState | None:
    """The link carrying ``alias``: the hinted names first (one kernel lookup each, the alias
    must match), else (``dump``) a full dump, which also refuses two links claiming one alias."""
    for name in names:
        if name:
            link = by_name(ipr, name)
            if link is not None and link.alias == alias:
                return link
    return one(by_alias(ipr, alias), alias) if dump else None


def children_of(
    ipr: Any, parent_index: int, netnsid: int = -1, kinds: tuple[str, ...] = ()
) -> list[LinkState]:
    """Links (of ``kinds``, when given) whose lower device is ``parent_index`` in the
    namespace ``netnsid`` names."""
    return [
        link
        for link in all_links(ipr, kinds)
        if link.lower == parent_index and link.kind and link.link_netnsid == netnsid
    ]


def locate_hinted(ipr: Any, observations: Any, expected_mac: str | None = None) -> LinkState | None:
    """The link named by a handle's ``ifIndex``/``ifName`` hints, if both agree with the kernel.

    A hint is not authority: with both hints present the link at that ifindex must carry that
    name; with only a name the MAC (when known) must match too.
    """
    index = int(observations.get("ifIndex", 0) or 0)
    name = str(observations.get("ifName", "") or "")
    mac = expected_mac or str(observations.get("mac", "") or "")
    link = by_index(ipr, index) if index else None
    if link is not None and name and link.name != name:
        link = None
    if link is None and name:
        link = by_name(ipr, name)
    if link is not None and mac and link.mac.lower() != mac.lower():
        return None
    return link


def one(links: Iterable[LinkState], what: str) -> LinkState | None:
    found = list(links)
    if len(found) > 1:
        raise HostError("E_OWNERSHIP_CONFLICT", f"{len(found)} links claim {what}")
    return found[0] if found else None


def link_request(what: str, ipr: Any, op: str, **fields: Any) -> None:
    """One link write (``add``/``set``/``del``, pyroute2's field names): encoded and sent on
    the socket's lean reader when :mod:`link_writer` knows every field, else through
    pyroute2; a kernel refusal becomes an HostError with its errno either way."""
    reader = _reader(ipr)
    request = encode(op, fields) if reader is not None else None
    try:
        if reader is None or request is None:
            ipr.link(op, **fields)
        else:
            reader.acknowledged(*request)
    except NetlinkError as exc:
        raise HostError(f"E_NETLINK_{exc.code}", f"{what}: {exc}") from exc


def netlink_call(what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Run one netlink request; turn a kernel refusal into an HostError with its errno."""
    try:
        return fn(*args, **kwargs)
    except NetlinkError as exc:
        raise HostError(f"E_NETLINK_{exc.code}", f"{what}: {exc}") from exc
