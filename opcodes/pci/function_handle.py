"""A ``PciFunction/v1`` handle, found again on the live node and continued as an output.

The inventory puts ``pciAddress`` (and the function's ``vendor``/``device`` ids) in the handle's
observations. :func:`live_identity` re-reads the function at that address and refuses when it
is gone (``E_DEVICE_GONE``) or is other hardware than the handle observed
(``E_DEVICE_IDENTITY``). :func:`function_output` is the handle a PCI effect hands on: the same
grant, the accesses the opcode's output port declares, and what was read back.
"""

from __future__ import annotations

from pathlib import Path

from dmn.opcodes.executor import ExecutorError
from dmn.opcodes.pci import function_sysfs as pci
from dmn.opcodes.spec import OpcodeSpec
from dmn.vocabulary.handles import Handle, Observation


def live_identity(root: Path, handle: Handle) -> pci.FunctionIdentity:
    address = str(handle.observations.get("pciAddress", "") or "")
    identity = pci.read_identity(root, address) if address else None
    if not address:
        raise ExecutorError("E_DEVICE_IDENTITY", f"handle {handle.id} observes no pciAddress")
    if identity is None:
        raise ExecutorError("E_DEVICE_GONE", f"no PCI function at {address}")
    for key, live in (("vendor", identity.vendor), ("device", identity.device)):
        seen = handle.observations.get(key)
        if seen is not None and str(seen) != live:
            raise ExecutorError(
                "E_DEVICE_IDENTITY", f"{address} is {key} {live}, the handle observed {seen}"
            )
    return identity


def function_output(
    base: Handle,
    spec: OpcodeSpec,
    identity: pci.FunctionIdentity,
    driver: str | None,
    group: str | None,
) -> Handle:
    observations: dict[str, Observation] = dict(base.observations)
    observations.update(
        {
            "pciAddress": identity.address,
            "vendor": identity.vendor,
            "device": identity.device,
            "driver": driver or "",
            "iommuGroup": group or "",
        }
    )
    return Handle(
        id=base.id,
        type=base.type,
        inventory_id=base.inventory_id,
        scope=base.scope,
        accesses=spec.outputs["function"].grants,
        link_type=base.link_type,
        provenance=base.provenance,
        observations=observations,
    )
