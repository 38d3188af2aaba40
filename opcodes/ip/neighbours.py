"""Executor of ``ip/neighbours/v1``: permanent neighbour entries on a granted sandbox link.

An entry is keyed by (family, link, address) and recorded with its MAC address and the
permanent state. An entry the kernel learned by itself (neighbour discovery: reachable,
stale, failed, ...) holds no one's configuration and is written over; a permanent or
no-ARP entry someone configured refuses the effect (``E_NEIGHBOUR_EXISTS``). Undo deletes
an entry only while it is still permanent with the recorded MAC address; a learned entry
at the key later is the kernel's and left alone, another configured one is someone
else's (``E_NEIGHBOUR_NOT_OWNED``, quarantined). The rest of the lifecycle is
:class:`~dmn.opcodes.ip.keyed_entries.KeyedEntries`'.
"""

from __future__ import annotations

import socket
from collections.abc import Hashable
from typing import Any

from dmn.host.rtnetlink.links import LinkState
from dmn.host.rtnetlink.neighbours import (
    NeighbourEntry,
    delete_neighbour,
    neighbours_of,
    put_neighbour,
)
from dmn.opcodes.executor import EffectContext
from dmn.opcodes.ip import specs
from dmn.opcodes.ip.keyed_entries import KeyedEntries
from dmn.opcodes.spec import OpcodeSpec
from dmn.vocabulary.ip_values import address_of


class IpNeighbours(KeyedEntries[NeighbourEntry]):
    """``ip/neighbours/v1``."""

    spec: OpcodeSpec = specs.IP_NEIGHBOURS
    what = "neighbour entry"
    exists_code = "E_NEIGHBOUR_EXISTS"
    not_owned_code = "E_NEIGHBOUR_NOT_OWNED"

    def wanted(self, ctx: EffectContext, link: LinkState) -> list[NeighbourEntry]:
        parameters = specs.IpNeighboursParameters.model_validate(ctx.parameters)
        out = []
        for entry in parameters.neighbours:
            ip = address_of(entry.address)
            family = int(socket.AF_INET if ip.version == 4 else socket.AF_INET6)
            out.append(NeighbourEntry(family, link.index, str(ip), entry.lladdr))
        return out

    def from_json(self, data: dict[str, Any]) -> NeighbourEntry:
        return NeighbourEntry.from_json(data)

    def live(
        self, ipr: Any, link: LinkState, entries: list[NeighbourEntry]
    ) -> dict[Hashable, NeighbourEntry]:
        return {e.key: e for e in neighbours_of(ipr, link.index)}

    def blocks(self, found: NeighbourEntry) -> bool:
        return found.configured

    def add(self, ipr: Any, entry: NeighbourEntry, over: NeighbourEntry | None) -> None:
        put_neighbour(ipr, entry, replace=over is not None)

    def delete(self, ipr: Any, entry: NeighbourEntry) -> bool:
        return delete_neighbour(ipr, entry)

    def describe(self, entry: NeighbourEntry) -> str:
        return f"{entry.address} lladdr {entry.lladdr}"
