"""Executor of ``bridge/port-attach/v1``: a verified representor, kept down, joins the
approved bridge; undo takes it out again and restores its admin state.

Recorded: the representor's identity (:mod:`dmn.host.rtnetlink.representor`), its master
and admin state, and the approved bridge's incarnation. The certified initial membership is
"none" or "already on the approved bridge" (design §6.7); a port of any other master is
refused (``E_FOREIGN_MASTER``). Undo removes the membership while the port is still on the
bridge ifindex it was put on (also when that bridge's MAC changed since: the port is ours, the
bridge is not touched) — a port someone moved to another master is left where it is.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from dmn.host.rtnetlink.links import LinkState, netlink_call
from dmn.host.rtnetlink.representor import RepresentorIdentity, relocate
from dmn.opcodes.bridge import specs
from dmn.opcodes.bridge.approved_bridge import BridgeIdentity, grant, reverify, verify
from dmn.opcodes.effect_handles import environment, representor_input, single
from dmn.opcodes.executor import EffectContext, ExecutorError, Observed, RecoveryObservation
from dmn.opcodes.spec import OpcodeSpec
from dmn.vocabulary.handles import Handle

_log = logging.getLogger(__name__)


class PortAttach:
    spec: OpcodeSpec = specs.PORT_ATTACH

    def capture(self, ctx: EffectContext) -> Any:
        env = environment(ctx)
        ipr = env.rtnl(env.host)
        _, identity, link = representor_input(ctx)
        bridge = verify(ipr, grant(env, str(ctx.parameters["bridge"])))
        if link.master not in (0, bridge.index):
            raise ExecutorError(
                "E_FOREIGN_MASTER", f"{link.name} is a port of another master ({link.master})"
            )
        return {
            "representor": identity.to_json(),
            "bridge": bridge.to_json(),
            "master": link.master,
            "up": link.up,
        }

    def _state(self, ctx: EffectContext, before: Any) -> tuple[Any, LinkState | None, bool]:
        env = environment(ctx)
        ipr = env.rtnl(env.host)
        link = relocate(ipr, RepresentorIdentity.from_json(before["representor"]))
        return ipr, link, reverify(ipr, BridgeIdentity.from_json(before["bridge"]))

    def apply(self, ctx: EffectContext, before: Any) -> None:
        ipr, link, bridge_ok = self._state(ctx, before)
        if link is None:
            raise ExecutorError("E_LINK_CHANGED", "the recorded representor is gone or changed")
        if not bridge_ok:
            raise ExecutorError("E_BRIDGE_GRANT", "the approved bridge was replaced")
        bridge = BridgeIdentity.from_json(before["bridge"])
        if link.up:  # kept down until its VLANs are installed
            netlink_call(f"down {link.name}", ipr.link, "set", index=link.index, state="down")
        if link.master != bridge.index:
            netlink_call(
                f"attach {link.name}", ipr.link, "set", index=link.index, master=bridge.index
            )

    def observe(self, ctx: EffectContext, before: Any) -> Observed:
        _, link, bridge_ok = self._state(ctx, before)
        bridge = BridgeIdentity.from_json(before["bridge"])
        ok = link is not None and bridge_ok and link.master == bridge.index and not link.up
        out = {"representor": (single(ctx, "representor"),)}
        return Observed(ok, out, "" if ok else f"not a down port of {bridge.name}")

    def recover(self, ctx: EffectContext, before: Any) -> RecoveryObservation:
        try:
            _, link, bridge_ok = self._state(ctx, before)
        except ExecutorError:
            return RecoveryObservation.UNCERTAIN
        if link is None or not bridge_ok:
            return RecoveryObservation.UNCERTAIN
        bridge = BridgeIdentity.from_json(before["bridge"])
        if link.master == bridge.index and not link.up:
            return RecoveryObservation.APPLIED
        if (link.master, link.up) == (int(before["master"]), bool(before["up"])):
            return RecoveryObservation.NOT_APPLIED
        return RecoveryObservation.UNCERTAIN

    def undo(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, tuple[Handle, ...]]
    ) -> None:
        ipr, link, _ = self._state(ctx, before)
        if link is None:
            _log.warning("effect=%s event=undo-skip reason=representor-changed", ctx.effect_id)
            return
        bridge = BridgeIdentity.from_json(before["bridge"])
        # the port is ours (recorded identity): take it off the bridge index we put it on even
        # when the bridge itself changed since; the bridge's own attributes are never touched
        if int(before["master"]) == 0 and link.master == bridge.index:
            netlink_call(f"detach {link.name}", ipr.link, "set", index=link.index, master=0)
        elif link.master not in (0, int(before["master"])):
            _log.warning("effect=%s event=undo-keep reason=foreign-master", ctx.effect_id)
        if bool(before["up"]) and not link.up:
            netlink_call(f"up {link.name}", ipr.link, "set", index=link.index, state="up")
