"""Executor of ``linux/link-move/v1``: a host link moved into a verified sandbox.

A moved root carries the move's alias while it is in the sandbox (a label for people, not a
proof); undo returns it with its original name, alias, MTU, MAC, addresses and admin state,
finding it by the identity the journal recorded: its ifindex in the recorded sandbox, or in
the host when the kernel returned it there.

With ``carryHostConfig`` the capture also records what the link carries
(:mod:`dmn.host.rtnetlink.carried_config`: its permanent global addresses with their flags
and the routes through it) before anything moves; the outcome hands the record on in the
output handle (:data:`~dmn.vocabulary.handles.CARRIED_HOST_CONFIG`) for
``ip/carried-host-config/v1``, and undo, once the link is home and up, puts the recorded
addresses and routes back on it. Entries that cannot go back (the host has them already, or
another route holds a key) are logged (``event=carry-restore-skip``), never a failed undo:
the link itself is home, and nothing the journal did not record is deleted or adopted.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from dmn.host.netns import LinkEnvironment, NamespaceRef
from dmn.host.rtnetlink.carried_config import (
    CarriedConfig,
    read_carried,
    restore_addresses,
    restore_routes,
)
from dmn.host.rtnetlink.link_identity import (
    IDENTITY_KEY,
    find_hardware,
    has_hardware,
    mismatch,
    of_earlier_boot,
    prove,
    record_identity,
    recorded,
    relocated,
)
from dmn.host.rtnetlink.links import (
    LinkState,
    addresses_of,
    by_index,
    by_name,
    link_request,
    netlink_call,
)
from dmn.opcodes.effect_handles import (
    Outputs,
    environment,
    link_handle,
    locate_input,
    single,
)
from dmn.opcodes.executor import EffectContext, ExecutorError, Observed, RecoveryObservation
from dmn.opcodes.linux import specs
from dmn.opcodes.linux.link_ownership import set_alias
from dmn.opcodes.spec import OpcodeSpec
from dmn.vocabulary.handles import CARRIED_HOST_CONFIG, Handle
from dmn.vocabulary.terms import ScopeKind

_log = logging.getLogger("dmn.opcodes.linux.executors")  # the family logger, as before the split


class LinkMove:
    """``linux/link-move/v1``: host link → verified sandbox, renamed; undo returns it intact.

    Identity (see :mod:`link_identity`): the before-image records the root's ifindex, kind,
    permanent MAC, parent device and lower device; the kernel keeps the ifindex across the
    move when it is free in the sandbox, and the observed ifindex in the sandbox is the
    output's ``ifIndex``. Undo and recovery look the link up by that ifindex in the
    recorded sandbox (or, when the sandbox is gone, at its recorded ifindex in the host)
    and compare every recorded kernel-set fact; the name, alias and MAC inside the sandbox
    are the tenant's to change and prove nothing. A link that is not provably ours is
    never moved: the effect is quarantined with ``E_IDENTITY_MISMATCH`` or ``E_LINK_LOST``.
    """

    spec: OpcodeSpec = specs.LINK_MOVE

    def capture(self, ctx: EffectContext) -> Any:
        env = environment(ctx)
        sandbox = env.require_sandbox()
        handle = single(ctx, "interface")
        if handle.scope.kind is not ScopeKind.HOST:
            raise ExecutorError("E_SCOPE", f"handle {handle.id} is not in the host namespace")
        ipr = env.rtnl(env.host)
        _, link = locate_input(env, handle)
        full = dataclasses.replace(link, addresses=addresses_of(ipr, link.index))
        target = str(ctx.parameters["ifName"])
        if by_name(env.rtnl(sandbox), target) is not None:
            raise ExecutorError("E_NAME_TAKEN", f"{target!r} already exists in the sandbox")
        before = {
            "host": env.host.to_json(),
            "sandbox": sandbox.to_json(),
            "original": full.to_json(),
            IDENTITY_KEY: record_identity(env, env.host, full),
            "target": target,
            "alias": ctx.alias,
        }
        if ctx.parameters.get("carryHostConfig") is True:
            before["carried"] = read_carried(ipr, link.index).to_json()
        return before

    def apply(self, ctx: EffectContext, before: Any) -> None:
        env = environment(ctx)
        sandbox = NamespaceRef.from_json(before["sandbox"])
        original = LinkState.from_json(before["original"])
        identity = recorded(before)
        host = env.rtnl(env.host)
        link = prove(env, env.host, identity)
        if link is None or link.name != original.name or link.mac != original.mac:
            raise ExecutorError("E_LINK_CHANGED", f"{original.name} is no longer the captured link")
        if by_name(env.rtnl(sandbox), before["target"]) is not None:
            raise ExecutorError("E_NAME_TAKEN", f"{before['target']!r} exists in the sandbox")
        # one request moves, renames and claims the link: no window where it sits in the
        # sandbox without its ownership alias
        link_request(
            f"move {original.name}",
            host,
            "set",
            index=link.index,
            net_ns_fd=env.fd(sandbox),
            ifname=before["target"],
            ifalias=before["alias"],
        )
        moved = self._in_sandbox(env, before)
        if moved is None:
            raise ExecutorError("E_LINK_LOST", f"{before['target']} not found after the move")
        if moved.alias != before["alias"]:
            set_alias(env.rtnl(sandbox), moved.index, before["alias"])

    def _in_sandbox(
        self, env: LinkEnvironment, before: Any, outputs: Outputs | None = None
    ) -> LinkState | None:
        """The moved link in the recorded sandbox, proven by identity; None when absent.

        With the outputs (the ifindex observed in the sandbox after the move) that ifindex
        is the only place looked at. Without them (a crash or failure before the outcome
        was recorded: the sandbox has run no workload yet) the root's own ifindex is tried,
        which the kernel kept if it was free, and then the target name — each candidate
        must carry every recorded kernel-set fact and the move's alias. Raises
        ``E_IDENTITY_MISMATCH`` when the observed ifindex holds another link, and the
        namespace's error when the sandbox cannot be opened.
        """
        sandbox = NamespaceRef.from_json(before["sandbox"])
        identity = recorded(before)
        index = _observed_index(outputs)
        if index:
            return prove(env, sandbox, relocated(identity, sandbox, index))
        # no outcome recorded: our move, if it happened, gave the link our alias in the same
        # request, so a candidate must carry it *and* every recorded fact (the alias only
        # narrows; other links of the sandbox can share an ifindex, kind and lower by chance)
        for cand in self._candidates(env, sandbox, identity, before["target"]):
            if cand.alias == before["alias"] and not mismatch(
                env, sandbox, relocated(identity, sandbox, cand.index), cand
            ):
                return cand
        return None

    def _candidates(
        self, env: LinkEnvironment, ref: NamespaceRef, identity: dict[str, Any], name: str
    ) -> list[LinkState]:
        ipr = env.rtnl(ref)
        found = [by_index(ipr, int(identity["index"])), by_name(ipr, name)]
        return [link for link in found if link is not None]

    def observe(self, ctx: EffectContext, before: Any) -> Observed:
        env = environment(ctx)
        link = self._in_sandbox(env, before)
        if link is None:
            return Observed(False, detail="link is not in the sandbox")
        ok = link.name == before["target"] and link.alias == before["alias"]
        sandbox = NamespaceRef.from_json(before["sandbox"])
        out = link_handle(single(ctx, "interface"), ctx, env, sandbox, link, frozenset())
        carried = _carried(before)
        if carried is not None:
            out = _with_observation(out, CARRIED_HOST_CONFIG, carried.encode())
        return Observed(ok, {"interface": (out,)}, "" if ok else f"read back {link.name}")

    def recover(self, ctx: EffectContext, before: Any) -> RecoveryObservation:
        env = environment(ctx)
        identity = recorded(before)
        if of_earlier_boot(env, identity):
            # the boot took every namespace with it: hardware is back in the host (undo
            # restores it from the before-image), a virtual root is gone
            if find_hardware(env, identity) is not None:
                return RecoveryObservation.APPLIED
            return (
                RecoveryObservation.UNCERTAIN
                if has_hardware(identity)
                else RecoveryObservation.NOT_APPLIED
            )
        try:
            if self._in_sandbox(env, before) is not None:
                return RecoveryObservation.APPLIED
        except ExecutorError as exc:
            if exc.code == "E_IDENTITY_MISMATCH":
                return RecoveryObservation.UNCERTAIN
        if prove(env, env.host, identity) is not None:
            return RecoveryObservation.NOT_APPLIED
        return RecoveryObservation.UNCERTAIN

    def undo(self, ctx: EffectContext, before: Any, outputs: Outputs) -> None:
        env = environment(ctx)
        original = LinkState.from_json(before["original"])
        identity = recorded(before)
        host = env.rtnl(env.host)
        sandbox = NamespaceRef.from_json(before["sandbox"])
        if of_earlier_boot(env, identity):
            self._undo_after_reboot(ctx, env, before)
            return
        found: tuple[NamespaceRef, LinkState] | None = None
        try:
            link = self._in_sandbox(env, before, outputs)
            if link is not None:
                found = (sandbox, link)
        except ExecutorError as exc:
            if exc.code in ("E_IDENTITY_MISMATCH", "E_IDENTITY_UNRECORDED"):
                raise  # something else sits where our link was: quarantine, touch nothing
            # the sandbox cannot be opened (gone, stale pin): look in the host
        if found is None:
            home = prove(env, env.host, identity)  # a device the kernel returned to the host
            if home is not None:
                found = (env.host, home)
        if found is None:
            found = self._in_other_pin(env, before, outputs)
        if found is None:
            if original.kind and not self._sandbox_alive(env, before):
                # a virtual link (veth end, macvlan child) dies with its namespace
                _log.info("effect=%s event=undo-noop reason=sandbox-gone", ctx.effect_id)
                return
            raise ExecutorError(
                "E_LINK_LOST",
                f"{original.name} (ifindex {identity['index']}) is neither at its recorded "
                "ifindex in the sandbox nor back in the host",
            )
        ref, link = found
        if not env.is_host(ref):
            # one request moves it home, renames it, restores its alias and, when it was up,
            # brings it up (the kernel applies the flags after the move and the rename; the
            # move itself leaves a device down): restore_root then finds nothing to change
            link_request(
                f"return {link.name}",
                env.rtnl(ref),
                "set",
                index=link.index,
                net_ns_fd=env.fd(env.host),
                ifname=original.name,
                ifalias=original.alias,
                **({"state": "up"} if original.up else {}),
            )
        elif link.name != original.name:
            _rename_home(host, link, original.name)
        restore_root(host, original, _carried(before), ctx.effect_id)

    def _undo_after_reboot(self, ctx: EffectContext, env: LinkEnvironment, before: Any) -> None:
        """Undo of a move recorded in an earlier boot: the sandbox died with that boot. A
        virtual root died too; hardware came back to the host under a name and ifindex of
        this boot and is found by its permanent MAC / parent device, renamed to its recorded
        name and restored from the before-image. Hardware that is not in the host now is
        E_LINK_LOST (quarantined: someone else has it)."""
        identity = recorded(before)
        original = LinkState.from_json(before["original"])
        host = env.rtnl(env.host)
        link = find_hardware(env, identity)
        if link is None:
            if has_hardware(identity):
                raise ExecutorError(
                    "E_LINK_LOST",
                    f"{original.name}: its hardware is not in the host after the reboot",
                )
            _log.info("effect=%s event=undo-noop reason=earlier-boot", ctx.effect_id)
            return
        if link.name != original.name:
            _rename_home(host, link, original.name)
        restore_root(host, original, _carried(before), ctx.effect_id)

    def _in_other_pin(
        self, env: LinkEnvironment, before: Any, outputs: Outputs
    ) -> tuple[NamespaceRef, LinkState] | None:
        """The link moved on into another namespace the journal has pinned: found only at
        its recorded ifindex there, with every recorded kernel-set fact and the move's alias
        (another sandbox is another tenant's: a link there is ours only with both; one that
        differs is simply not ours and is left alone)."""
        identity = recorded(before)
        sandbox = NamespaceRef.from_json(before["sandbox"])
        indexes = dict.fromkeys(i for i in (_observed_index(outputs), identity["index"]) if i)
        for ref in env.known():
            if env.is_host(ref) or ref.identity == sandbox.identity:
                continue
            for index in indexes:
                try:
                    link = prove(env, ref, relocated(identity, ref, int(index)))
                except ExecutorError:
                    continue
                if link is not None and link.alias == before["alias"]:
                    return ref, link
        return None

    def _sandbox_alive(self, env: LinkEnvironment, before: Any) -> bool:
        try:
            env.rtnl(NamespaceRef.from_json(before["sandbox"]))
        except ExecutorError:
            return False
        return True


def _rename_home(host: Any, link: LinkState, name: str) -> None:
    """Back in the host under another name (a device whose sandbox namespace was destroyed,
    or after a reboot): rename it; the kernel renames only a link that is down."""
    if link.up:
        link_request(f"down {link.name}", host, "set", index=link.index, state="down")
    link_request(f"rename {link.name}", host, "set", index=link.index, ifname=name)


def _observed_index(outputs: Outputs | None) -> int:
    """The ifindex the move's outcome recorded in the sandbox (0: no outcome recorded)."""
    for handle in (outputs or {}).get("interface", ()):
        return int(handle.observations.get("ifIndex", 0) or 0)
    return 0


