"""Executor of ``representor/configure/v1``: MTU and admin state of a verified representor.

The representor is found and proven by :mod:`identity` (switch ID + port name from the
kernel); the before-image records that identity and the MTU and admin state, and undo puts
both back on the very link recorded, renamed or not. A representor that is gone has nothing
to restore; another link at its ifindex is ``E_IDENTITY_MISMATCH`` (quarantined, untouched).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from dmn.host.rtnetlink.links import LinkState, netlink_call
from dmn.host.rtnetlink.representor import RepresentorIdentity, relocate
from dmn.opcodes.effect_handles import host_rtnl, representor_input, single
from dmn.opcodes.executor import EffectContext, ExecutorError, Observed, RecoveryObservation
from dmn.opcodes.representor import specs
from dmn.opcodes.spec import OpcodeSpec
from dmn.vocabulary.handles import Handle

_log = logging.getLogger(__name__)


class RepresentorConfigure:
    """``representor/configure/v1``: MTU and admin state; undo restores both exactly."""

    spec: OpcodeSpec = specs.CONFIGURE

    def capture(self, ctx: EffectContext) -> Any:
        _, identity, link = representor_input(ctx)
        return {"representor": identity.to_json(), "mtu": link.mtu, "up": link.up}

    def _link(self, ctx: EffectContext, before: Any) -> tuple[Any, LinkState | None]:
        ipr = host_rtnl(ctx)
        return ipr, relocate(ipr, RepresentorIdentity.from_json(before["representor"]))

    def _matches(self, ctx: EffectContext, link: LinkState) -> bool:
        mtu, up = ctx.parameters.get("mtu"), ctx.parameters.get("up")
        return (mtu is None or link.mtu == mtu) and (up is None or link.up == bool(up))

    def apply(self, ctx: EffectContext, before: Any) -> None:
        ipr, link = self._link(ctx, before)
        if link is None:
            raise ExecutorError("E_LINK_CHANGED", "the recorded representor is gone or changed")
        mtu, up = ctx.parameters.get("mtu"), ctx.parameters.get("up")
        changes: dict[str, Any] = {}
        if mtu is not None and link.mtu != mtu:
            changes["mtu"] = int(mtu)
        if up is not None and link.up != bool(up):
            changes["state"] = "up" if up else "down"
        if changes:
            netlink_call(f"configure {link.name}", ipr.link, "set", index=link.index, **changes)

    def observe(self, ctx: EffectContext, before: Any) -> Observed:
        _, link = self._link(ctx, before)
        if link is None:
            return Observed(False, detail="the recorded representor is gone or changed")
        ok = self._matches(ctx, link)
        out = {"representor": (single(ctx, "representor"),)}
        return Observed(ok, out, "" if ok else "representor MTU/admin state differ")

    def recover(self, ctx: EffectContext, before: Any) -> RecoveryObservation:
        try:
            _, link = self._link(ctx, before)
        except ExecutorError:
            return RecoveryObservation.UNCERTAIN
        if link is None:
            return RecoveryObservation.UNCERTAIN
        if self._matches(ctx, link):
            return RecoveryObservation.APPLIED
        if (link.mtu, link.up) == (int(before["mtu"]), bool(before["up"])):
            return RecoveryObservation.NOT_APPLIED
        return RecoveryObservation.UNCERTAIN

    def undo(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, tuple[Handle, ...]]
    ) -> None:
        ipr, link = self._link(ctx, before)
        if link is None:
            _log.warning("effect=%s event=undo-skip reason=representor-changed", ctx.effect_id)
            return
        mtu, up = int(before["mtu"]), bool(before["up"])
        if link.up and not up:
            netlink_call(f"down {link.name}", ipr.link, "set", index=link.index, state="down")
        if link.mtu != mtu:
            netlink_call(f"mtu {link.name}", ipr.link, "set", index=link.index, mtu=mtu)
        if up and not link.up:
            netlink_call(f"up {link.name}", ipr.link, "set", index=link.index, state="up")
