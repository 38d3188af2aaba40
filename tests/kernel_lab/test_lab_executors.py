"""bond, 802.1Q and ipvlan executors against a stock kernel (inside the kernel lab VM).

design §4.3's dual-vf-bond-vlan with veth ends standing in for the two VFs: both roots are
moved into the sandbox, bonded active-backup, a VLAN goes on the bond, traffic crosses it to a
peer namespace, then everything is undone in reverse and the host is as before.
"""

from __future__ import annotations

import pytest

from dmn.host.rtnetlink.links import by_name
from dmn.opcodes.executor import EffectContext, ExecutorError
from dmn.vocabulary.terms import Access
from tests.kernel.world import EXECUTORS, add_address, drive, host_handle, link, ping, world

pytestmark = pytest.mark.kernel_lab

MOVE = "linux/link-move/v1"
CONFIGURE = "linux/link-configure/v1"
BOND = "linux/create-bond/v1"
ATTACH = "linux/attach-master/v1"
VLAN = "linux/create-vlan/v1"
HOLD = "share/hold-parent/v1"
IPVLAN = "linux/create-ipvlan/v1"
MACVLAN = "linux/create-macvlan/v1"


def test_dual_root_bond_with_vlan_carries_traffic_and_undoes_cleanly() -> None:
    with world() as w:
        sandbox, peer_ns = w.sandbox(), w.sandbox()
        host, peer = w.ipr(w.host), w.ipr(peer_ns)
        a1, b1 = w.veth(w.host)
        a2, b2 = w.veth(w.host)
        for b in (b1, b2):
            host.link("set", index=host.link_lookup(ifname=b)[0], net_ns_fd=peer_ns)
        peer.link("add", ifname="br0", kind="bridge")
        br = peer.link_lookup(ifname="br0")[0]
        for b in (b1, b2):
            peer.link("set", index=peer.link_lookup(ifname=b)[0], master=br, state="up")
        peer.link("set", index=br, state="up")
        peer.link("add", ifname="br0.100", kind="vlan", link=br, vlan_id=100)
        add_address(peer, "br0.100", "10.79.0.1/24")
        baseline = w.snapshot(w.host)

        env = w.env(sandbox)
        done = []

        def step(kind, inputs, params, effect):  # type: ignore[no-untyped-def]
            d = drive(env, kind, inputs, params, operation="topo", effect=effect)
            done.append(d)
            return d

        left = step(
            MOVE,
            {"interface": (host_handle(host, a1, Access.EXCLUSIVE_CONFIGURE),)},
            {"ifName": "vfleft"},
            "left",
        )
        right = step(
            MOVE,
            {"interface": (host_handle(host, a2, Access.EXCLUSIVE_CONFIGURE),)},
            {"ifName": "vfright"},
            "right",
        )
        bond = step(
            BOND,
            {},
            {
                "ifName": "bond0",
                "mode": "active-backup",
                "miimon": 100,
                "failOverMac": "active",
                "mtu": 1500,
            },
            "bond",
        )
        for i, member in enumerate((left, right)):
            step(
                ATTACH,
                {"master": (bond.output(),), "member": (member.output(),)},
                {},
                f"attach[{i}]",
            )
        step(CONFIGURE, {"interface": (bond.output(),)}, {"up": True}, "bond-up")
        vlan = step(
            VLAN,
            {"parent": (bond.output(),)},
            {"ifName": "tenant100", "vlanId": 100, "mtu": 1500},
            "tenant",
        )
        step(CONFIGURE, {"interface": (vlan.output(),)}, {"up": True}, "tenant-up")

        sb = w.ipr(sandbox)
        bond0 = link(sb, "bond0")
        assert bond0.info["IFLA_BOND_MODE"] == 1 and bond0.info["IFLA_BOND_MIIMON"] == 100
        assert link(sb, "vfleft").master == bond0.index == link(sb, "vfright").master
        assert link(sb, "tenant100").lower == bond0.index
        add_address(sb, "tenant100", "10.79.0.2/24")
        assert ping(sandbox, "10.79.0.1")

        for d in reversed(done):
            d.undo()
        assert {link_.name for link_ in _links(sb)} == {"lo"}
        assert w.snapshot(w.host) == baseline


def _links(ipr):  # type: ignore[no-untyped-def]
    from dmn.host.rtnetlink.links import all_links

    return all_links(ipr)


