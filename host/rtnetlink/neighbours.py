"""Neighbour entries of one link as rtnetlink reports them, and their writes
(``ip/neighbours``).

A neighbour entry is keyed by (family, link, address); besides the link-layer address it
carries a state, and ``NUD_PERMANENT`` is what an administrator's static entry has (the
kernel's own cache entries are ``REACHABLE``, ``STALE`` and the like, and come and go).
Nothing on an entry is written by the kernel alone, so :class:`NeighbourEntry` records
what a before-image can compare: the key, the link-layer address and the state.

Contract: :func:`neighbours_of` returns the IPv4/IPv6 entries of link ``index``;
:func:`put_neighbour` adds a permanent entry (with ``replace``, over a cache entry of the
kernel's); :func:`delete_neighbour` deletes the entry for the key and says whether there
was one. Kernel refusals are :class:`~dmn.host.errors.HostError` with the errno.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from dataclasses import asdict, dataclass
from typing import Any

from dmn.host.errors import HostError
from dmn.host.rtnetlink.links import netlink_call

NUD_NOARP = 0x40
NUD_PERMANENT = 0x80
CONFIGURED_STATES = NUD_PERMANENT | NUD_NOARP
"""States only a write makes (not the kernel's neighbour discovery)."""


@dataclass(frozen=True, slots=True)
class NeighbourEntry:
    family: int
    ifindex: int
    address: str
    lladdr: str
    state: int = NUD_PERMANENT

    @property
    def key(self) -> tuple[int, int, str]:
        return (self.family, self.ifindex, self.address)

    @property
    def configured(self) -> bool:
        """Made by a write (permanent or no-ARP), not learned by the kernel."""
        return bool(self.state & CONFIGURED_STATES)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NeighbourEntry:
        return cls(
            int(data["family"]),
            int(data["ifindex"]),
            str(data["address"]),
            str(data["lladdr"]),
            int(data.get("state", NUD_PERMANENT)),
        )


def neighbours_of(ipr: Any, index: int) -> list[NeighbourEntry]:
    out = []
    for msg in netlink_call("read neighbours", ipr.get_neighbours, ifindex=index):
        family, dst = int(msg["family"]), msg.get_attr("NDA_DST")
        if family not in (socket.AF_INET, socket.AF_INET6) or not dst:
            continue
        if int(msg["ifindex"]) != index:
            continue
        out.append(
            NeighbourEntry(
                family,
                index,
                str(ipaddress.ip_address(dst)),
                str(msg.get_attr("NDA_LLADDR") or "").lower(),
                int(msg["state"]),
            )
        )
    return out


def put_neighbour(ipr: Any, entry: NeighbourEntry, replace: bool) -> None:
    netlink_call(
        f"{'replace' if replace else 'add'} neighbour {entry.address}",
        ipr.neigh,
        "replace" if replace else "add",
        family=entry.family,
        ifindex=entry.ifindex,
        dst=entry.address,
        lladdr=entry.lladdr,
        state=entry.state,
    )


def delete_neighbour(ipr: Any, entry: NeighbourEntry) -> bool:
    """Delete the entry for ``entry``'s key; False when there is none."""
    try:
        netlink_call(
            f"delete neighbour {entry.address}",
            ipr.neigh,
            "del",
            family=entry.family,
            ifindex=entry.ifindex,
            dst=entry.address,
        )
    except HostError as exc:
        if exc.code == f"E_NETLINK_{errno.ENOENT}":
            return False
        raise
    return True
