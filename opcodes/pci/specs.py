"""``pci/*`` opcodes: driver binding and function reset of an exclusively granted function.

Why ``prepare`` only: rebinding and resets change what the node exposes and may recreate
netdevices, so they run at NodePrepare, before any sandbox exists, under the allocation's
exclusive grant (design §6.5, §6.7). Binding is ``Rediscover``: undo restores the recorded
original driver and the function's dependents are found again by stable identity, never by a
remembered name or ifindex. A reset has no inverse (``Irreversible``): after an uncertain
outcome it is observed and reconciled, or quarantined — never repeated blindly.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

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

DRIVER_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,31}$"
DriverName = Annotated[str, Field(min_length=1, max_length=32, pattern=DRIVER_NAME_PATTERN)]
"""A kernel driver name; the executor binds only drivers on the exposure policy's allowlist."""

_FUNCTION_GRANTS = frozenset({Access.READ, Access.EXCLUSIVE_CONFIGURE, Access.DEVICE_ACCESS})


class DriverBindParameters(ParameterModel):
    """The target driver (``vfio-pci`` for VFIO roots), checked against the policy allowlist."""

    driver: DriverName


class FunctionResetParameters(ParameterModel):
    """Reset method; ``auto`` lets the kernel pick the function's first supported method."""

    method: Literal["auto", "flr", "pm", "bus"] = "auto"


DRIVER_BIND = OpcodeSpec(
    name="pci/driver-bind/v1",
    summary="Bind an exclusively granted PCI function to an allowlisted driver, recording the "
    "original.",
    changes=(
        "Unbinds the PCI function from its current driver and binds it to the allowlisted "
        "driver (for example vfio-pci); the function's netdevice disappears or changes."
    ),
    undo=(
        "Rebinds the function to its recorded original driver and rediscovers its "
        "dependents by stable identity."
    ),
    parameters=DriverBindParameters,
    inputs={
        "function": PortSpec(
            HandleType.PCI_FUNCTION, None, ScopeKind.HOST, Access.EXCLUSIVE_CONFIGURE
        )
    },
    outputs={
        "function": PortSpec(HandleType.PCI_FUNCTION, None, ScopeKind.HOST, grants=_FUNCTION_GRANTS)
    },
    hooks=frozenset({Hook.PREPARE}),
    reversibility=Reversibility.REDISCOVER,
    recovery=frozenset(
        {
            RecoveryStrategy.REDISCOVER,
            RecoveryStrategy.RESTORE_BEFORE_IMAGE,
            RecoveryStrategy.QUARANTINE,
        }
    ),
    requires=frozenset(
        {"exclusive-grant", "iommu-group-owned", "driver-allowlisted", "protected-scope-clear"}
    ),
    postconditions=frozenset({"driver-bound", "function-rediscovered"}),
)

FUNCTION_RESET = OpcodeSpec(
    name="pci/function-reset/v1",
    summary="Reset an exclusively granted PCI function whose reset domain is quiescent.",
    changes=(
        "Resets the PCI function (FLR, PM or bus reset, or the kernel's first supported "
        "method); its device state is lost."
    ),
    undo=(
        "Nothing: a reset cannot be undone; after an uncertain outcome it is observed or "
        "quarantined, never repeated blindly."
    ),
    parameters=FunctionResetParameters,
    inputs={
        "function": PortSpec(
            HandleType.PCI_FUNCTION, None, ScopeKind.HOST, Access.EXCLUSIVE_CONFIGURE
        )
    },
    outputs={
        "function": PortSpec(HandleType.PCI_FUNCTION, None, ScopeKind.HOST, grants=_FUNCTION_GRANTS)
    },
    hooks=frozenset({Hook.PREPARE}),
    reversibility=Reversibility.IRREVERSIBLE,
    recovery=frozenset(
        {
            RecoveryStrategy.OBSERVE_AND_RECONCILE,
            RecoveryStrategy.REDISCOVER,
            RecoveryStrategy.QUARANTINE,
        }
    ),
    requires=frozenset({"exclusive-grant", "reset-domain-quiescent", "protected-scope-clear"}),
    postconditions=frozenset({"reset-completed", "function-rediscovered"}),
)

SPECS: tuple[OpcodeSpec, ...] = (DRIVER_BIND, FUNCTION_RESET)
