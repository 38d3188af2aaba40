"""Executor of ``linux/link-configure/v1``: MTU and admin state of a sandbox link."""

from __future__ import annotations

import logging
from typing import Any

from dmn.host.netns import LinkEnvironment, NamespaceRef
from dmn.host.rtnetlink.link_identity import (
    IDENTITY_KEY,
    NAMESPACE_LOST,
    prove,
    record_identity,
    recorded,
)
from dmn.host.rtnetlink.links import LinkState, link_request
from dmn.opcodes.effect_handles import (
    Outputs,
    environment,
    link_handle,
    locate_input,
    single,
)
from dmn.opcodes.executor import EffectContext, ExecutorError, Observed, RecoveryObservation
from dmn.opcodes.linux import specs
from dmn.opcodes.spec import OpcodeSpec
from dmn.vocabulary.terms import ScopeKind

_log = logging.getLogger("dmn.opcodes.linux.executors")  # the family logger, as before the split


class LinkConfigure:
    """``linux/link-configure/v1``: MTU and admin state of a sandbox link; undo restores both."""

    spec: OpcodeSpec = specs.LINK_CONFIGURE

    def capture(self, ctx: EffectContext) -> Any:
        env = environment(ctx)
        handle = single(ctx, "interface")
        if handle.scope.kind is not ScopeKind.SANDBOX:
            raise ExecutorError("E_SCOPE", f"handle {handle.id} is not in a sandbox")
        ref, link = locate_input(env, handle)
        return {
            "netns": ref.to_json(),
            "link": link.to_json(),
            IDENTITY_KEY: record_identity(env, ref, link),
        }

    def _link(self, env: LinkEnvironment, before: Any) -> tuple[Any, LinkState | None]:
        """The link at its recorded ifindex in the recorded namespace when it has the recorded
        identity (kind, lower, hardware facts; never name, alias or MAC, which the tenant
        can change); None when that ifindex is free; ``E_IDENTITY_MISMATCH`` when another
        link holds it."""
        ref = NamespaceRef.from_json(before["netns"])
        return env.rtnl(ref), prove(env, ref, recorded(before))

    def apply(self, ctx: EffectContext, before: Any) -> None:
        env = environment(ctx)
        ipr, link = self._link(env, before)
        if link is None:
            raise ExecutorError("E_LINK_CHANGED", "the captured link is gone or renamed")
        mtu, up = ctx.parameters.get("mtu"), ctx.parameters.get("up")
        changes: dict[str, Any] = {}
        if mtu is not None and link.mtu != mtu:
            changes["mtu"] = int(mtu)
        if up is not None and link.up != bool(up):
            changes["state"] = "up" if up else "down"
        if changes:  # one request: the kernel applies the MTU before the admin state
            link_request(f"configure {link.name}", ipr, "set", index=link.index, **changes)

    def _matches(self, ctx: EffectContext, link: LinkState) -> bool:
        mtu, up = ctx.parameters.get("mtu"), ctx.parameters.get("up")
        return (mtu is None or link.mtu == mtu) and (up is None or link.up == bool(up))

    def observe(self, ctx: EffectContext, before: Any) -> Observed:
        env = environment(ctx)
        _, link = self._link(env, before)
        if link is None:
            return Observed(False, detail="link is gone")
        ref = NamespaceRef.from_json(before["netns"])
        out = link_handle(single(ctx, "interface"), ctx, env, ref, link, frozenset())
        ok = self._matches(ctx, link)
        return Observed(ok, {"interface": (out,)}, "" if ok else "MTU/admin state differ")

    def recover(self, ctx: EffectContext, before: Any) -> RecoveryObservation:
        env = environment(ctx)
        try:
            _, link = self._link(env, before)
        except ExecutorError:
            return RecoveryObservation.UNCERTAIN
        if link is None:
            return RecoveryObservation.UNCERTAIN
        if self._matches(ctx, link):
            return RecoveryObservation.APPLIED
        captured = LinkState.from_json(before["link"])
        if (link.mtu, link.up) == (captured.mtu, captured.up):
            return RecoveryObservation.NOT_APPLIED
        return RecoveryObservation.UNCERTAIN

    def undo(self, ctx: EffectContext, before: Any, outputs: Outputs) -> None:
        env = environment(ctx)
        try:
            ipr, link = self._link(env, before)
        except ExecutorError as exc:
            if exc.code not in NAMESPACE_LOST:
                raise
            # the link's namespace is destroyed or of an earlier boot: a virtual link died
            # with it, hardware went back to the host (its move's undo restores it)
            _log.info("effect=%s event=undo-noop reason=%s", ctx.effect_id, exc.code)
            return
        if link is None:
            _log.warning("effect=%s event=undo-skip reason=link-gone", ctx.effect_id)
            return
        captured = LinkState.from_json(before["link"])
        if link.up and not captured.up:
            link_request(f"down {link.name}", ipr, "set", index=link.index, state="down")
        if link.mtu != captured.mtu:
            link_request(f"mtu {link.name}", ipr, "set", index=link.index, mtu=captured.mtu)
        if captured.up and not link.up:
            link_request(f"up {link.name}", ipr, "set", index=link.index, state="up")
