"""Executors of a bond: ``linux/create-bond/v1`` (active-backup, explicit miimon,
fail_over_mac=active) and ``linux/attach-master/v1`` (enslave one member; undo releases and
restores it).
"""

from __future__ import annotations

from typing import Any

from dmn.host.netns import LinkEnvironment, NamespaceRef
from dmn.host.rtnetlink.link_identity import NAMESPACE_LOST, prove, record_identity, recorded
from dmn.host.rtnetlink.links import LinkState, by_index, by_name, netlink_call, nonce_name
from dmn.opcodes.effect_handles import Outputs, environment, locate_input, single
from dmn.opcodes.executor import EffectContext, ExecutorError, Observed, RecoveryObservation
from dmn.opcodes.linux import specs
from dmn.opcodes.linux.created_link import _CreatedLink
from dmn.opcodes.spec import OpcodeSpec

BOND_MODE_ACTIVE_BACKUP = 1
FAIL_OVER_MAC_ACTIVE = 1


class CreateBond(_CreatedLink):
    """``linux/create-bond/v1``: active-backup, explicit miimon, fail_over_mac=active."""

    spec: OpcodeSpec = specs.CREATE_BOND
    kind = "bond"

    def capture(self, ctx: EffectContext) -> Any:
        env = environment(ctx)
        sandbox = env.require_sandbox()
        name = str(ctx.parameters["ifName"])
        if by_name(env.rtnl(sandbox), name) is not None:
            raise ExecutorError("E_NAME_TAKEN", f"{name!r} already exists in the sandbox")
        return {
            "netns": sandbox.to_json(),
            "final": name,
            "nonce": nonce_name(),
            "alias": ctx.alias,
            **self._planned(env, sandbox),
        }

    def _check(self, ctx: EffectContext, env: LinkEnvironment, before: Any) -> None:
        if by_name(env.rtnl(self._target_ref(env, before)), before["final"]) is not None:
            raise ExecutorError("E_NAME_TAKEN", f"{before['final']!r} already exists")

    def _create(self, ctx: EffectContext, ipr: Any, before: Any) -> None:
        netlink_call(
            "create bond",
            ipr.link,
            "add",
            ifname=before["nonce"],
            index=self._index(before),
            kind="bond",
            bond_mode=BOND_MODE_ACTIVE_BACKUP,
            bond_miimon=int(ctx.parameters["miimon"]),
            bond_fail_over_mac=FAIL_OVER_MAC_ACTIVE,
            mtu=int(ctx.parameters["mtu"]),
        )

    def _verify(self, ctx: EffectContext, link: LinkState, before: Any) -> str:
        info = link.info
        if info.get("IFLA_BOND_MODE") != BOND_MODE_ACTIVE_BACKUP:
            return f"bond mode {info.get('IFLA_BOND_MODE')} is not active-backup"
        if info.get("IFLA_BOND_MIIMON") != int(ctx.parameters["miimon"]):
            return f"miimon {info.get('IFLA_BOND_MIIMON')} != {ctx.parameters['miimon']}"
        if info.get("IFLA_BOND_FAIL_OVER_MAC") != FAIL_OVER_MAC_ACTIVE:
            return f"fail_over_mac {info.get('IFLA_BOND_FAIL_OVER_MAC')} is not active"
        return super()._verify(ctx, link, before)


