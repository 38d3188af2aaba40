"""The addresses of one link as rtnetlink reports them, and their writes (``ip/addresses``).

Why a model of its own beside :class:`~dmn.host.rtnetlink.links.Address` (which a moved
link's before-image keeps): an address an effect added must later be told apart from the
same address someone else added. A tenant with CAP_NET_ADMIN in its sandbox can delete an
address and add it again, with any flags and lifetimes; what it cannot write is the
address's **creation stamp** — IFA_CACHEINFO ``cstamp``, set by the kernel when the
address object is made (hundredths of a second since boot) and kept when the address is
changed in place. :class:`InterfaceAddress` carries it as ``created``.

Contract: :func:`link_addresses` returns every IPv4/IPv6 address of the link at ``index``
(IPv4 by its local address, IPv6 by its address), with flags and stamp;
:func:`add_address` adds one (``E_NETLINK_17`` when the link has it); :func:`delete_address`
deletes one and says whether it was there. Every kernel refusal is a
:class:`~dmn.host.errors.HostError` with the errno.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from dataclasses import dataclass
from typing import Any

from dmn.host.errors import HostError
from dmn.host.rtnetlink.links import netlink_call

IFA_F_SECONDARY = 0x01
IFA_F_NODAD = 0x02
IFA_F_DADFAILED = 0x08
IFA_F_TENTATIVE = 0x40


@dataclass(frozen=True, slots=True)
class InterfaceAddress:
    """One address of a link: family, address (as ``ipaddress`` writes it), prefix length,
    IFA flags and the kernel's creation stamp."""

    family: int
    address: str
    prefixlen: int
    flags: int = 0
    created: int = 0

    @property
    def cidr(self) -> str:
        return f"{self.address}/{self.prefixlen}"

    @property
    def secondary(self) -> bool:
        """An IPv4 address of a subnet another address of the link already covers (the
        kernel deletes secondaries with their primary unless ``promote_secondaries``)."""
        return bool(self.flags & IFA_F_SECONDARY)

    @property
    def dad_failed(self) -> bool:
        return bool(self.flags & IFA_F_DADFAILED)

    def to_json(self) -> dict[str, Any]:
        return {
            "family": self.family,
            "address": self.address,
            "prefixlen": self.prefixlen,
            "flags": self.flags,
            "created": self.created,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> InterfaceAddress:
        return cls(
            int(data["family"]),
            str(data["address"]),
            int(data["prefixlen"]),
            int(data.get("flags", 0)),
            int(data.get("created", 0)),
        )


def _family(version: int) -> int:
    return int(socket.AF_INET if version == 4 else socket.AF_INET6)


def link_addresses(ipr: Any, index: int) -> tuple[InterfaceAddress, ...]:
    """Every IPv4/IPv6 address of link ``index`` in the socket's namespace."""
    out: list[InterfaceAddress] = []
    for msg in netlink_call("read addresses", ipr.get_addr, index=index):
        family = int(msg["family"])
        if family not in (socket.AF_INET, socket.AF_INET6) or int(msg["index"]) != index:
            continue
        raw = msg.get_attr("IFA_LOCAL") if family == socket.AF_INET else None
        raw = raw or msg.get_attr("IFA_ADDRESS")
        if not raw:
            continue
        flags = msg.get_attr("IFA_FLAGS")
        info = msg.get_attr("IFA_CACHEINFO")
        created = int(info.get("cstamp", 0)) if info is not None else 0
        out.append(
            InterfaceAddress(
                family,
                str(ipaddress.ip_address(raw)),
                int(msg["prefixlen"]),
                int(flags if flags is not None else msg["flags"]),
                created,
            )
        )
    return tuple(out)


def add_address(
    ipr: Any, index: int, iface: ipaddress.IPv4Interface | ipaddress.IPv6Interface, nodad: bool
) -> None:
    """Add ``iface`` to link ``index`` as a permanent address (IPv6 without duplicate
    address detection when ``nodad``)."""
    fields: dict[str, Any] = {
        "index": index,
        "family": _family(iface.version),
        "address": str(iface.ip),
        "prefixlen": iface.network.prefixlen,
    }
    if nodad and iface.version == 6:
        fields["flags"] = IFA_F_NODAD
    netlink_call(f"add address {iface}", ipr.addr, "add", **fields)


def delete_address(ipr: Any, index: int, address: InterfaceAddress) -> bool:
    """Delete ``address`` from link ``index``; False when the link no longer has it."""
    try:
        netlink_call(
            f"delete address {address.cidr}",
            ipr.addr,
            "del",
            index=index,
            family=address.family,
            address=address.address,
            prefixlen=address.prefixlen,
        )
    except HostError as exc:
        if exc.code in (f"E_NETLINK_{errno.EADDRNOTAVAIL}", f"E_NETLINK_{errno.ENOENT}"):
            return False
        raise
    return True