def test_vlan_refusals_mtu_above_parent_and_duplicate_tag() -> None:
    with world() as w:
        sandbox = w.sandbox()
        host = w.ipr(w.host)
        root, _ = w.veth(w.host, mtu=1400)
        env = w.env(sandbox)
        moved = drive(
            env,
            MOVE,
            {"interface": (host_handle(host, root, Access.CREATE_CHILD),)},
            {"ifName": "up0"},
        )
        parent = moved.output()
        ctx = EffectContext(
            "op1", "v", {"parent": (parent,)}, {"ifName": "v1", "vlanId": 7, "mtu": 1500}, env
        )
        with pytest.raises(ExecutorError) as err:
            EXECUTORS[VLAN].capture(ctx)
        assert err.value.code == "E_MTU_EXCEEDS_PARENT"
        first = drive(
            env, VLAN, {"parent": (parent,)}, {"ifName": "v1", "vlanId": 7, "mtu": 1400}, effect="v"
        )
        again = EffectContext(
            "op1", "w", {"parent": (parent,)}, {"ifName": "v2", "vlanId": 7, "mtu": 1400}, env
        )
        with pytest.raises(ExecutorError) as err:
            EXECUTORS[VLAN].capture(again)
        assert err.value.code == "E_VLAN_TAKEN"
        first.undo()
        moved.undo()


def test_bond_member_with_foreign_master_or_other_mtu_is_refused() -> None:
    with world() as w:
        sandbox = w.sandbox()
        host = w.ipr(w.host)
        r1, _ = w.veth(w.host)
        r2, _ = w.veth(w.host, mtu=1400)
        env = w.env(sandbox)
        m1 = drive(
            env,
            MOVE,
            {"interface": (host_handle(host, r1, Access.ATTACH_MEMBER),)},
            {"ifName": "m1"},
        )
        m2 = drive(
            env,
            MOVE,
            {"interface": (host_handle(host, r2, Access.ATTACH_MEMBER),)},
            {"ifName": "m2"},
            effect="e2",
        )
        params = {
            "ifName": "bond0",
            "mode": "active-backup",
            "miimon": 100,
            "failOverMac": "active",
            "mtu": 1500,
        }
        bond = drive(env, BOND, {}, params, effect="bond")
        sb = w.ipr(sandbox)
        sb.link("add", ifname="foreign0", kind="bond", bond_mode=1)
        sb.link(
            "set",
            index=sb.link_lookup(ifname="m1")[0],
            state="down",
        )
        sb.link(
            "set", index=sb.link_lookup(ifname="m1")[0], master=sb.link_lookup(ifname="foreign0")[0]
        )
        for member, code in ((m1, "E_FOREIGN_MASTER"), (m2, "E_MTU_MISMATCH")):
            ctx = EffectContext(
                "op1", "att", {"master": (bond.output(),), "member": (member.output(),)}, {}, env
            )
            with pytest.raises(ExecutorError) as err:
                EXECUTORS[ATTACH].capture(ctx)
            assert err.value.code == code
        assert by_name(sb, "foreign0") is not None
        sb.link("set", index=sb.link_lookup(ifname="m1")[0], master=0)
        sb.link("del", index=sb.link_lookup(ifname="foreign0")[0])
        bond.undo()
        m2.undo()
        m1.undo()


def test_two_ipvlan_shares_talk_and_macvlan_on_that_parent_is_refused() -> None:
    with world() as w:
        sb1, sb2 = w.sandbox(), w.sandbox()
        host = w.ipr(w.host)
        parent, _ = w.veth(w.host)
        baseline = w.snapshot(w.host)
        done = []
        for i, (sb, addr) in enumerate(((sb1, "10.80.0.1/24"), (sb2, "10.80.0.2/24"))):
            env = w.env(sb)
            op = f"ipv{i}"
            held = drive(
                env,
                HOLD,
                {"parent": (host_handle(host, parent, Access.CREATE_CHILD),)},
                {"childKind": "ipvlan", "mode": "l2"},
                operation=op,
                effect="hold",
            )
            child = drive(
                env,
                IPVLAN,
                {"parent": (held.output("parent"),)},
                {"mode": "l2", "mtu": 1500},
                operation=op,
                effect="child",
            )
            moved = drive(
                env,
                MOVE,
                {"interface": (child.output(),)},
                {"ifName": "net1"},
                operation=op,
                effect="move",
            )
            add_address(w.ipr(sb), "net1", addr)
            done.append((held, child, moved))
        assert ping(sb1, "10.80.0.2")
        env = w.env(pins=(sb1, sb2))  # the children now live in the pinned sandboxes
        for kind, params, code in (
            (HOLD, {"childKind": "macvlan", "mode": "bridge"}, "E_FAMILY_CONFLICT"),
        ):
            ctx = EffectContext(
                "op9",
                "h",
                {"parent": (host_handle(host, parent, Access.CREATE_CHILD),)},
                params,
                env,
            )
            with pytest.raises(ExecutorError) as err:
                EXECUTORS[kind].capture(ctx)
            assert err.value.code == code
        held0 = done[0][0]
        mctx = EffectContext(
            "op9", "c", {"parent": (held0.output("parent"),)}, {"mode": "bridge", "mtu": 1500}, env
        )
        with pytest.raises(ExecutorError) as err:
            EXECUTORS[MACVLAN].capture(mctx)
        assert err.value.code == "E_FAMILY_CONFLICT"
        for held, child, moved in reversed(done):
            moved.undo()
            child.undo()
            held.undo()
        assert w.snapshot(w.host) == baseline
