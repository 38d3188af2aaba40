"""``representor/*`` opcodes: approved link settings of a switchdev host representor.

Why both hooks: a representor stays a host resource (design §6.7). A root may settle its
state at NodePrepare, and the bridge plugins (Operations, which only have ``connect``) bring it
to the bridge's MTU and up *after* installing VLANs, so the port stays down meanwhile. The
original MTU and state are recorded and restored.
"""

from __future__ import annotations

from pydantic import model_validator

from dmn.opcodes.parameter_types import Mtu, ParameterModel
from dmn.opcodes.spec import OpcodeSpec, PortSpec
from dmn.vocabulary.terms import (
    Access,
    HandleType,
    Hook,
    RecoveryStrategy,
    Reversibility,
    ScopeKind,
)


class RepresentorConfigureParameters(ParameterModel):
    """Representor MTU and admin state; at least one is set."""

    mtu: Mtu | None = None
    up: bool | None = None

    @model_validator(mode="after")
    def _something_to_do(self) -> RepresentorConfigureParameters:
        if self.mtu is None and self.up is None:
            raise ValueError("set at least one of mtu, up")
        return self


CONFIGURE = OpcodeSpec(
    name="representor/configure/v1",
    summary="Set MTU and admin state of a verified host representor, recording the original.",
    changes=(
        "Sets the MTU and/or administrative state of a switchdev host representor; the "
        "originals are recorded."
    ),
    undo="Restores the representor's recorded MTU and administrative state.",
    parameters=RepresentorConfigureParameters,
    inputs={
        "representor": PortSpec(
            HandleType.HOST_REPRESENTOR, None, ScopeKind.HOST, Access.EXCLUSIVE_CONFIGURE
        )
    },
    outputs={
        "representor": PortSpec(
            HandleType.HOST_REPRESENTOR,
            None,
            ScopeKind.HOST,
            grants=frozenset({Access.READ, Access.EXCLUSIVE_CONFIGURE}),
            inherits="representor",
        )
    },
    hooks=frozenset({Hook.PREPARE, Hook.CONNECT}),
    reversibility=Reversibility.REVERSIBLE,
    recovery=frozenset(
        {
            RecoveryStrategy.OBSERVE_AND_RECONCILE,
            RecoveryStrategy.RESTORE_BEFORE_IMAGE,
            RecoveryStrategy.QUARANTINE,
        }
    ),
    requires=frozenset({"host-scope", "representor-mapping-verified", "exclusive-grant"}),
    postconditions=frozenset({"representor-state-match"}),
)

SPECS: tuple[OpcodeSpec, ...] = (CONFIGURE,)
