"""Executor of ``devlink/eswitch-configure/v1``: a drained PF's eswitch mode, restored exactly.

Identity: the PF's devlink instance (bus and device name: ``pci/<address>``, or
``netdevsim/netdevsimN`` in the lab) from the handle's ``devlinkHandle`` observation (the
inventory's), else ``pci/<pciAddress>``; it is looked up in the call's host namespace. Capture
records it, its current mode and the requested one.

Reset domain: a mode change destroys and recreates the eswitch's representors and resets its
VFs' datapath, so every VF/SF/virtual port of the instance must be quiescent — no such port's
netdevice administratively up — before apply and before undo (``E_RESET_DOMAIN_BUSY``; nothing
is written). The policy's drain (``drained-scope``) is the coordinator's; this is the
executor's own last check against the kernel.

Apply and undo write only ``DEVLINK_ATTR_ESWITCH_MODE`` (never inline mode or encapsulation);
undo restores the recorded mode and leaves an instance that is gone alone.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from dmn.host.devlink import DEVLINK_HANDLE, eswitch_mode_of, open_in, require_quiescent
from dmn.opcodes.devlink import specs
from dmn.opcodes.effect_handles import environment, single
from dmn.opcodes.executor import EffectContext, ExecutorError, Observed, RecoveryObservation
from dmn.opcodes.spec import OpcodeSpec
from dmn.vocabulary.handles import Handle

_log = logging.getLogger(__name__)


def devlink_handle(handle: Handle) -> tuple[str, str]:
    raw = str(handle.observations.get("devlinkHandle", "") or "")
    if not raw and handle.observations.get("pciAddress"):
        raw = f"pci/{handle.observations['pciAddress']}"
    match = DEVLINK_HANDLE.fullmatch(raw)
    if match is None:
        raise ExecutorError("E_DEVICE_IDENTITY", f"handle {handle.id} observes no devlink handle")
    return match.group(1), match.group(2)


class EswitchConfigure:
    """``devlink/eswitch-configure/v1``: only the mode; undo restores the recorded one."""

    spec: OpcodeSpec = specs.ESWITCH_CONFIGURE

    def capture(self, ctx: EffectContext) -> Any:
        env = environment(ctx)
        bus, dev = devlink_handle(single(ctx, "function"))
        target = str(ctx.parameters["mode"])
        with open_in(env.fd(env.host)) as dl:
            mode = eswitch_mode_of(dl, bus, dev)
            if mode is None:
                raise ExecutorError("E_DEVICE_GONE", f"no devlink instance {bus}/{dev}")
            if mode != target:
                require_quiescent(env, dl, bus, dev)
        return {"bus": bus, "dev": dev, "mode": mode, "target": target}

    def _now(self, ctx: EffectContext, before: Any) -> str | None:
        env = environment(ctx)
        with open_in(env.fd(env.host)) as dl:
            return eswitch_mode_of(dl, str(before["bus"]), str(before["dev"]))

    def _set(self, ctx: EffectContext, before: Any, mode: str) -> None:
        env = environment(ctx)
        bus, dev = str(before["bus"]), str(before["dev"])
        with open_in(env.fd(env.host)) as dl:
            now = eswitch_mode_of(dl, bus, dev)
            if now is None:
                raise ExecutorError("E_DEVICE_GONE", f"no devlink instance {bus}/{dev}")
            if now == mode:
                return
            require_quiescent(env, dl, bus, dev)
            dl.set_eswitch_mode(bus, dev, mode)

    def apply(self, ctx: EffectContext, before: Any) -> None:
        self._set(ctx, before, str(before["target"]))

    def observe(self, ctx: EffectContext, before: Any) -> Observed:
        now = self._now(ctx, before)
        ok = now == before["target"]
        base = single(ctx, "function")
        out = Handle(
            id=base.id,
            type=base.type,
            inventory_id=base.inventory_id,
            scope=base.scope,
            accesses=specs.ESWITCH_CONFIGURE.outputs["function"].grants,
            link_type=base.link_type,
            provenance=base.provenance,
            observations={**base.observations, "eswitchMode": now or ""},
        )
        return Observed(ok, {"function": (out,)}, "" if ok else f"eswitch mode is {now}")

    def recover(self, ctx: EffectContext, before: Any) -> RecoveryObservation:
        now = self._now(ctx, before)
        if now == before["target"]:
            return RecoveryObservation.APPLIED
        if now == before["mode"]:
            return RecoveryObservation.NOT_APPLIED
        return RecoveryObservation.UNCERTAIN

    def undo(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, tuple[Handle, ...]]
    ) -> None:
        if self._now(ctx, before) is None:
            _log.warning("effect=%s event=undo-skip reason=devlink-gone", ctx.effect_id)
            return
        self._set(ctx, before, str(before["mode"]))
