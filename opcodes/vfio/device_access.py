"""Executor of ``vfio/device-access/v1``: grant the verified sandbox one function's VFIO nodes.

Capture proves device-access readiness without expecting a netdevice: the handle's function
is the published one (``pciAddress`` plus vendor/device ids), it is bound to a VFIO driver
that the exposure policy allows, its IOMMU group is viable (no peer the host drives), and the
nodes of the chosen backend exist and are the kernel's (``device_nodes``). It records those
nodes, the function's identity and the sandbox.

Apply writes the CDI spec that names exactly those nodes (``cdi_spec``), with the
function's PCI address and IOMMU group as ``DMN_VFIO_<DEVICE>_PCI_ADDRESS`` and
``DMN_VFIO_<DEVICE>_IOMMU_GROUP`` environment edits; the output
``VfioDevice/v1`` handle, scoped to the sandbox, carries them in ``deviceNodes`` — from it the
agent adds the nodes to each of the sandbox's containers at NRI CreateContainer. Nothing in the
kernel changes. Undo removes the spec only while it still holds this effect's bytes; recover
reads the file (this exact content: Applied; absent: NotApplied; other: Uncertain).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from dmn.opcodes import cdi_spec
from dmn.opcodes.cdi_spec import GrantSpec
from dmn.opcodes.device_environment import allowed_drivers, cdi_root, dev_root, sysfs_root
from dmn.opcodes.effect_handles import environment, single
from dmn.opcodes.executor import EffectContext, ExecutorError, Observed, RecoveryObservation
from dmn.opcodes.granted_nodes import DeviceNode, encode
from dmn.opcodes.pci import function_sysfs as pci
from dmn.opcodes.pci import quiescence
from dmn.opcodes.pci.function_handle import live_identity
from dmn.opcodes.spec import OpcodeSpec
from dmn.opcodes.vfio import specs
from dmn.opcodes.vfio.device_nodes import cdev_nodes, group_nodes
from dmn.vocabulary.handles import Handle, Scope


def _nodes(ctx: EffectContext, address: str, group: str, backend: str) -> tuple[DeviceNode, ...]:
    sysfs, dev = sysfs_root(ctx.env), dev_root(ctx.env)
    if backend == "cdev":
        return cdev_nodes(sysfs, dev, address)
    return group_nodes(sysfs, dev, group)


class DeviceAccess:
    """``vfio/device-access/v1``: a CDI spec for exactly the verified nodes; undo removes it."""

    spec: OpcodeSpec = specs.DEVICE_ACCESS

    def capture(self, ctx: EffectContext) -> Any:
        env = environment(ctx)
        sandbox = env.require_sandbox()
        root = sysfs_root(ctx.env)
        identity = live_identity(root, single(ctx, "function"))
        address = identity.address
        driver = pci.driver_of(root, address)
        if driver not in quiescence.VFIO_DRIVERS - {"pci-stub"} or driver not in allowed_drivers(
            ctx.env
        ):
            raise ExecutorError(
                "E_VFIO_NODE", f"{address} is bound to {driver}, not an allowed VFIO driver"
            )
        group = pci.iommu_group(root, address)
        if group is None:
            raise ExecutorError("E_NO_IOMMU_GROUP", f"{address} has no IOMMU group: no VFIO")
        quiescence.require_group_viable(root, address, group)
        backend = str(ctx.parameters["accessBackend"])
        nodes = _nodes(ctx, address, group, backend)
        return {
            "function": identity.to_json(),
            "group": group,
            "backend": backend,
            "nodes": [n.to_json() for n in nodes],
            "sandbox": env.scope_of(sandbox).to_json(),
        }

    def _spec(self, ctx: EffectContext, before: Any) -> GrantSpec:
        nodes = tuple(DeviceNode.from_json(n) for n in before["nodes"])
        env = {
            "PCI_ADDRESS": str(before["function"]["address"]),
            "IOMMU_GROUP": str(before["group"]),
        }
        return GrantSpec.of(cdi_root(ctx.env), "vfio", ctx.alias, nodes, env)

    def apply(self, ctx: EffectContext, before: Any) -> None:
        self._spec(ctx, before).write()

    def _nodes_hold(self, ctx: EffectContext, before: Any) -> str:
        """Why the recorded grant no longer holds, or ``""`` when it does."""
        recorded = pci.FunctionIdentity.from_json(before["function"])
        root = sysfs_root(ctx.env)
        if pci.read_identity(root, recorded.address) != recorded:
            return "the recorded function is gone or replaced"
        try:
            nodes = _nodes(ctx, recorded.address, str(before["group"]), str(before["backend"]))
        except ExecutorError as exc:
            return str(exc)
        if [n.to_json() for n in nodes] != before["nodes"]:
            return "the VFIO nodes changed"
        return ""

    def observe(self, ctx: EffectContext, before: Any) -> Observed:
        spec = self._spec(ctx, before)
        why = self._nodes_hold(ctx, before)
        if not why and not spec.holds():
            why = f"{spec.path} does not hold this grant's CDI spec"
        base = single(ctx, "function")
        nodes = tuple(DeviceNode.from_json(n) for n in before["nodes"])
        device = Handle(
            id=f"{base.id}/vfio",
            type=specs.DEVICE_ACCESS.outputs["device"].type,
            inventory_id=base.inventory_id,
            scope=Scope.from_json(before["sandbox"]),
            accesses=specs.DEVICE_ACCESS.outputs["device"].grants,
            provenance=replace(base.provenance, operation=ctx.operation_id, effect=ctx.effect_id),
            observations={
                "pciAddress": str(before["function"]["address"]),
                "iommuGroup": str(before["group"]),
                "deviceNodes": encode(nodes),
                "cdiDevice": cdi_spec.qualified_name("vfio", ctx.alias),
            },
        )
        return Observed(not why, {"device": (device,)}, why)

    def recover(self, ctx: EffectContext, before: Any) -> RecoveryObservation:
        return self._spec(ctx, before).observe()

    def undo(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, tuple[Handle, ...]]
    ) -> None:
        self._spec(ctx, before).remove(ctx.effect_id)
