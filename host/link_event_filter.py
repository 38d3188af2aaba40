"""Which rtnetlink notifications cannot change the node's inventory.

Why: every Pod of every system on a node makes a veth pair for its primary network, and
each one raises a burst of link, address and route notifications in the host namespace.
Each burst cost the agent a full inventory rescan (~55 ms of CPU on the lab host, more with
many links) in the process that answers the runtime's NRI hooks, which containerd serves one
at a time — in a Pod storm that was most of the agent's CPU.

Contract: :meth:`LinkEventFilter.relevant` says False only for a notification about a
``veth`` that the last scan did not report (its name, its index), whose master is not the
master or lower of an inventory link, or for an address or non-default route on such a
veth. Everything else is relevant: any other link kind, any default route, any message it
cannot read. Protection (design §5.1) follows masters and lowers of inventory links, so a
veth joining the bridge an inventory link is enslaved to stays relevant; a veth that is
no inventory link's relative cannot change what the scan reports about a PCI function or a
lab link. The periodic resync still rescans everything.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

_LINK_EVENTS = ("RTM_NEWLINK", "RTM_DELLINK")
_ADDRESS_EVENTS = ("RTM_NEWADDR", "RTM_DELADDR")
_ROUTE_EVENTS = ("RTM_NEWROUTE", "RTM_DELROUTE")


class LinkEventFilter:
    """Thread-safe: :meth:`watch` is called by the publisher after each scan, :meth:`relevant`
    by the rtnetlink listener for each message."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._names: frozenset[str] = frozenset()
        self._indexes: frozenset[int] = frozenset()
        self._quiet: set[int] = set()  # veths judged irrelevant by their last link message

    def watch(self, names: Iterable[str], indexes: Iterable[int]) -> None:
        """The inventory's link names and the indexes of its links, their masters and lowers."""
        with self._lock:
            self._names = frozenset(n for n in names if n)
            self._indexes = frozenset(i for i in indexes if i > 0)
            self._quiet -= self._indexes

    def relevant(self, msg: Any) -> bool:
        try:
            event = str(msg.get("event", ""))
            with self._lock:
                if event in _LINK_EVENTS:
                    return self._link(msg, event)
                if event in _ADDRESS_EVENTS:
                    return int(msg["index"]) not in self._quiet
                if event in _ROUTE_EVENTS:
                    if int(msg["dst_len"]) == 0:
                        return True
                    oif = msg.get_attr("RTA_OIF")
                    return oif is None or int(oif) not in self._quiet
        except Exception:  # a message this cannot read is relevant
            return True
        return True

    def _link(self, msg: Any, event: str) -> bool:
        index = int(msg["index"])
        name = str(msg.get_attr("IFLA_IFNAME") or "")
        master = int(msg.get_attr("IFLA_MASTER") or 0)
        info = msg.get_attr("IFLA_LINKINFO")
        kind = str(info.get_attr("IFLA_INFO_KIND") or "") if info is not None else ""
        quiet = (
            kind == "veth"
            and name not in self._names
            and index not in self._indexes
            and master not in self._indexes
        )
        if quiet:
            self._quiet.add(index)
        elif event == "RTM_NEWLINK":
            self._quiet.discard(index)
        return not quiet
