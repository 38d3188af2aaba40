"""``ovs/*`` opcodes: Open vSwitch ports for host representors, through OVSDB.

Why ``connect``: the ovs-cni operation plugs a representor while its workload is connected and
unplugs it at removal. The bridge is an administrator alias from the exposure policy. The
UUIDs of the rows an effect creates are journaled before they are inserted, so recovery and
undo find them by the journal's record (the rows' per-operation external IDs are for operators,
not proof), and foreign ports are never touched (design §6.7).
"""

from __future__ import annotations

from pydantic import Field, model_validator

from dmn.opcodes.parameter_types import AdminAlias, ParameterModel, VlanId
from dmn.opcodes.spec import OpcodeSpec, PortSpec
from dmn.vocabulary.terms import (
    Access,
    HandleType,
    Hook,
    RecoveryStrategy,
    Reversibility,
    ScopeKind,
)

MAX_TRUNK_VLANS = 64


class PortAttachParameters(ParameterModel):
    """The approved OVS bridge by alias, an optional access tag and trunk VLANs."""

    bridge: AdminAlias
    tag: VlanId | None = None
    trunks: list[VlanId] = Field(default_factory=list, max_length=MAX_TRUNK_VLANS)

    @model_validator(mode="after")
    def _consistent(self) -> PortAttachParameters:
        if len(set(self.trunks)) != len(self.trunks):
            raise ValueError("trunks must not repeat")
        if self.tag is not None and self.trunks:
            raise ValueError("an access port (tag) carries no trunks")
        return self


PORT_ATTACH = OpcodeSpec(
    name="ovs/port-attach/v1",
    summary="Add a verified host representor as an owned port of an approved OVS bridge.",
    changes=(
        "Adds the host representor as a port of the approved Open vSwitch bridge over "
        "OVSDB, with optional access tag and trunks and this operation's external IDs."
    ),
    undo=(
        "Deletes the Port and Interface rows it created (found by the row UUIDs its "
        "journal recorded before the insert); foreign ports are never touched."
    ),
    parameters=PortAttachParameters,
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
    hooks=frozenset({Hook.CONNECT}),
    reversibility=Reversibility.REVERSIBLE,
    recovery=frozenset(
        {
            RecoveryStrategy.OBSERVE_AND_RECONCILE,
            RecoveryStrategy.RESTORE_BEFORE_IMAGE,
            RecoveryStrategy.QUARANTINE,
        }
    ),
    requires=frozenset(
        {"host-scope", "ovs-bridge-grant", "representor-mapping-verified", "vlan-grant"}
    ),
    postconditions=frozenset({"ovs-port-owned"}),
)

SPECS: tuple[OpcodeSpec, ...] = (PORT_ATTACH,)
