"""Executor of ``rdma/netns-assign/v1``: associate an allocated RDMA device with the sandbox.

Capture finds the device in the host namespace by the inventory's name and node GUID, and
checks the kernel's RDMA netns mode against the call's ``netnsMode``.

* ``exclusive`` (default): refused unless the RDMA subsystem is in exclusive netns mode
  (``E_RDMA_NETNS_SHARED``: in shared mode every namespace sees every device, so moving one
  means nothing). Apply is ``RDMA_NLDEV_CMD_SET`` with the sandbox's namespace fd; a driver
  that cannot disassociate user contexts makes the kernel answer EOPNOTSUPP
  (``E_RDMA_NETNS_UNSUPPORTED``). Observe and recover look for the recorded index and GUID in
  the sandbox and in the host; undo moves it back from the sandbox to the host, and leaves a
  device it does not find where it recorded it alone.
* ``shared``: refused unless the kernel is in shared mode (``E_RDMA_NETNS_EXCLUSIVE``), and
  the sandbox's own RDMA netlink view must show the recorded index and GUID. Nothing in the
  kernel changes (apply re-checks the mode), undo has nothing to move back; observe and
  recover ask the sandbox's view again. Isolation is then the character nodes that
  ``rdma/device-access`` grants, and only those.

Either way the record holds the device's index and GUID, the sandbox and the mode.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Mapping
from typing import Any

from dmn.host.netns import LinkEnvironment, NamespaceRef
from dmn.host.rdma import RdmaDev, RdmaError, RdmaNetlink, open_in
from dmn.opcodes.effect_handles import environment, single
from dmn.opcodes.executor import EffectContext, ExecutorError, Observed, RecoveryObservation
from dmn.opcodes.rdma import rdma_device, specs
from dmn.opcodes.spec import OpcodeSpec
from dmn.vocabulary.handles import Handle, Scope

_log = logging.getLogger(__name__)


def _where(env: LinkEnvironment, sandbox: NamespaceRef, dev: RdmaDev) -> str:
    """``sandbox``, ``host`` or ``""``: where the recorded device is now."""
    with open_in(env.fd(sandbox)) as nl:
        if rdma_device.find(nl, dev) is not None:
            return "sandbox"
    with open_in(env.fd(env.host)) as nl:
        if rdma_device.find(nl, dev) is not None:
            return "host"
    return ""


def _move(env: LinkEnvironment, source: NamespaceRef, dev: RdmaDev, target: NamespaceRef) -> None:
    with open_in(env.fd(source)) as nl:
        try:
            nl.move(dev.index, env.fd(target))
        except RdmaError as exc:
            if exc.errno == errno.EOPNOTSUPP:
                raise ExecutorError(
                    "E_RDMA_NETNS_UNSUPPORTED",
                    f"the kernel cannot move {dev.name} to another namespace: {exc}",
                ) from exc
            raise


def _shared(before: Any) -> bool:
    return bool(before.get("mode") == "shared")


def _require_mode(nl: RdmaNetlink, shared: bool) -> None:
    """Refuse when the kernel's RDMA netns mode is not the one the call names."""
    if nl.netns_shared() == shared:
        return
    if shared:
        raise ExecutorError(
            "E_RDMA_NETNS_EXCLUSIVE",
            "RDMA netns mode is exclusive: the call asked for shared association",
        )
    raise ExecutorError(
        "E_RDMA_NETNS_SHARED",
        "RDMA netns mode is shared: every namespace sees every RDMA device",
    )


class NetnsAssign:
    """``rdma/netns-assign/v1``: exclusive mode only; undo moves the device back."""

    spec: OpcodeSpec = specs.NETNS_ASSIGN

    def capture(self, ctx: EffectContext) -> Any:
        env = environment(ctx)
        sandbox = env.require_sandbox()
        shared = ctx.parameters.get("netnsMode", "exclusive") == "shared"
        with open_in(env.fd(env.host)) as nl:
            dev = rdma_device.locate(nl, single(ctx, "rdma"))
            _require_mode(nl, shared)
        record: dict[str, Any] = {
            "device": rdma_device.to_json(dev),
            "sandbox": env.scope_of(sandbox).to_json(),
        }
        if shared:
            if _where(env, sandbox, dev) != "sandbox":
                raise ExecutorError(
                    "E_DEVICE_GONE", f"the sandbox does not see RDMA device {dev.name}"
                )
            record["mode"] = "shared"
        return record

    def _sandbox(self, env: LinkEnvironment, before: Any) -> NamespaceRef:
        return env.ref_for_scope(Scope.from_json(before["sandbox"]))

    def apply(self, ctx: EffectContext, before: Any) -> None:
        env = environment(ctx)
        sandbox, dev = self._sandbox(env, before), rdma_device.from_json(before["device"])
        if _shared(before):
            with open_in(env.fd(env.host)) as nl:
                _require_mode(nl, True)
            return  # shared mode: nothing to move
        where = _where(env, sandbox, dev)
        if where == "sandbox":
            return
        if where != "host":
            raise ExecutorError("E_DEVICE_GONE", f"RDMA device {dev.name} is gone or replaced")
        _move(env, env.host, dev, sandbox)

    def observe(self, ctx: EffectContext, before: Any) -> Observed:
        env = environment(ctx)
        sandbox, dev = self._sandbox(env, before), rdma_device.from_json(before["device"])
        ok = _where(env, sandbox, dev) == "sandbox"
        base = single(ctx, "rdma")
        moved = Handle(
            id=base.id,
            type=base.type,
            inventory_id=base.inventory_id,
            scope=Scope.from_json(before["sandbox"]),
            accesses=specs.NETNS_ASSIGN.outputs["rdma"].grants,
            provenance=base.provenance,
            observations={
                "rdmaDevice": dev.name,
                "nodeGuid": dev.node_guid,
                "rdmaIndex": dev.index,
            },
        )
        detail = "" if ok else f"{dev.name} is not in the sandbox"
        return Observed(ok, {"rdma": (moved,)}, detail)

    def recover(self, ctx: EffectContext, before: Any) -> RecoveryObservation:
        env = environment(ctx)
        sandbox, dev = self._sandbox(env, before), rdma_device.from_json(before["device"])
        where = _where(env, sandbox, dev)
        if where == "sandbox":
            return RecoveryObservation.APPLIED
        if where == "host" or _shared(before):
            # shared mode changes nothing: a device the sandbox no longer sees was never moved
            return RecoveryObservation.NOT_APPLIED
        return RecoveryObservation.UNCERTAIN

    def undo(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, tuple[Handle, ...]]
    ) -> None:
        if _shared(before):
            return  # shared mode moved nothing
        env = environment(ctx)
        sandbox, dev = self._sandbox(env, before), rdma_device.from_json(before["device"])
        where = _where(env, sandbox, dev)
        if where == "sandbox":
            _move(env, sandbox, dev, env.host)
        elif where != "host":
            _log.warning("effect=%s event=undo-skip reason=rdma-device-gone", ctx.effect_id)
