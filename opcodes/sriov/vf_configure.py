"""Executor of ``sriov/vf-configure/v1``: a VF's settings through its PF, restored exactly.

Identity (design §8.3): the input handle names the VF by inventory identity; its
observations ``pfIfName``/``vfIndex`` (and ``pciAddress`` for a PCI VF) are hints that capture
re-verifies — the PF exists in the host namespace, reports at least ``vfIndex + 1`` VFs, and
for a PCI PF sysfs ``virtfn<vfIndex>`` of that PF resolves to exactly ``pciAddress``. The
before-image records the PF's kernel identity (ifindex and bus device; the name for the
operator) and every VF setting; apply, observe, recover and undo follow that ifindex only,
never the name: a renamed PF is still restored, a PF that is gone took its VFs with it (undo
logs and has nothing to restore), and another device at the recorded ifindex is
``E_IDENTITY_MISMATCH`` (the runner quarantines the effect; nothing is written).

Exact restoration: undo writes back the recorded value of every setting this effect's
parameters touched (a tenant with a trusted VF may have changed its own MAC meanwhile; the VF
returns to the pool as it was). Settings the parameters did not name are left alone.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

from dmn.host.rtnetlink.links import by_name
from dmn.opcodes.device_environment import sysfs_root
from dmn.opcodes.effect_handles import environment, single
from dmn.opcodes.executor import EffectContext, ExecutorError, Observed, RecoveryObservation
from dmn.opcodes.spec import OpcodeSpec
from dmn.opcodes.sriov import specs
from dmn.opcodes.sriov.vf_state import (
    PfIdentity,
    VfSettings,
    desired,
    pf_identity,
    read_vf,
    write_vf,
)
from dmn.vocabulary.handles import Handle

_log = logging.getLogger(__name__)

# parameter name → VfSettings fields it decides
_FIELDS: Mapping[str, tuple[str, ...]] = {
    "mac": ("mac",),
    "vlan": ("vlan", "qos", "vlan_proto"),
    "qos": ("vlan", "qos", "vlan_proto"),
    "spoofCheck": ("spoof_check",),
    "trust": ("trust",),
    "minTxRate": ("min_tx_rate", "max_tx_rate"),
    "maxTxRate": ("min_tx_rate", "max_tx_rate"),
    "linkState": ("link_state",),
}


def _touched(parameters: Mapping[str, Any]) -> set[str]:
    return {f for key, fields in _FIELDS.items() if parameters.get(key) is not None for f in fields}


def _project(settings: VfSettings, fields: set[str]) -> dict[str, Any]:
    data = settings.to_json()
    return {f: data[f] for f in sorted(fields)}


def _verify_mapping(ctx: EffectContext, handle: Handle, pf: PfIdentity, vf: int) -> None:
    """``vf-mapping-verified``: the handle's VF is VF ``vf`` of this very PF."""
    if vf < 0 or vf >= pf.num_vfs:
        raise ExecutorError(
            "E_VF_MAPPING", f"{pf.name} reports {pf.num_vfs} VFs; VF {vf} of {handle.id} is not one"
        )
    address = str(handle.observations.get("pciAddress", "") or "")
    if pf.parent_bus != "pci" and not address:
        return  # a non-PCI PF (netdevsim): its VF index and count are the kernel's whole mapping
    link = sysfs_root(ctx.env) / "class/net" / pf.name / "device" / f"virtfn{vf}"
    try:
        target = os.path.basename(os.readlink(link))
    except OSError as exc:
        raise ExecutorError("E_VF_MAPPING", f"{link}: {exc.strerror}") from exc
    if not address or target != address:
        raise ExecutorError(
            "E_VF_MAPPING", f"VF {vf} of {pf.name} is {target}, not {address or '(unobserved)'}"
        )


