"""A hostile tenant against attach-master, in the kernel lab VM (the bonding module).

The tenant-side cases that need no bond are in ``tests/kernel/test_tenant_identity.py``.
"""

from __future__ import annotations

import pytest

from dmn.host.rtnetlink.links import by_index, by_name
from dmn.opcodes.executor import EffectContext, ExecutorError
from dmn.vocabulary.handles import Handle, Provenance
from dmn.vocabulary.terms import Access
from tests.kernel.world import EXECUTORS, drive, host_handle, link, world

pytestmark = [pytest.mark.kernel_lab, pytest.mark.adversarial]

BOND = "linux/create-bond/v1"
ATTACH = "linux/attach-master/v1"


def test_attach_master_refuses_a_master_that_only_has_a_dmn_alias() -> None:
    """attach-master accepted any master whose alias starts with ``dmn:``, which a tenant
    can set on a bond of its own. The master must be a link an effect of this operation
    created (its handle's provenance, from the journal)."""
    with world() as w:
        sandbox = w.sandbox()
        sb = w.ipr(sandbox)
        sb.link("add", ifname="tbond0", kind="bond", bond_mode=1)
        sb.link("add", ifname="m0", kind="veth", peer="m1")
        bond = link(sb, "tbond0")
        sb.link("set", index=bond.index, ifalias="dmn:op9:create")
        env = w.env(sandbox)
        scope = env.scope_of(env.sandbox)  # type: ignore[arg-type]

        def handle(name: str, hid: str, prov: Provenance) -> Handle:
            got = link(sb, name)
            return Handle(
                id=hid,
                type=host_handle(w.ipr(w.host), "lo", Access.READ).type,
                inventory_id=f"link:{got.alias or got.name}",
                scope=scope,
                accesses=frozenset({Access.READ, Access.EXCLUSIVE_CONFIGURE}),
                link_type=host_handle(w.ipr(w.host), "lo", Access.READ).link_type,
                provenance=prov,
                observations={"ifName": got.name, "ifIndex": got.index, "alias": got.alias},
            )

        ctx = EffectContext(
            "op1",
            "attach",
            {
                "master": (handle("tbond0", "m", Provenance(claim_uid="c")),),
                "member": (handle("m0", "n", Provenance(claim_uid="c")),),
            },
            {},
            env,
        )
        with pytest.raises(ExecutorError) as err:
            EXECUTORS[ATTACH].capture(ctx)
        assert err.value.code == "E_NOT_OWNED"
        assert link(sb, "m0").master == 0


def test_attach_master_undo_finds_a_renamed_member_by_identity() -> None:
    """The tenant renames an enslaved member and gives its name to another link. Undo used
    to refuse (E_LINK_LOST: the name no longer matched) or could act on the name; now the
    member at its recorded ifindex is released and restored, the other link untouched."""
    with world() as w:
        sandbox = w.sandbox()
        sb = w.ipr(sandbox)
        sb.link("add", ifname="mem0", kind="veth", peer="mem1")
        env = w.env(sandbox)
        bond = drive(
            env,
            BOND,
            {},
            {
                "ifName": "bond0",
                "mode": "active-backup",
                "miimon": 100,
                "failOverMac": "active",
                "mtu": 1500,
            },
            effect="create",
        )
        member_link = link(sb, "mem0")
        member = Handle(
            id="mem",
            type=bond.output().type,
            inventory_id="netdev:mem0",
            scope=bond.output().scope,
            accesses=frozenset({Access.READ, Access.EXCLUSIVE_CONFIGURE}),
            link_type=bond.output().link_type,
            provenance=Provenance(claim_uid="c"),
            observations={"ifName": "mem0", "ifIndex": member_link.index, "mac": member_link.mac},
        )
        attach = drive(
            env, ATTACH, {"master": (bond.output(),), "member": (member,)}, {}, effect="attach"
        )
        assert link(sb, "mem0").master == link(sb, "bond0").index
        for index, name in ((member_link.index, "gone0"), (link(sb, "mem1").index, "mem0")):
            sb.link("set", index=index, state="down")  # the kernel renames only down links
            sb.link("set", index=index, ifname=name)

        attach.undo()

        released = by_index(sb, member_link.index)
        assert released is not None and released.master == 0 and released.name == "gone0"
        assert link(sb, "mem0").index != member_link.index
        bond.undo()
        assert by_name(sb, "bond0") is None
