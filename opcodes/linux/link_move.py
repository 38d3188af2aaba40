"""Executor of ``linux/link-move/v1``: a host link moved into a verified sandbox.

A moved root carries the move's alias while it is in the sandbox; undo returns it with its
original name, alias, MTU, MAC, addresses and admin state, searching the host, the recorded
sandbox and every pinned namespace when it is not where it was left.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from dmn.opcodes.executor import EffectContext, ExecutorError, Observed, RecoveryObservation
from dmn.opcodes.linux import specs
from dmn.opcodes.linux.effect_handles import (
    Outputs,
    environment,
    link_handle,
    locate_input,
    single,
)
from dmn.opcodes.linux.link_ownership import find_owned, set_alias
from dmn.opcodes.linux.links import LinkState, addresses_of, by_index, by_name, netlink_call, owned
from dmn.opcodes.linux.netns import LinkEnvironment, NamespaceRef
from dmn.opcodes.spec import OpcodeSpec
from dmn.vocabulary.terms import ScopeKind

_log = logging.getLogger("dmn.opcodes.linux.executors")  # the family logger, as before the split


class LinkMove:
    """``linux/link-move/v1``: host link → verified sandbox, renamed; undo returns it intact."""

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
        return {
            "host": env.host.to_json(),
            "sandbox": sandbox.to_json(),
            "original": full.to_json(),
            "target": target,
            "alias": ctx.alias,
        }

    def apply(self, ctx: EffectContext, before: Any) -> None:
        env = environment(ctx)
        sandbox = NamespaceRef.from_json(before["sandbox"])
        original = LinkState.from_json(before["original"])
        host = env.rtnl(env.host)
        link = by_index(host, original.index)
        if link is None or link.name != original.name or link.mac != original.mac:
            raise ExecutorError("E_LINK_CHANGED", f"{original.name} is no longer the captured link")
        if by_name(env.rtnl(sandbox), before["target"]) is not None:
            raise ExecutorError("E_NAME_TAKEN", f"{before['target']!r} exists in the sandbox")
        # one request moves, renames and claims the link: no window where it sits in the
        # sandbox without its ownership alias
        netlink_call(
            f"move {original.name}",
            host.link,
            "set",
            index=link.index,
            net_ns_fd=env.fd(sandbox),
            ifname=before["target"],
            ifalias=before["alias"],
        )
        moved = by_name(env.rtnl(sandbox), before["target"])
        if moved is None or moved.mac != original.mac:
            raise ExecutorError("E_LINK_LOST", f"{before['target']} not found after the move")
        if moved.alias != before["alias"]:
            set_alias(env.rtnl(sandbox), moved.index, before["alias"])

    def _in_sandbox(self, env: LinkEnvironment, before: Any) -> LinkState | None:
        sandbox = NamespaceRef.from_json(before["sandbox"])
        original = LinkState.from_json(before["original"])
        ipr = env.rtnl(sandbox)
        link = owned(ipr, before["alias"], (before["target"],))
        if link is None:
            cand = by_name(ipr, before["target"])
            if cand is not None and cand.mac == original.mac:
                link = cand
        return link

    def observe(self, ctx: EffectContext, before: Any) -> Observed:
        env = environment(ctx)
        link = self._in_sandbox(env, before)
        if link is None:
            return Observed(False, detail="link is not in the sandbox")
        ok = link.name == before["target"] and link.alias == before["alias"]
        sandbox = NamespaceRef.from_json(before["sandbox"])
        out = link_handle(single(ctx, "interface"), ctx, env, sandbox, link, frozenset())
        return Observed(ok, {"interface": (out,)}, "" if ok else f"read back {link.name}")

    def recover(self, ctx: EffectContext, before: Any) -> RecoveryObservation:
        env = environment(ctx)
        try:
            if self._in_sandbox(env, before) is not None:
                return RecoveryObservation.APPLIED
        except ExecutorError:
            pass
        original = LinkState.from_json(before["original"])
        home = by_name(env.rtnl(env.host), original.name)
        if home is not None and home.mac == original.mac:
            return RecoveryObservation.NOT_APPLIED
        return RecoveryObservation.UNCERTAIN

    def undo(self, ctx: EffectContext, before: Any, outputs: Outputs) -> None:
        env = environment(ctx)
        original = LinkState.from_json(before["original"])
        host = env.rtnl(env.host)
        found = self._locate_anywhere(env, before, original)
        if found is None:
            home = by_name(host, original.name)
            if home is not None and home.mac == original.mac:
                found = (env.host, home)
        if found is None:
            if original.kind and not self._sandbox_alive(env, before):
                # a virtual link (veth end, macvlan child) dies with its namespace
                _log.info("effect=%s event=undo-noop reason=sandbox-gone", ctx.effect_id)
                return
            raise ExecutorError(
                "E_LINK_LOST", f"{original.name} ({original.mac}) is in no known namespace"
            )
        ref, link = found
        if not env.is_host(ref):
            netlink_call(
                f"return {link.name}",
                env.rtnl(ref).link,
                "set",
                index=link.index,
                net_ns_fd=env.fd(env.host),
                ifname=original.name,
                ifalias=original.alias,
            )
        elif link.name != original.name:
            # back in the host under its sandbox name: what a physical device does when its
            # sandbox namespace is destroyed; the kernel renames only a link that is down
            if link.up:
                netlink_call(f"down {link.name}", host.link, "set", index=link.index, state="down")
            netlink_call(
                f"rename {link.name}", host.link, "set", index=link.index, ifname=original.name
            )
        restore_root(host, original)

    def _sandbox_alive(self, env: LinkEnvironment, before: Any) -> bool:
        try:
            env.rtnl(NamespaceRef.from_json(before["sandbox"]))
        except ExecutorError:
            return False
        return True

    def _locate_anywhere(
        self, env: LinkEnvironment, before: Any, original: LinkState
    ) -> tuple[NamespaceRef, LinkState] | None:
        sandbox = NamespaceRef.from_json(before["sandbox"])
        try:
            link = self._in_sandbox(env, before)
            if link is not None:
                return sandbox, link
        except ExecutorError:
            pass
        return find_owned(env, before["alias"], None, names=(before["target"], original.name))


def restore_root(host: Any, original: LinkState) -> None:
    """Put a returned root back as captured: name, alias, MTU, MAC, addresses, admin state."""
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
        netlink_call(f"restore {original.name}", host.link, "set", index=link.index, **changes)
    present = {(a.family, a.address, a.prefixlen) for a in addresses_of(host, link.index)}
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
        netlink_call(f"{state} {original.name}", host.link, "set", index=link.index, state=state)