class AttachMaster:
    """``linux/attach-master/v1``: enslave one member; undo releases it and restores it.

    The master must be a link an effect of this driver created (its handle's provenance
    names that effect, and handles come from the journal, never from the kernel); a master
    alias starting with ``dmn:`` proves nothing, as a tenant can set it. The before-image
    records both links' identities (:mod:`link_identity`); apply, recovery and undo find
    them at their recorded ifindexes and compare kind, lower and hardware facts — a member
    or master that is not provably the recorded one is never released or reconfigured.
    """

    spec: OpcodeSpec = specs.ATTACH_MASTER

    def capture(self, ctx: EffectContext) -> Any:
        env = environment(ctx)
        handle = single(ctx, "master")
        if not handle.provenance.effect or handle.provenance.operation != ctx.operation_id:
            raise ExecutorError(
                "E_NOT_OWNED", f"master {handle.id} was not created by this operation"
            )
        master_ref = env.ref_for_scope(handle.scope)
        master = by_index(env.rtnl(master_ref), int(handle.observations.get("ifIndex", 0) or 0))
        if master is None or master.kind != "bond":
            raise ExecutorError(
                "E_NOT_OWNED", f"master {handle.id}: no bond at its recorded ifindex"
            )
        member_ref, member = locate_input(env, single(ctx, "member"))
        if master_ref.identity != member_ref.identity:
            raise ExecutorError(
                "E_NOT_SAME_SANDBOX", "member and master are in different namespaces"
            )
        self._precheck(master, member)
        full = by_index(env.rtnl(member_ref), member.index, with_addresses=True)
        assert full is not None
        return {
            "netns": member_ref.to_json(),
            "master": master.to_json(),
            "member": full.to_json(),
            "masterIdentity": record_identity(env, member_ref, master),
            "memberIdentity": record_identity(env, member_ref, full),
        }

    def _precheck(self, master: LinkState, member: LinkState) -> None:
        if member.master and member.master != master.index:
            raise ExecutorError("E_FOREIGN_MASTER", f"{member.name} already has a master")
        if member.mtu != master.mtu:
            raise ExecutorError(
                "E_MTU_MISMATCH", f"member {member.name} mtu {member.mtu} != bond {master.mtu}"
            )

    def _proven(self, env: LinkEnvironment, before: Any, key: str) -> LinkState | None:
        return prove(env, NamespaceRef.from_json(before["netns"]), recorded(before, key))

    def _live(self, env: LinkEnvironment, before: Any) -> tuple[Any, LinkState, LinkState]:
        ipr = env.rtnl(NamespaceRef.from_json(before["netns"]))
        rec_master = LinkState.from_json(before["master"])
        rec_member = LinkState.from_json(before["member"])
        master = self._proven(env, before, "masterIdentity")
        member = self._proven(env, before, "memberIdentity")
        if master is None:
            raise ExecutorError("E_LINK_CHANGED", f"bond {rec_master.name} is gone")
        if member is None:
            raise ExecutorError("E_LINK_CHANGED", f"member {rec_member.name} is gone")
        return ipr, master, member

    def apply(self, ctx: EffectContext, before: Any) -> None:
        env = environment(ctx)
        ipr, master, member = self._live(env, before)
        if member.master == master.index:
            return
        self._precheck(master, member)
        if member.up:  # the bonding driver refuses to enslave a device that is up
            netlink_call(f"down {member.name}", ipr.link, "set", index=member.index, state="down")
        netlink_call(
            f"enslave {member.name}", ipr.link, "set", index=member.index, master=master.index
        )

    def observe(self, ctx: EffectContext, before: Any) -> Observed:
        env = environment(ctx)
        _, master, member = self._live(env, before)
        ok = member.master == master.index
        return Observed(ok, {}, "" if ok else f"{member.name} is not a member of {master.name}")

    def recover(self, ctx: EffectContext, before: Any) -> RecoveryObservation:
        env = environment(ctx)
        try:
            _, master, member = self._live(env, before)
        except ExecutorError:
            return RecoveryObservation.UNCERTAIN
        if member.master == master.index:
            return RecoveryObservation.APPLIED
        if not member.master:
            return RecoveryObservation.NOT_APPLIED
        return RecoveryObservation.UNCERTAIN

    def undo(self, ctx: EffectContext, before: Any, outputs: Outputs) -> None:
        env = environment(ctx)
        try:
            ipr = env.rtnl(NamespaceRef.from_json(before["netns"]))
        except ExecutorError as exc:
            if exc.code not in NAMESPACE_LOST:
                raise
            # the bond died with its namespace (destroyed, or an earlier boot); a member
            # that is hardware went back to the host, where its move's undo restores it
            return
        rec_master = recorded(before, "masterIdentity")
        rec_member = LinkState.from_json(before["member"])
        member = self._proven(env, before, "memberIdentity")
        if member is None:
            raise ExecutorError("E_LINK_LOST", f"member {rec_member.name} is gone")
        if member.master and member.master == int(rec_master["index"]):
            netlink_call(f"release {member.name}", ipr.link, "set", index=member.index, master=0)
        elif member.master:
            raise ExecutorError("E_FOREIGN_MASTER", f"{member.name} now has a foreign master")
        member = by_index(ipr, member.index)
        assert member is not None
        changes: dict[str, Any] = {}
        if member.mtu != rec_member.mtu:
            changes["mtu"] = rec_member.mtu
        if rec_member.mac and member.mac.lower() != rec_member.mac.lower():
            changes["address"] = rec_member.mac
        if changes:
            netlink_call(f"restore {member.name}", ipr.link, "set", index=member.index, **changes)
        member = by_index(ipr, member.index)
        if member is not None and member.up != rec_member.up:
            state = "up" if rec_member.up else "down"
            netlink_call(f"{state} {member.name}", ipr.link, "set", index=member.index, state=state)
