"""``bridge/*`` opcodes: Linux bridge membership and VLANs for host representors.

Why ``connect``: these are the accelerated-bridge-cni operations; they run while the workload's
sandbox is being connected and are undone at removal. Bridges and uplinks are named by the
administrator alias of an exposure-policy grant (``allowedHostBridges``), resolved by the
executor, never by a name from workload config. Shared bridge attributes are never changed;
the representor's original membership and VLAN table are recorded and restored (design §6.7).
``shared-uplink-vlan`` adds a VLAN to an approved uplink under a journaled per-VID reference,
removing a driver-created VID only after its last reference is released.
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

_RESTORABLE = frozenset(
    {
        RecoveryStrategy.OBSERVE_AND_RECONCILE,
        RecoveryStrategy.RESTORE_BEFORE_IMAGE,
        RecoveryStrategy.QUARANTINE,
    }
)


def _representor(access: Access) -> PortSpec:
    return PortSpec(HandleType.HOST_REPRESENTOR, None, ScopeKind.HOST, access)


_REPRESENTOR_OUT = PortSpec(
    HandleType.HOST_REPRESENTOR,
    None,
    ScopeKind.HOST,
    grants=frozenset({Access.READ, Access.EXCLUSIVE_CONFIGURE}),
    inherits="representor",
)


class PortAttachParameters(ParameterModel):
    """The approved bridge, by administrator alias."""

    bridge: AdminAlias


class PortVlanParameters(ParameterModel):
    """Access VLAN (PVID, egress untagged) and/or tagged trunk VLANs; disjoint, unique."""

    pvid: VlanId | None = None
    tagged: list[VlanId] = Field(default_factory=list, max_length=MAX_TRUNK_VLANS)

    @model_validator(mode="after")
    def _consistent(self) -> PortVlanParameters:
        if self.pvid is None and not self.tagged:
            raise ValueError("set pvid or at least one tagged VLAN")
        if len(set(self.tagged)) != len(self.tagged):
            raise ValueError("tagged VLANs must not repeat")
        if self.pvid is not None and self.pvid in self.tagged:
            raise ValueError("pvid must not also be tagged")
        return self


class SharedUplinkVlanParameters(ParameterModel):
    """The approved bridge and uplink, by alias, and the VLAN the uplink must carry."""

    bridge: AdminAlias
    uplink: AdminAlias
    vlanId: VlanId


PORT_ATTACH = OpcodeSpec(
    name="bridge/port-attach/v1",
    summary="Attach a verified host representor, kept down, to an approved Linux bridge.",
    changes=(
        "Makes the host representor a port of the approved Linux bridge (resolved from "
        "the administrator alias), keeping it down."
    ),
    undo="Removes the representor from the bridge, restoring its recorded membership.",
    parameters=PortAttachParameters,
    inputs={"representor": _representor(Access.EXCLUSIVE_CONFIGURE)},
    outputs={"representor": _REPRESENTOR_OUT},
    hooks=frozenset({Hook.CONNECT}),
    reversibility=Reversibility.REVERSIBLE,
    recovery=_RESTORABLE,
    requires=frozenset(
        {"host-scope", "bridge-grant", "representor-mapping-verified", "exclusive-grant"}
    ),
    postconditions=frozenset({"bridge-membership-match"}),
)

PORT_VLAN = OpcodeSpec(
    name="bridge/port-vlan/v1",
    summary="Install permitted access/trunk VLANs on a representor's bridge port.",
    changes=(
        "Installs the access VLAN (PVID) and/or tagged VLANs on the representor's bridge "
        "port; the original VLAN table is recorded."
    ),
    undo="Restores the port's recorded VLAN table.",
    parameters=PortVlanParameters,
    inputs={"representor": _representor(Access.EXCLUSIVE_CONFIGURE)},
    outputs={"representor": _REPRESENTOR_OUT},
    hooks=frozenset({Hook.CONNECT}),
    reversibility=Reversibility.REVERSIBLE,
    recovery=_RESTORABLE,
    requires=frozenset({"host-scope", "bridge-grant", "vlan-grant", "exclusive-grant"}),
    postconditions=frozenset({"bridge-vlan-match"}),
)

SHARED_UPLINK_VLAN = OpcodeSpec(
    name="bridge/shared-uplink-vlan/v1",
    summary="Reference-count one permitted VLAN on an approved bridge uplink for this representor.",
    changes=(
        "Adds one VLAN to the approved bridge uplink if it is not there yet, under a "
        "journaled per-VLAN reference count."
    ),
    undo=(
        "Releases this reference; the VLAN is removed from the uplink only when the last "
        "reference goes and only if this driver created it."
    ),
    parameters=SharedUplinkVlanParameters,
    inputs={"representor": _representor(Access.READ)},
    outputs={},
    hooks=frozenset({Hook.CONNECT}),
    reversibility=Reversibility.REVERSIBLE,
    recovery=frozenset({RecoveryStrategy.OBSERVE_AND_RECONCILE, RecoveryStrategy.QUARANTINE}),
    requires=frozenset({"host-scope", "bridge-grant", "uplink-grant", "vlan-grant"}),
    postconditions=frozenset({"uplink-vlan-present"}),
)

SPECS: tuple[OpcodeSpec, ...] = (PORT_ATTACH, PORT_VLAN, SHARED_UPLINK_VLAN)
