"""``share/*`` opcodes: shared-parent entitlements for macvlan/ipvlan allocation roots.

Why ``prepare``: a share is realised at NodePrepare (design §6.4: NodePrepare holds one
validated share of the parent and records the parent's baseline); connect then
creates the child from the held share. The held parent grants ``CreateChild`` only — a
share can never configure, rebind or reset its host parent (design §3.1).
"""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from dmn.opcodes.parameter_types import ParameterModel
from dmn.opcodes.spec import OpcodeSpec, PortSpec
from dmn.vocabulary.terms import (
    Access,
    HandleType,
    Hook,
    LinkType,
    RecoveryStrategy,
    Reversibility,
    ScopeKind,
)

MACVLAN_MODES = ("bridge", "private", "vepa", "passthru")
IPVLAN_MODES = ("l2", "l3", "l3s")


class HoldParentParameters(ParameterModel):
    """The child kind and mode this share will create; checked for parent-wide compatibility."""

    childKind: Literal["macvlan", "ipvlan"]
    mode: Literal["bridge", "private", "vepa", "passthru", "l2", "l3", "l3s"]

    @model_validator(mode="after")
    def _mode_fits_kind(self) -> HoldParentParameters:
        allowed = MACVLAN_MODES if self.childKind == "macvlan" else IPVLAN_MODES
        if self.mode not in allowed:
            raise ValueError(f"mode {self.mode!r} is not a {self.childKind} mode {allowed}")
        return self


HOLD_PARENT = OpcodeSpec(
    name="share/hold-parent/v1",
    summary="Hold this allocation's share of a host parent and record the parent baseline.",
    changes=(
        "Changes nothing in the kernel: records this allocation's share of the host "
        "parent and the parent's baseline (mode, MTU) in the journal."
    ),
    undo="Releases the recorded share; the parent is not touched.",
    parameters=HoldParentParameters,
    inputs={
        "parent": PortSpec(
            HandleType.KERNEL_INTERFACE,
            frozenset({LinkType.ETHERNET}),
            ScopeKind.HOST,
            Access.CREATE_CHILD,
        )
    },
    outputs={
        "parent": PortSpec(
            HandleType.SHARED_PARENT,
            frozenset({LinkType.ETHERNET}),
            ScopeKind.HOST,
            grants=frozenset({Access.CREATE_CHILD}),
        )
    },
    hooks=frozenset({Hook.PREPARE}),
    reversibility=Reversibility.REVERSIBLE,
    recovery=frozenset({RecoveryStrategy.OBSERVE_AND_RECONCILE, RecoveryStrategy.QUARANTINE}),
    requires=frozenset(
        {"host-scope", "create-child-grant", "share-entitlement", "parent-mode-compatible"}
    ),
    postconditions=frozenset({"share-held"}),
)

SPECS: tuple[OpcodeSpec, ...] = (HOLD_PARENT,)
