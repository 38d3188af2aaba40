"""The executors' fast link reader decodes exactly what pyroute2 decodes (real kernel).

``LinkEnvironment`` sockets read links through ``link_reader.LinkReader``; tests and tools
that pass a plain IPRoute go through pyroute2. Both must yield the same :class:`LinkState`
for every kind the executors read back (here: veth, macvlan in the host and moved into a
sandbox, a link with an alias, a bridge master), so before-images and ownership proofs do
not depend on which path read them.
"""

from __future__ import annotations

import pytest

from dmn.host.netns import LazyRtnl, NamespaceRtnl
from dmn.host.rtnetlink.links import addresses_of, all_links, by_index, by_name
from tests.kernel.scratch import netns_path, unique
from tests.kernel.world import world

pytestmark = pytest.mark.netns
MACVLAN_NAMES = {1: "private", 2: "vepa", 4: "bridge"}


def _without_info(state: object) -> dict[str, object]:
    data = dict(state.to_json())  # type: ignore[attr-defined]
    data.pop("info")
    return data


def test_reader_matches_pyroute2_for_every_field() -> None:
    with world() as w:
        sb = w.sandbox()
        plain_host, plain_sb = w.ipr(w.host), w.ipr(sb)
        a, b = w.veth(w.host, mtu=1400)
        ib = plain_host.link_lookup(ifname=b)[0]
        br = unique("br")
        plain_host.link("add", ifname=br, kind="bridge")
        ia = plain_host.link_lookup(ifname=a)[0]
        plain_host.link(
            "set", index=ia, ifalias="dmn:op:eff", master=plain_host.link_lookup(ifname=br)[0]
        )
        for mode in ("bridge", "private"):
            plain_host.link("add", ifname=unique("mv"), kind="macvlan", link=ib, macvlan_mode=mode)
        moved = unique("mv")
        plain_host.link("add", ifname=moved, kind="macvlan", link=ib, macvlan_mode="vepa")
        with open(netns_path(sb)) as sbfd:
            plain_host.link(
                "set", index=plain_host.link_lookup(ifname=moved)[0], net_ns_fd=sbfd.fileno()
            )
        env = w.env(sb)
        for ns, plain in ((w.host, plain_host), (sb, plain_sb)):
            fast = env.rtnl(env.host if ns == w.host else env.sandbox)
            assert isinstance(fast, NamespaceRtnl | LazyRtnl) and fast.link_reader is not None
            slow = sorted(all_links(plain), key=lambda x: x.index)
            quick = sorted(all_links(fast), key=lambda x: x.index)
            assert [_without_info(x) for x in quick] == [_without_info(x) for x in slow]
            for x, y in zip(quick, slow, strict=True):
                full_fast = by_name(fast, x.name, with_addresses=True)
                full_slow = by_name(plain, y.name, with_addresses=True)
                assert full_fast is not None and full_slow is not None
                assert _without_info(full_fast) == _without_info(full_slow)
                assert _without_info(by_index(fast, x.index)) == _without_info(y)
                # the reader decodes only the info fields executors check; each agrees
                for key, value in x.info.items():
                    assert y.info[key] in (value, MACVLAN_NAMES.get(value))
                if x.kind == "macvlan":
                    assert x.info["IFLA_MACVLAN_MODE"] in MACVLAN_NAMES
            kinds = ("macvlan", "veth")
            by_kind = sorted(all_links(fast, kinds), key=lambda x: x.index)
            assert by_kind == [x for x in quick if x.kind in kinds]
            assert all_links(fast, ("ipvlan",)) == []  # kernel filter or not, result filtered
        in_sb = [x for x in all_links(env.rtnl(env.sandbox)) if x.kind == "macvlan"]
        assert len(in_sb) == 1 and in_sb[0].link_netnsid >= 0
        assert by_name(env.rtnl(env.host), unique("none")) is None
        assert by_index(env.rtnl(env.host), 999999) is None


def test_reader_addresses_match_pyroute2() -> None:
    """The lean address read (restore and capture of a moved root use it) reports the same
    addresses as pyroute2's get_addr: IPv4 and IPv6, several per link, only the asked link's,
    IPv6 link-local left out by both."""
    with world() as w:
        plain = w.ipr(w.host)
        a, b = w.veth(w.host)
        ia, ib = plain.link_lookup(ifname=a)[0], plain.link_lookup(ifname=b)[0]
        for address, prefix, family in (
            ("10.1.2.3", 24, 2),
            ("10.9.9.9", 32, 2),
            ("fd00::5", 64, 10),
            ("2001:db8::1:0:0:1", 128, 10),
        ):
            plain.addr("add", index=ia, address=address, prefixlen=prefix, family=family)
        plain.addr("add", index=ib, address="10.7.7.7", prefixlen=8)
        for index in (ia, ib):
            plain.link("set", index=index, state="up")  # the kernel adds fe80:: on up
        env = w.env()
        fast = env.rtnl(env.host)
        assert isinstance(fast, NamespaceRtnl | LazyRtnl) and fast.link_reader is not None
        for index in (ia, ib):
            assert addresses_of(fast, index) == addresses_of(plain, index)
        assert [x.address for x in addresses_of(fast, ia)] == [
            "10.1.2.3",
            "10.9.9.9",
            "2001:db8::1:0:0:1",
            "fd00::5",
        ]
        assert [x.address for x in addresses_of(fast, ib)] == ["10.7.7.7"]
