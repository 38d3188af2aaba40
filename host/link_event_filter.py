"""Which rtnetlink notifications cannot change the node's inventory.

Why: every Pod of every system on a node makes a veth pair for its primary network, and
each one raises a burst of link, address and route notifications in the host namespace.
Each burst cost the agent a full inventory rescan (~55 ms of CPU on the lab host, more with
many links) in the process that answers the runtime's NRI hooks, which containerd serves one
at a time — in a Pod storm that was most of the agent's CPU.

Contract: :meth:`LinkEventFilter.relevant` says False only for

* a notification about a ``veth`` that the last scan did not report (its name, its
  index), whose master is not the master or lower of an inventory link, or an address or
  non-default route on such a veth;
* a link notification about a shared-parent child (``macvlan``, ``macvtap``, ``ipvlan``,
  ``ipvtap``) the last scan did not report, whose master is no inventory relative and
  which has carried no address other than an IPv6 link-local one while this filter
  watched it, and a non-default route on such a child or a link-local address on it;
* a link notification that says nothing new of what the scan reads (:func:`_fingerprint`:
  of an inventory link its name, relations, MTU, MACs, admin and oper state and parent
  device; of any other link its name, kind and relations) since the last one for the same
  link: the kernel sends those to a parent whenever a child is made on it, brought up (its
  promiscuity count) or leaves it, and to a bridge whenever a port joins or leaves (its
  features, the MAC it takes from its ports); addresses and routes have notifications of
  their own;
* a link notification of the bridge family (``AF_BRIDGE``: a port's bridging state): the
  scan reads none of it, and the kernel tells the generic family about the same change
  (a port's master) in a notification of its own.

A link notification without its kind (the kernel leaves ``IFLA_LINKINFO`` out of some) is
judged by the kind the link's earlier notifications named.

Everything else is relevant: any other link kind, any default route, an address other
than link-local on a child (it may be a node IP, which makes the child's lower protected),
the removal of a child that had one, any message it cannot read. Protection (design §5.1)
seeds on links with a default route or a node IP and follows masters, members and lowers,
so a veth joining the bridge an inventory link is enslaved to stays relevant; a veth that
is no inventory link's relative, and a child that seeds nothing, cannot change what the
scan reports about a PCI function or a lab link. Children are what every shared-parent
attachment of a Pod makes (ours and a CNI's: created in the host namespace, then moved
into the sandbox, which the host sees as their removal). The periodic resync still
rescans everything.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

# by the netlink header's type: pyroute2 labels a link notification that carries
# IFLA_EVENT with that attribute's value instead (a bridge whose features changed when a
# port joined arrives as event "2", IFLA_EVENT_FEATURES)
_NEWLINK, _DELLINK = 16, 17
_LINK_TYPES = (_NEWLINK, _DELLINK)
_NEWADDR, _DELADDR = 20, 21
_ADDRESS_TYPES = (_NEWADDR, _DELADDR)
_ROUTE_TYPES = (24, 25)
AF_BRIDGE = 7
_CHILD_KINDS = frozenset({"macvlan", "macvtap", "ipvlan", "ipvtap"})


_IFF_UP = 0x1
# what the scan reads of any link: who it is, and how it relates to others (protection
# follows masters and lowers; default-route links are known by name)
_RELATIONS = ("IFLA_IFNAME", "IFLA_MASTER", "IFLA_LINK", "IFLA_LINK_NETNSID")
# and what it reports about an inventory link itself (LinkState as the dump reads it)
_INVENTORY_FIELDS = (
    *_RELATIONS,
    "IFLA_MTU",
    "IFLA_ADDRESS",
    "IFLA_PERM_ADDRESS",
    "IFLA_OPERSTATE",
    "IFLA_PARENT_DEV_NAME",
    "IFLA_PARENT_DEV_BUS_NAME",
)


def _fingerprint(msg: Any, kind: str, inventory: bool) -> str:
    """What a link notification says that the scan reads: for a link of the inventory (or
    a relative of one) the fields of its reported state, for any other link only its name,
    kind and relations. Counters (promiscuity, which every macvlan child brought up raises
    on its parent), statistics, per-family settings, a bridge's timers and a MAC a
    bridge takes from its ports are not among them."""
    fields = _INVENTORY_FIELDS if inventory else _RELATIONS
    values = tuple(str(msg.get_attr(name)) for name in fields)
    up = bool(int(msg.get("flags") or 0) & _IFF_UP) if inventory else None
    return repr((kind, up, values))


def _link_local(msg: Any) -> bool:
    address = str(msg.get_attr("IFA_ADDRESS") or "")
    return int(msg.get("family", 0)) == 10 and address.lower().startswith("fe80:")


class LinkEventFilter:
    """Thread-safe: :meth:`watch` is called by the publisher after each scan, :meth:`relevant`
    by the rtnetlink listener for each message."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._names: frozenset[str] = frozenset()
        self._indexes: frozenset[int] = frozenset()
        self._quiet: set[int] = set()  # links judged irrelevant by their last link message
        self._addressed: set[int] = set()  # children that carried a non-link-local address
        self._last: dict[int, str] = {}  # the last relevant link notification's fingerprint
        self._kinds: dict[int, str] = {}  # the kind each link's full notifications named

    def watch(self, names: Iterable[str], indexes: Iterable[int]) -> None:
        """The inventory's link names and the indexes of its links, their masters and lowers."""
        with self._lock:
            self._names = frozenset(n for n in names if n)
            self._indexes = frozenset(i for i in indexes if i > 0)
            self._quiet -= self._indexes

    def relevant(self, msg: Any) -> bool:
        try:
            kind_of_message = int(msg["header"]["type"])
            with self._lock:
                if kind_of_message in _LINK_TYPES:
                    return self._link(msg, kind_of_message)
                if kind_of_message in _ADDRESS_TYPES:
                    return self._address(msg, kind_of_message)
                if kind_of_message in _ROUTE_TYPES:
                    if int(msg["dst_len"]) == 0:
                        return True
                    oif = msg.get_attr("RTA_OIF")
                    return oif is None or int(oif) not in self._quiet
        except Exception:  # a message this cannot read is relevant
            return True
        return True

    def _address(self, msg: Any, event: int) -> bool:
        index = int(msg["index"])
        if index not in self._quiet:
            return True
        if self._kinds.get(index) == "veth" or _link_local(msg):
            return False
        if event == _NEWADDR:  # a child with an address may seed protection
            self._addressed.add(index)
            self._quiet.discard(index)
        return True

    def _link(self, msg: Any, event: int) -> bool:
        if int(msg.get("family") or 0) == AF_BRIDGE:
            return False
        index = int(msg["index"])
        name = str(msg.get_attr("IFLA_IFNAME") or "")
        master = int(msg.get_attr("IFLA_MASTER") or 0)
        info = msg.get_attr("IFLA_LINKINFO")
        kind = str(info.get_attr("IFLA_INFO_KIND") or "") if info is not None else ""
        if kind:
            self._kinds[index] = kind
        else:
            kind = self._kinds.get(index, "")
        outside = (
            name not in self._names and index not in self._indexes and master not in self._indexes
        )
        quiet = outside and (
            kind == "veth" or (kind in _CHILD_KINDS and index not in self._addressed)
        )
        if event == _DELLINK:  # the index is free again: forget what it was
            self._quiet.discard(index)
            self._addressed.discard(index)
            self._last.pop(index, None)
            self._kinds.pop(index, None)
        elif quiet:
            self._quiet.add(index)
        else:
            self._quiet.discard(index)
            seen = _fingerprint(msg, kind, not outside)
            if self._last.get(index) == seen:
                return False
            self._last[index] = seen
        return not quiet
