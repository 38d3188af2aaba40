"""The executors' lean link writes do in the kernel what the same pyroute2 request does.

``links.link_request`` sends ``add``/``set``/``del`` through :mod:`link_writer` on a
``LinkEnvironment`` socket and through pyroute2 otherwise; both paths here build the same
links side by side (a macvlan child created at a chosen ifindex directly in a sandbox, an
ipvlan-free kernel is fine: macvlan and veth only), claim, move, rename, bring up and down,
clear an alias, delete, and refuse the same way (errno in the reason code).
"""

from __future__ import annotations

import os

import pytest

from dmn.host.netns import LazyRtnl, NamespaceRtnl
from dmn.host.rtnetlink.link_writer import encode
from dmn.host.rtnetlink.links import LinkState, by_index, by_name, link_request
from dmn.opcodes.executor import ExecutorError
from tests.kernel.scratch import netns_path, unique
from tests.kernel.world import world

pytestmark = pytest.mark.netns


def _facts(link: LinkState | None) -> tuple[object, ...]:
    assert link is not None
    return (link.name, link.alias, link.mtu, link.up, link.kind, link.lower, link.info)


def test_encode_leaves_unknown_requests_to_pyroute2() -> None:
    assert encode("set", {"index": 5, "address": "02:00:00:00:00:01"}) is None
    assert encode("set", {"ifname": "x"}) is None  # no index: pyroute2 resolves names
    assert encode("del", {"index": 5, "ifname": "x"}) is None
    assert encode("set", {"index": 5, "state": "dormant"}) is None
    assert encode("set", {"index": 5, "kind": "macvlan"}) is None
    assert encode("add", {"kind": "vlan", "macvlan_mode": "bridge"}) is None
    assert encode("get", {"index": 5}) is None
    # the hot requests are encoded here, never left to pyroute2
    assert encode("del", {"index": 5}) is not None
    hot = {"ifname": "n", "index": 9, "kind": "macvlan", "link": 2, "mtu": 1500}
    assert encode("add", {**hot, "net_ns_fd": 3, "macvlan_mode": "bridge"}) is not None
    assert encode("add", {**hot, "kind": "ipvlan", "ipvlan_mode": 0}) is not None
    assert encode("set", {"index": 9, "ifname": "a", "ifalias": "b", "state": "up"}) is not None
    assert encode("set", {"index": 9, "net_ns_fd": 3, "ifname": "a", "ifalias": ""}) is not None


def test_lean_and_pyroute2_writes_leave_the_same_links() -> None:
    with world() as w:
        sb = w.sandbox()
        env = w.env(sb)
        fast_host, fast_sb = env.rtnl(env.host), env.rtnl(env.sandbox)
        assert isinstance(fast_sb, NamespaceRtnl | LazyRtnl) and fast_sb.link_reader is not None
        plain_host, plain_sb = w.ipr(w.host), w.ipr(sb)
        parent, _ = w.veth(w.host)
        lower = plain_host.link_lookup(ifname=parent)[0]
        sb_fd = os.open(netns_path(sb), os.O_RDONLY)
        try:
            made: list[tuple[object, ...]] = []
            for n, (host, inside) in enumerate(((fast_host, fast_sb), (plain_host, plain_sb))):
                index, nonce, final = 0x1234_0000 + n, unique("dn"), f"net{n}"
                create = {
                    "ifname": nonce,
                    "index": index,
                    "kind": "macvlan",
                    "link": lower,
                    "mtu": 1400,
                    "net_ns_fd": sb_fd,
                    "macvlan_mode": "bridge",
                }
                link_request("create", host, "add", **create)
                with pytest.raises(ExecutorError) as taken:
                    link_request("create", host, "add", **create)
                assert taken.value.code == "E_NETLINK_17"  # EEXIST
                link_request(
                    "claim", inside, "set", index=index, ifname=final, ifalias="dmn:o:e", state="up"
                )
                claimed = by_index(fast_sb, index)
                assert claimed is not None and claimed.link_netnsid >= 0
                made.append(_facts(claimed)[1:])
                link_request("down", inside, "set", index=index, state="down", mtu=1300)
                link_request("clear alias", inside, "set", index=index, ifalias="")
                changed = by_index(fast_sb, index)
                assert changed is not None
                assert (changed.up, changed.mtu, changed.alias) == (False, 1300, "")
                link_request("delete", inside, "del", index=index)
                assert by_index(fast_sb, index) is None
                with pytest.raises(ExecutorError) as gone:
                    link_request("delete", inside, "del", index=index)
                assert gone.value.code == "E_NETLINK_19"  # ENODEV
            assert made[0] == made[1]
            assert made[0][:4] == ("dmn:o:e", 1400, True, "macvlan")

            # a move into the sandbox renamed and up in one request, and back, both paths
            for host, inside in ((fast_host, fast_sb), (plain_host, plain_sb)):
                root, _ = w.veth(w.host)
                index = plain_host.link_lookup(ifname=root)[0]
                link_request("move", host, "set", index=index, net_ns_fd=sb_fd, ifname="m1")
                moved = by_name(fast_sb, "m1")
                assert moved is not None and not moved.up
                host_fd = env.fd(env.host)
                link_request(
                    "return",
                    inside,
                    "set",
                    index=moved.index,
                    net_ns_fd=host_fd,
                    ifname=root,
                    ifalias="",
                    state="up",
                )
                back = by_name(fast_host, root)
                assert back is not None and back.up and by_name(fast_sb, "m1") is None
        finally:
            os.close(sb_fd)


@pytest.mark.adversarial
def test_a_lazily_opened_socket_is_in_the_namespace_verified_first() -> None:
    """The handle keeps its own duplicate of the namespace fd: when the environment's fd
    is closed and its number reused for another namespace, the pyroute2 socket opened
    later is still in the first namespace, never in the one the number now names."""
    with world() as w:
        first, other = w.sandbox(), w.sandbox()
        only_in_first, _ = w.veth(first)
        env = w.env(first)
        handle = env.rtnl(env.sandbox)
        assert isinstance(handle, LazyRtnl) and not handle.opened
        number = env.fd(env.sandbox)
        os.close(number)
        reused = os.open(netns_path(other), os.O_RDONLY)
        try:
            assert reused == number  # the lowest free number: the same one
            names = {x.get_attr("IFLA_IFNAME") for x in handle.get_links()}
        finally:
            os.close(reused)
            env._fds.clear()  # closed above; the environment must not close it again
        assert handle.opened and only_in_first in names