class VfConfigure:
    """``sriov/vf-configure/v1``: per-VF settings through the PF; undo restores them exactly."""

    spec: OpcodeSpec = specs.VF_CONFIGURE

    def capture(self, ctx: EffectContext) -> Any:
        env = environment(ctx)
        handle = single(ctx, "function")
        pf_name = str(handle.observations.get("pfIfName", "") or "")
        vf = handle.observations.get("vfIndex")
        if not pf_name or not isinstance(vf, int) or isinstance(vf, bool):
            raise ExecutorError(
                "E_VF_MAPPING", f"handle {handle.id} observes no pfIfName/vfIndex: not a VF"
            )
        ipr = env.rtnl(env.host)
        link = by_name(ipr, pf_name)
        pf = pf_identity(ipr, link.index) if link is not None else None
        if pf is None:
            raise ExecutorError("E_PF_NOT_FOUND", f"no PF {pf_name} in the host namespace")
        _verify_mapping(ctx, handle, pf, vf)
        return {"pf": pf.to_json(), "vf": vf, "settings": read_vf(ipr, pf.index, vf).to_json()}

    def _pf(self, ctx: EffectContext, before: Any) -> tuple[Any, PfIdentity | None]:
        """The recorded PF at its ifindex (renamed or not); None when that ifindex is free
        (the PF and its VFs are gone); ``E_IDENTITY_MISMATCH`` when another device holds it."""
        env = environment(ctx)
        ipr = env.rtnl(env.host)
        recorded = PfIdentity.from_json(before["pf"])
        live = pf_identity(ipr, recorded.index)
        if live is None:
            return ipr, None
        if not live.same_device(recorded):
            raise ExecutorError(
                "E_IDENTITY_MISMATCH",
                f"ifindex {recorded.index} holds {live.name!r} on {live.parent or 'no device'}, "
                f"not the recorded PF on {recorded.parent}; not touched",
            )
        return ipr, live

    def _target(self, ctx: EffectContext, before: Any) -> VfSettings:
        return desired(ctx.parameters, VfSettings.from_json(before["settings"]))

    def apply(self, ctx: EffectContext, before: Any) -> None:
        ipr, pf = self._pf(ctx, before)
        if pf is None:
            raise ExecutorError("E_PF_CHANGED", "the recorded PF is gone")
        vf = int(before["vf"])
        now = read_vf(ipr, pf.index, vf)
        write_vf(ipr, pf.index, vf, desired(ctx.parameters, now), now)

    def _state(self, ctx: EffectContext, before: Any) -> VfSettings | None:
        ipr, pf = self._pf(ctx, before)
        if pf is None:
            return None
        return read_vf(ipr, pf.index, int(before["vf"]))

    def observe(self, ctx: EffectContext, before: Any) -> Observed:
        now = self._state(ctx, before)
        if now is None:
            return Observed(False, detail="the recorded PF is gone")
        fields = _touched(ctx.parameters)
        want = _project(self._target(ctx, before), fields)
        got = _project(now, fields)
        ok = want == got
        out = {"function": (single(ctx, "function"),)}
        return Observed(ok, out, "" if ok else f"VF settings read back {got}, wanted {want}")

    def recover(self, ctx: EffectContext, before: Any) -> RecoveryObservation:
        try:
            now = self._state(ctx, before)
        except ExecutorError:
            return RecoveryObservation.UNCERTAIN
        if now is None:
            return RecoveryObservation.UNCERTAIN
        fields = _touched(ctx.parameters)
        got = _project(now, fields)
        if got == _project(self._target(ctx, before), fields):
            return RecoveryObservation.APPLIED
        if got == _project(VfSettings.from_json(before["settings"]), fields):
            return RecoveryObservation.NOT_APPLIED
        return RecoveryObservation.UNCERTAIN

    def undo(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, tuple[Handle, ...]]
    ) -> None:
        ipr, pf = self._pf(ctx, before)
        if pf is None:
            _log.warning("effect=%s event=undo-skip reason=pf-changed", ctx.effect_id)
            return
        vf = int(before["vf"])
        now = read_vf(ipr, pf.index, vf)
        recorded = VfSettings.from_json(before["settings"]).to_json()
        target = now.to_json()
        for name in _touched(ctx.parameters):
            target[name] = recorded[name]
        write_vf(ipr, pf.index, vf, VfSettings.from_json(target), now)
