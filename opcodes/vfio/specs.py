"""``vfio/*`` opcodes: device access to a function bound to ``vfio-pci``.

Why ``connect``: access is granted to a verified consumer, and NodePrepare has no guaranteed
sandbox (design §3.2). VFIO connect verifies device access without expecting a
netdev (§6.2): the executor checks the group (or cdev) node's identity and major/minor and
records the sandbox as the single consumer whose containers may get exactly that node (§6.5,
§7.4). The output is the ``VfioDevice/v1`` handle a VFIO root exports instead of an interface.
"""

from __future__ import annotations

from typing import Literal

from dmn.opcodes.parameter_types import ParameterModel
from dmn.opcodes.spec import OpcodeSpec, PortSpec
from dmn.vocabulary.terms import (
    Access,
    HandleType,
    Hook,
    RecoveryStrategy,
    Reversibility,
    ScopeKind,
)


class DeviceAccessParameters(ParameterModel):
    """The access backend: the group node, or a certified iommufd cdev."""

    accessBackend: Literal["group", "cdev"]


DEVICE_ACCESS = OpcodeSpec(
    name="vfio/device-access/v1",
    summary="Grant the verified sandbox access to exactly one VFIO-bound function's device node.",
    changes=(
        "Changes nothing in the kernel: verifies the VFIO group or cdev node and records "
        "the Pod sandbox as its single consumer, so its containers get exactly that "
        "device node."
    ),
    undo=(
        "Drops the recorded consumer; containers started afterwards no longer get the device node."
    ),
    parameters=DeviceAccessParameters,
    inputs={
        "function": PortSpec(HandleType.PCI_FUNCTION, None, ScopeKind.HOST, Access.DEVICE_ACCESS)
    },
    outputs={
        "device": PortSpec(
            HandleType.VFIO_DEVICE,
            None,
            ScopeKind.SANDBOX,
            grants=frozenset({Access.READ, Access.DEVICE_ACCESS}),
        )
    },
    hooks=frozenset({Hook.CONNECT}),
    reversibility=Reversibility.REVERSIBLE,
    recovery=frozenset({RecoveryStrategy.OBSERVE_AND_RECONCILE, RecoveryStrategy.QUARANTINE}),
    requires=frozenset({"iommu-group-owned", "device-node-identity", "driver-allowlisted"}),
    postconditions=frozenset({"vfio-node-identity"}),
)

SPECS: tuple[OpcodeSpec, ...] = (DEVICE_ACCESS,)
