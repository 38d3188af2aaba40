"""Executor of ``pci/driver-bind/v1``: bind a granted function to an allowlisted driver.

Before anything changes, capture proves the function is the one the inventory published (its
``pciAddress`` resolves to a function; vendor/device match what the handle observed) and
records its kernel identity, its original driver and ``driver_override``. It refuses when the
target driver is not on the exposure policy's allowlist (``E_DRIVER_NOT_ALLOWED``), when the
function is in use (a netdevice up: ``E_FUNCTION_BUSY``), when a VFIO bind has no IOMMU group
(``E_NO_IOMMU_GROUP``), or when the IOMMU group holds a function the host still drives or its
VFIO node is open (``E_IOMMU_GROUP_BUSY``).

Apply: ``driver_override`` ← target, unbind from the current driver, ``drivers_probe`` — the
kernel's own mechanism; only the recorded identity is ever written. Undo restores exactly
what was recorded: unbinds the target driver (refusing while the group node is open, since the
kernel would block until it is closed), restores ``driver_override`` and binds the original
driver, then reads the binding back. A function at the address that is not the recorded one,
or that someone else has bound meanwhile, is left alone.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dmn.opcodes.device_environment import allowed_drivers, dev_root, proc_root, sysfs_root
from dmn.opcodes.effect_handles import single
from dmn.opcodes.executor import EffectContext, ExecutorError, Observed, RecoveryObservation
from dmn.opcodes.pci import function_sysfs as pci
from dmn.opcodes.pci import quiescence, specs
from dmn.opcodes.pci.function_handle import function_output, live_identity
from dmn.opcodes.spec import OpcodeSpec
from dmn.vocabulary.handles import Handle

_log = logging.getLogger(__name__)


def _state(root: Path, address: str) -> tuple[str | None, str | None]:
    return pci.driver_of(root, address), pci.driver_override(root, address)


def _quiescent(ctx: EffectContext, root: Path, address: str, group: str | None) -> None:
    quiescence.require_netdevs_down(root, address, "E_FUNCTION_BUSY")
    if group is not None:
        quiescence.require_group_viable(root, address, group)
        quiescence.require_group_closed(
            dev_root(ctx.env), proc_root(ctx.env), group, "E_IOMMU_GROUP_BUSY"
        )


class DriverBind:
    """``pci/driver-bind/v1``: original driver recorded; undo rebinds it exactly."""

    spec: OpcodeSpec = specs.DRIVER_BIND

    def capture(self, ctx: EffectContext) -> Any:
        root = sysfs_root(ctx.env)
        handle = single(ctx, "function")
        identity = live_identity(root, handle)
        target = str(ctx.parameters["driver"])
        if target not in allowed_drivers(ctx.env):
            raise ExecutorError(
                "E_DRIVER_NOT_ALLOWED",
                f"driver {target} is not in the exposure policy's allowedDrivers",
            )
        address = identity.address
        group = pci.iommu_group(root, address)
        if group is None and target in quiescence.VFIO_DRIVERS:
            raise ExecutorError("E_NO_IOMMU_GROUP", f"{address} has no IOMMU group: no VFIO")
        driver, override = _state(root, address)
        if driver != target:
            _quiescent(ctx, root, address, group)
        return {
            "function": identity.to_json(),
            "driver": driver,
            "override": override,
            "group": group,
            "target": target,
        }

    def _live(self, ctx: EffectContext, before: Any) -> pci.FunctionIdentity | None:
        recorded = pci.FunctionIdentity.from_json(before["function"])
        live = pci.read_identity(sysfs_root(ctx.env), recorded.address)
        return live if live == recorded else None

    def apply(self, ctx: EffectContext, before: Any) -> None:
        root = sysfs_root(ctx.env)
        if self._live(ctx, before) is None:
            raise ExecutorError("E_DEVICE_IDENTITY", "the recorded function is gone or replaced")
        address, target = str(before["function"]["address"]), str(before["target"])
        driver, _ = _state(root, address)
        if driver == target:
            return
        if not (root / "bus/pci/drivers" / target).is_dir():
            raise ExecutorError("E_DRIVER_BIND", f"driver {target} is not loaded on this node")
        _quiescent(ctx, root, address, before.get("group"))
        folder = pci.function_dir(root, address)
        pci.write_attribute(folder / "driver_override", target + "\n")
        if driver is not None:
            pci.write_attribute(root / "bus/pci/drivers" / driver / "unbind", address + "\n")
        pci.write_attribute(root / "bus/pci/drivers_probe", address + "\n")
        bound = pci.driver_of(root, address)
        if bound != target:
            raise ExecutorError("E_DRIVER_BIND", f"{address} is bound to {bound}, not {target}")

    def observe(self, ctx: EffectContext, before: Any) -> Observed:
        live = self._live(ctx, before)
        if live is None:
            return Observed(False, detail="the recorded function is gone or replaced")
        root = sysfs_root(ctx.env)
        driver = pci.driver_of(root, live.address)
        ok = driver == before["target"]
        outputs = {
            "function": (
                function_output(single(ctx, "function"), self.spec, live, driver, before["group"]),
            )
        }
        return Observed(ok, outputs, "" if ok else f"{live.address} is bound to {driver}")

    def recover(self, ctx: EffectContext, before: Any) -> RecoveryObservation:
        live = self._live(ctx, before)
        if live is None:
            return RecoveryObservation.UNCERTAIN
        driver, override = _state(sysfs_root(ctx.env), live.address)
        if driver == before["target"] and override in (before["target"], before["override"]):
            return RecoveryObservation.APPLIED
        if (driver, override) == (before["driver"], before["override"]):
            return RecoveryObservation.NOT_APPLIED
        return RecoveryObservation.UNCERTAIN

    def undo(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, tuple[Handle, ...]]
    ) -> None:
        live = self._live(ctx, before)
        if live is None:
            _log.warning("effect=%s event=undo-skip reason=function-replaced", ctx.effect_id)
            return
        root = sysfs_root(ctx.env)
        address, target = live.address, str(before["target"])
        original, original_override = before["driver"], before["override"]
        driver, override = _state(root, address)
        if driver not in (target, original):
            _log.warning(
                "effect=%s event=undo-skip reason=rebound-by-other driver=%s",
                ctx.effect_id,
                driver,
            )
            return
        if driver == target and target != original:
            group = before.get("group")
            if group is not None:
                quiescence.require_group_closed(
                    dev_root(ctx.env), proc_root(ctx.env), str(group), "E_FUNCTION_BUSY"
                )
            pci.write_attribute(root / "bus/pci/drivers" / target / "unbind", address + "\n")
        folder = pci.function_dir(root, address)
        if override != original_override:
            pci.write_attribute(folder / "driver_override", (original_override or "") + "\n")
        if original is not None and pci.driver_of(root, address) != original:
            pci.write_attribute(root / "bus/pci/drivers" / original / "bind", address + "\n")
        restored = _state(root, address)
        if restored != (original, original_override):
            raise ExecutorError(
                "E_DRIVER_BIND",
                f"{address} reads back {restored}, not {(original, original_override)}",
            )
