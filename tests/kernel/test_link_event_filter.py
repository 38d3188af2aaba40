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


def _with_nic(ip: IPRoute) -> tuple[LinkEventFilter, int]:
    """The filter, with ``nic`` (a shared parent, not enslaved) reported by the scan too."""
    ip.link("add", ifname="nic", kind="veth", peer="nicpeer")
    nic = ip.link_lookup(ifname="nic")[0]
    ip.link("set", index=nic, state="up")
    events = LinkEventFilter()
    inv, br = ip.link_lookup(ifname="inv")[0], ip.link_lookup(ifname="br")[0]
    events.watch({"inv", "nic"}, {inv, br, nic})
    return events, nic


def test_a_shared_parent_child_moved_into_a_sandbox_raises_nothing_relevant(host: str) -> None:
    """What every shared-parent attachment does (ours and the macvlan CNI's): the child is
    made on the inventory link in the host namespace, set up there, and moved into the
    sandbox — the host sees its creation and its removal, and nothing about the parent."""
    with (
        scratch_netns("dmnp") as sandbox,
        IPRoute(netns=host) as ip,
        IPRoute(netns=host) as listener,
    ):
        listener.bind(groups=GROUPS)
        events, inv = _with_nic(ip)
        assert any([events.relevant(m) for m in _drain(ip, listener)])  # every one is judged
        children = set()
        # (this kernel has no ipvlan: macvlan in the two modes the lab uses)
        for mode in ("bridge", "private"):
            name = f"c{mode}"
            ip.link("add", ifname=name, kind="macvlan", link=inv, macvlan_mode=mode)
            index = ip.link_lookup(ifname=name)[0]
            children.add(index)
            ip.link("set", index=index, mtu=1400, address=f"02:00:00:00:00:0{len(children)}")
            ip.link("set", index=index, net_ns_fd=sandbox)
            with IPRoute(netns=sandbox) as pod:  # up in the sandbox: the parent's promiscuity
                pod.link("set", index=pod.link_lookup(ifname=name)[0], state="up")
        messages = _drain(ip, listener)
        about = [m for m in messages if m.get("index") in children]
        kinds = {str(m.get("event")) for m in about}
        assert {"RTM_NEWLINK", "RTM_DELLINK"} <= kinds, kinds
        assert [m for m in about if events.relevant(m)] == []
        # the parent is told too, with nothing of it changed: nothing relevant either
        assert [m for m in messages if m.get("index") == inv]
        assert [m for m in messages if events.relevant(m)] == []
        # while a real change of the parent still is
        ip.link("set", index=inv, mtu=1300)
        changed = [m for m in _drain(ip, listener) if m.get("index") == inv]
        assert changed and any(events.relevant(m) for m in changed)


def test_a_child_that_may_carry_a_node_ip_stays_relevant(host: str) -> None:
    """A child with an address may be the node's primary interface (a node IP on a macvlan
    of a NIC): that seeds protection of its lower, so the address and the child's removal
    are relevant; an IPv6 link-local address is not."""
    with IPRoute(netns=host) as ip, IPRoute(netns=host) as listener:
        listener.bind(groups=GROUPS)
        events, inv = _with_nic(ip)
        assert any([events.relevant(m) for m in _drain(ip, listener)])
        ip.link("add", ifname="mgmt", kind="macvlan", link=inv, macvlan_mode="bridge")
        mgmt = ip.link_lookup(ifname="mgmt")[0]
        created = [m for m in _drain(ip, listener) if m.get("index") == mgmt]
        assert created and not any(events.relevant(m) for m in created)
        ip.addr("add", index=mgmt, address="fe80::7", prefixlen=64)
        local = [m for m in _drain(ip, listener) if m.get("index") == mgmt]
        assert local and not any(events.relevant(m) for m in local)
        ip.addr("add", index=mgmt, address="10.7.0.2", prefixlen=24)
        addressed = [
            m
            for m in _drain(ip, listener)
            if m.get("index") == mgmt and str(m.get("event")) == "RTM_NEWADDR"
        ]
        assert addressed and all(events.relevant(m) for m in addressed)
        ip.link("del", index=mgmt)
        removed = [
            m
            for m in _drain(ip, listener)
            if m.get("index") == mgmt and str(m.get("event")) == "RTM_DELLINK"
        ]
        assert removed and all(events.relevant(m) for m in removed)


def test_pods_joining_the_primary_bridge_raise_only_the_bridges_real_changes(host: str) -> None:
    """The primary network's bridge CNI: each Pod's veth joins a bridge no inventory link
    belongs to. The kernel then tells the bridge-port family about the port, repeats the
    bridge's own state (labelled with IFLA_EVENT when its features change) and routes the
    port's link-local prefix: none of that is relevant. What stays relevant is a real change
    of the bridge (it takes the lowest port MAC, so its address moves as ports come and go):
    a bridge may be a node's primary interface, which this filter cannot tell."""
    with (
        scratch_netns("dmnb") as sandbox,
        IPRoute(netns=host) as ip,
        IPRoute(netns=host) as listener,
    ):
        listener.bind(groups=GROUPS)
        events = _filter(ip)
        ip.link("add", ifname="cni0", kind="bridge")
        cni0 = ip.link_lookup(ifname="cni0")[0]
        ip.link("set", index=cni0, state="up")
        ip.addr("add", index=cni0, address="10.6.0.1", prefixlen=24)

        def pod(n: int) -> None:
            ip.link("add", ifname=f"vp{n}", kind="veth", peer=f"pp{n}")
            ip.link("set", index=ip.link_lookup(ifname=f"pp{n}")[0], net_ns_fd=sandbox)
            ip.link("set", index=ip.link_lookup(ifname=f"vp{n}")[0], master=cni0, state="up")

        pod(0)  # the bridge's first port: its carrier comes up, as on a node's first Pod
        [events.relevant(m) for m in _drain(ip, listener)]  # every one judged, in order
        for n in range(1, 6):
            pod(n)
        ip.link("del", index=ip.link_lookup(ifname="vp1")[0])
        messages = _drain(ip, listener)
        assert 7 in {int(m.get("family") or 0) for m in messages if m.get("index") is not None}
        relevant = [m for m in messages if events.relevant(m)]
        assert all(m.get("index") == cni0 for m in relevant), [
            (m["header"]["type"], m.get_attr("IFLA_IFNAME")) for m in relevant
        ]