def _carried(before: Any) -> CarriedConfig | None:
    """What the move recorded to carry; None when it carries nothing."""
    data = before.get("carried")
    return CarriedConfig.from_json(data) if isinstance(data, dict) else None


def _with_observation(handle: Handle, key: str, value: str) -> Handle:
    return dataclasses.replace(handle, observations={**handle.observations, key: value})


def restore_root(
    host: Any, original: LinkState, carried: CarriedConfig | None = None, effect_id: str = ""
) -> None:
    """Put a returned root back as captured: name, alias, MTU, MAC, addresses, admin state
    and, when the move carried them, the recorded addresses (with their flags) and routes."""
    link = by_name(host, original.name)
    if link is None:
        raise ExecutorError("E_LINK_LOST", f"{original.name} did not arrive in the host")
    changes: dict[str, Any] = {}
    if link.mtu != original.mtu:
        changes["mtu"] = original.mtu
    if original.mac and link.mac.lower() != original.mac.lower():
        changes["address"] = original.mac
    if link.alias != original.alias:
        changes["ifalias"] = original.alias
    if changes:
        link_request(f"restore {original.name}", host, "set", index=link.index, **changes)
    skipped: list[str] = []
    if carried is not None:
        # before the plain restore below, which would add these without their flags
        skipped += restore_addresses(host, link.index, carried)
    present = (
        {(a.family, a.address, a.prefixlen) for a in addresses_of(host, link.index)}
        if original.addresses
        else set()  # nothing recorded, nothing to put back: no address dump
    )
    for addr in original.addresses:
        if (addr.family, addr.address, addr.prefixlen) not in present:
            netlink_call(
                f"restore address {addr.address}",
                host.addr,
                "add",
                index=link.index,
                address=addr.address,
                prefixlen=addr.prefixlen,
                family=addr.family,
            )
    now = by_index(host, link.index)
    if now is not None and now.up != original.up:
        state = "up" if original.up else "down"
        link_request(f"{state} {original.name}", host, "set", index=link.index, state=state)
    if carried is not None:
        # after the addresses and the admin state: the kernel refuses a gateway it cannot reach
        skipped += restore_routes(host, link.index, carried)
    for why in skipped:
        _log.warning(
            "effect=%s event=carry-restore-skip link=%s entry=%r", effect_id, original.name, why
        )
