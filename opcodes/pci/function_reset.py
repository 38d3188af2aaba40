"""Executor of ``pci/function-reset/v1``: reset a granted function whose reset domain is quiet.

Quiescence first (capture, and again right before the write): the reset domain — the function
itself, or every function on its bus when the reset is a secondary bus reset (``method: bus``,
or ``auto`` when the kernel's first method is ``bus``) — holds only functions the host does not
drive (no driver or a VFIO driver), none with a netdevice up, and no VFIO group node of theirs
is open (``E_RESET_DOMAIN_BUSY``). A function that offers no reset (no ``reset`` attribute) or
not the named method is refused (``E_RESET_UNSUPPORTED``), as is a reset the kernel finds no
working method for when it runs (``ENOTTY``).

Apply: for a named method, ``reset_method`` ← that method; ``reset`` ← 1; ``reset_method`` ← the
recorded value again. A reset has no inverse: undo only puts back a ``reset_method`` this
effect changed. After a crash mid-apply nobody can tell whether the reset happened, so
``recover`` answers Uncertain and the runner quarantines the effect (it is never repeated
blindly); observe re-reads the function's identity, driver and ``reset_method``.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dmn.opcodes.device_environment import dev_root, proc_root, sysfs_root
from dmn.opcodes.effect_handles import single
from dmn.opcodes.executor import EffectContext, ExecutorError, Observed, RecoveryObservation
from dmn.opcodes.pci import function_sysfs as pci
from dmn.opcodes.pci import quiescence, specs
from dmn.opcodes.pci.function_handle import function_output, live_identity
from dmn.opcodes.spec import OpcodeSpec
from dmn.vocabulary.handles import Handle

_log = logging.getLogger(__name__)
# the kernel answers ENOTTY when no listed method can reset the function now (for example a
# secondary bus reset after which the link or the device does not come back in time)
_RESET_ERRORS = {errno.ENOTTY: "E_RESET_UNSUPPORTED"}


def _reset_methods(root: Path, address: str) -> str | None:
    """``reset_method`` as the kernel prints it, or None when the function has no reset."""
    folder = pci.function_dir(root, address)
    if not (folder / "reset").exists():
        return None
    try:
        return (folder / "reset_method").read_text().strip()
    except OSError as exc:
        raise ExecutorError("E_SYSFS", f"read reset_method of {address}: {exc}") from exc


def _require_quiescent(ctx: EffectContext, root: Path, domain: tuple[str, ...]) -> None:
    for member in domain:
        driver = pci.driver_of(root, member)
        if driver is not None and driver not in quiescence.VFIO_DRIVERS:
            raise ExecutorError(
                "E_RESET_DOMAIN_BUSY", f"reset domain member {member} is driven by {driver}"
            )
        quiescence.require_netdevs_down(root, member, "E_RESET_DOMAIN_BUSY")
        group = pci.iommu_group(root, member)
        if group is not None:
            quiescence.require_group_closed(
                dev_root(ctx.env), proc_root(ctx.env), group, "E_RESET_DOMAIN_BUSY"
            )


class FunctionReset:
    """``pci/function-reset/v1``: one reset, after proving its whole domain quiescent."""

    spec: OpcodeSpec = specs.FUNCTION_RESET

    def capture(self, ctx: EffectContext) -> Any:
        root = sysfs_root(ctx.env)
        identity = live_identity(root, single(ctx, "function"))
        address, method = identity.address, str(ctx.parameters.get("method", "auto"))
        methods = _reset_methods(root, address)
        if methods is None:
            raise ExecutorError("E_RESET_UNSUPPORTED", f"{address} offers no function reset")
        offered = methods.split()
        if method != "auto" and method not in offered:
            raise ExecutorError(
                "E_RESET_UNSUPPORTED", f"{address} offers reset methods {offered}, not {method}"
            )
        bus = method == "bus" or (method == "auto" and offered[:1] == ["bus"])
        domain = quiescence.reset_domain(root, address, bus)
        _require_quiescent(ctx, root, domain)
        return {
            "function": identity.to_json(),
            "driver": pci.driver_of(root, address),
            "group": pci.iommu_group(root, address),
            "resetMethod": methods,
            "method": method,
            "domain": list(domain),
        }

    def _live(self, ctx: EffectContext, before: Any) -> pci.FunctionIdentity | None:
        recorded = pci.FunctionIdentity.from_json(before["function"])
        live = pci.read_identity(sysfs_root(ctx.env), recorded.address)
        return live if live == recorded else None

    def apply(self, ctx: EffectContext, before: Any) -> None:
        root = sysfs_root(ctx.env)
        if self._live(ctx, before) is None:
            raise ExecutorError("E_DEVICE_IDENTITY", "the recorded function is gone or replaced")
        _require_quiescent(ctx, root, tuple(before["domain"]))
        folder = pci.function_dir(root, str(before["function"]["address"]))
        method = str(before["method"])
        if method == "auto":
            pci.write_attribute(folder / "reset", "1\n", _RESET_ERRORS)
            return
        pci.write_attribute(folder / "reset_method", method + "\n")
        try:
            pci.write_attribute(folder / "reset", "1\n", _RESET_ERRORS)
        finally:
            pci.write_attribute(folder / "reset_method", str(before["resetMethod"]) + "\n")

    def observe(self, ctx: EffectContext, before: Any) -> Observed:
        live = self._live(ctx, before)
        if live is None:
            return Observed(False, detail="the recorded function is gone or replaced")
        root = sysfs_root(ctx.env)
        driver = pci.driver_of(root, live.address)
        methods = _reset_methods(root, live.address)
        ok = driver == before["driver"] and methods == before["resetMethod"]
        handle = function_output(single(ctx, "function"), self.spec, live, driver, before["group"])
        detail = "" if ok else f"{live.address}: driver {driver}, reset_method {methods!r}"
        return Observed(ok, {"function": (handle,)}, detail)

    def recover(self, ctx: EffectContext, before: Any) -> RecoveryObservation:
        # a reset leaves no trace to read back: whether it happened is unknowable
        return RecoveryObservation.UNCERTAIN

    def undo(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, tuple[Handle, ...]]
    ) -> None:
        live = self._live(ctx, before)
        if live is None:
            _log.warning("effect=%s event=undo-skip reason=function-replaced", ctx.effect_id)
            return
        root = sysfs_root(ctx.env)
        methods = _reset_methods(root, live.address)
        if methods is not None and methods != before["resetMethod"]:
            folder = pci.function_dir(root, live.address)
            pci.write_attribute(folder / "reset_method", str(before["resetMethod"]) + "\n")
