"""The inventory watch's filter, fed the kernel's own rtnetlink notifications.

A scratch namespace stands in for the host: ``inv`` (a veth end the "inventory" reports)
is enslaved to a bridge; Pod-like veth pairs are made beside it. Every message the kernel
sends about the unrelated pair must be judged irrelevant, and every message about the
inventory link, its bridge's new members and default routes relevant.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pyroute2 import IPRoute
from pyroute2.netlink.rtnl import (
    RTMGRP_IPV4_IFADDR,
    RTMGRP_IPV4_ROUTE,
    RTMGRP_IPV6_IFADDR,
    RTMGRP_IPV6_ROUTE,
    RTMGRP_LINK,
)

from dmn.host.link_event_filter import LinkEventFilter
from tests.kernel.scratch import scratch_netns, unique

pytestmark = pytest.mark.netns

GROUPS = RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR | RTMGRP_IPV4_ROUTE
GROUPS |= RTMGRP_IPV6_ROUTE


@pytest.fixture
def host() -> Iterator[str]:
    with scratch_netns("dmnf") as name:
        with IPRoute(netns=name) as ip:
            ip.link("add", ifname="inv", kind="veth", peer="invpeer")
            ip.link("add", ifname="br", kind="bridge")
            br = ip.link_lookup(ifname="br")[0]
            inv = ip.link_lookup(ifname="inv")[0]
            ip.link("set", index=inv, master=br, state="up")
            ip.link("set", index=br, state="up")
        yield name


def _drain(ip: IPRoute, listener: IPRoute) -> list[Any]:
    """Every message before a sentinel veth's creation (the kernel keeps their order; the
    listener's socket may hold several in one read, so select alone can miss the last).
    Sentinels stay until the namespace goes; their own messages are left out."""
    sentinel = unique("sent")
    ip.link("add", ifname=sentinel, kind="veth", peer=f"{sentinel}p")
    out: list[Any] = []
    while True:
        for message in listener.get():
            name = str(message.get_attr("IFLA_IFNAME") or "")
            if name.startswith(sentinel):
                return out
            if not name.startswith("sent"):
                out.append(message)


def _filter(ip: IPRoute) -> LinkEventFilter:
    inv = ip.link_lookup(ifname="inv")[0]
    br = ip.link_lookup(ifname="br")[0]
    events = LinkEventFilter()
    events.watch({"inv"}, {inv, br})  # inv, and its master as the scan reports them
    return events


def test_an_unrelated_veth_pair_raises_nothing_relevant(host: str) -> None:
    with IPRoute(netns=host) as ip, IPRoute(netns=host) as listener:
        listener.bind(groups=GROUPS)
        events = _filter(ip)
        ip.link("add", ifname="pod0", kind="veth", peer="pod1")
        pods = {ip.link_lookup(ifname=name)[0] for name in ("pod0", "pod1")}
        for index in pods:
            ip.link("set", index=index, state="up")
        ip.addr("add", index=ip.link_lookup(ifname="pod0")[0], address="10.9.0.1", prefixlen=24)
        ip.link("del", index=ip.link_lookup(ifname="pod0")[0])

        def about_pods(m: Any) -> bool:
            return m.get("index") in pods or m.get_attr("RTA_OIF") in pods

        messages = [m for m in _drain(ip, listener) if about_pods(m)]
        kinds = {str(m.get("event")) for m in messages}
        assert {"RTM_NEWLINK", "RTM_DELLINK", "RTM_NEWADDR", "RTM_NEWROUTE"} <= kinds, kinds
        assert [m for m in messages if events.relevant(m)] == []


def test_inventory_links_their_masters_members_and_default_routes_are_relevant(
    host: str,
) -> None:
    with IPRoute(netns=host) as ip, IPRoute(netns=host) as listener:
        listener.bind(groups=GROUPS)
        events = _filter(ip)
        ip.link("set", index=ip.link_lookup(ifname="inv")[0], mtu=1400)
        changed = _drain(ip, listener)
        assert changed and all(events.relevant(m) for m in changed)

        # a veth joining the bridge an inventory link is enslaved to: protection follows it
        ip.link("add", ifname="member", kind="veth", peer="memberpeer")
        ip.link(
            "set", index=ip.link_lookup(ifname="member")[0], master=ip.link_lookup(ifname="br")[0]
        )
        joined = [m for m in _drain(ip, listener) if m.get_attr("IFLA_IFNAME") == "member"]
        assert joined and any(events.relevant(m) for m in joined)

        # a default route over an unrelated veth: the node's primary interface may move
        ip.link("add", ifname="up0", kind="veth", peer="up1")
        up0 = ip.link_lookup(ifname="up0")[0]
        ip.link("set", index=up0, state="up")
        ip.link("set", index=ip.link_lookup(ifname="up1")[0], state="up")
        ip.addr("add", index=up0, address="10.8.0.1", prefixlen=24)
        _drain(ip, listener)
        ip.route("add", dst="0.0.0.0/0", gateway="10.8.0.2", oif=up0)
        routes = [m for m in _drain(ip, listener) if str(m.get("event")) == "RTM_NEWROUTE"]
        assert routes and all(events.relevant(m) for m in routes)


def test_a_message_it_cannot_read_is_relevant() -> None:
    assert LinkEventFilter().relevant(object())
    assert LinkEventFilter().relevant({"event": "RTM_NEWNEIGH"})
