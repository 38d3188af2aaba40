"""Executor of ``bridge/port-vlan/v1``: the representor port's VLAN table, made exactly the
requested access VLAN (PVID, egress untagged) plus tagged trunk VLANs; undo writes the
recorded table back.

``vlan-grant``: every VID must be permitted by the grant of the approved bridge the port is
on. The port must still be on that recorded bridge incarnation for apply and undo to act.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from dmn.host.rtnetlink.links import LinkState
from dmn.host.rtnetlink.representor import RepresentorIdentity, relocate
from dmn.opcodes.bridge import specs
from dmn.opcodes.bridge.approved_bridge import (
    BridgeIdentity,
    VlanEntry,
    grant_of_master,
    reverify,
    vlan_table,
    write_table,
)
from dmn.opcodes.effect_handles import environment, representor_input, single
from dmn.opcodes.executor import EffectContext, ExecutorError, Observed, RecoveryObservation
from dmn.opcodes.spec import OpcodeSpec
from dmn.vocabulary.handles import Handle

_log = logging.getLogger(__name__)


def requested(parameters: Mapping[str, Any]) -> list[VlanEntry]:
    pvid = parameters.get("pvid")
    table: list[VlanEntry] = [(int(pvid), True, True)] if pvid is not None else []
    table += [(int(vid), False, False) for vid in parameters.get("tagged") or ()]
    return sorted(table)


def _entries(data: Any) -> list[VlanEntry]:
    return sorted((int(v), bool(p), bool(u)) for v, p, u in data)


class PortVlan:
    spec: OpcodeSpec = specs.PORT_VLAN

    def capture(self, ctx: EffectContext) -> Any:
        env = environment(ctx)
        ipr = env.rtnl(env.host)
        _, identity, link = representor_input(ctx)
        g, bridge = grant_of_master(env, ipr, link.master)
        denied = sorted({vid for vid, _, _ in requested(ctx.parameters)} - g.vlans)
        if denied:
            raise ExecutorError("E_VLAN_DENIED", f"VLANs {denied} are not granted on {g.alias}")
        return {
            "representor": identity.to_json(),
            "bridge": bridge.to_json(),
            "table": [list(e) for e in vlan_table(ipr, link.index)],
        }

    def _port(self, ctx: EffectContext, before: Any) -> tuple[Any, LinkState | None]:
        env = environment(ctx)
        ipr = env.rtnl(env.host)
        link = relocate(ipr, RepresentorIdentity.from_json(before["representor"]))
        bridge = BridgeIdentity.from_json(before["bridge"])
        if link is None or link.master != bridge.index or not reverify(ipr, bridge):
            return ipr, None
        return ipr, link

    def apply(self, ctx: EffectContext, before: Any) -> None:
        ipr, link = self._port(ctx, before)
        if link is None:
            raise ExecutorError("E_LINK_CHANGED", "the representor left the approved bridge")
        write_table(ipr, link.index, requested(ctx.parameters))

    def observe(self, ctx: EffectContext, before: Any) -> Observed:
        ipr, link = self._port(ctx, before)
        if link is None:
            return Observed(False, detail="the representor left the approved bridge")
        got = vlan_table(ipr, link.index)
        ok = got == requested(ctx.parameters)
        out = {"representor": (single(ctx, "representor"),)}
        return Observed(ok, out, "" if ok else f"port VLANs read back {got}")

    def recover(self, ctx: EffectContext, before: Any) -> RecoveryObservation:
        try:
            ipr, link = self._port(ctx, before)
        except ExecutorError:
            return RecoveryObservation.UNCERTAIN
        if link is None:
            return RecoveryObservation.UNCERTAIN
        got = vlan_table(ipr, link.index)
        if got == requested(ctx.parameters):
            return RecoveryObservation.APPLIED
        if got == _entries(before["table"]):
            return RecoveryObservation.NOT_APPLIED
        return RecoveryObservation.UNCERTAIN

    def undo(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, tuple[Handle, ...]]
    ) -> None:
        ipr, link = self._port(ctx, before)
        if link is None:
            _log.warning("effect=%s event=undo-skip reason=port-left-bridge", ctx.effect_id)
            return
        write_table(ipr, link.index, _entries(before["table"]))
