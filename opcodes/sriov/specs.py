"""``sriov/*`` opcodes: per-VF settings a PF holds for one of its virtual functions.

Why ``prepare``: the settings live in the PF (``ip link set <pf> vf N ...``), a host resource,
and must hold before the VF's netdevice (or VFIO device) reaches a sandbox; they are set under
the allocation's exclusive grant of that VF and undone at unprepare, after the VF left every
sandbox. The VF is named by its ``PciFunction/v1`` handle; the executor re-verifies which PF
and VF index that is (sysfs ``virtfnN`` for a PCI VF, the PF's VF count always) and records the
PF's kernel identity (ifindex, name, parent device), never a name a tenant can write. Undo
writes every recorded before-value of the settings it changed back through the PF: MAC,
VLAN + QoS (+ protocol), spoof checking, trust, min/max TX rate and link state.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, model_validator

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

UNICAST_MAC_PATTERN = r"^[0-9a-f][02468ace](:[0-9a-f]{2}){5}$"
"""A lower-case unicast MAC (the group bit of the first octet clear)."""

VfMac = Annotated[str, Field(min_length=17, max_length=17)]
"""Checked against :data:`UNICAST_MAC_PATTERN` by the model (the checker's boundary samples of
a config string are not MACs; the plugin's configSchema carries the same pattern)."""
VfVlan = Annotated[int, Field(ge=0, le=4094)]
"""0 clears the VF's VLAN (untagged), 1..4094 tags with that ID."""
VlanQos = Annotated[int, Field(ge=0, le=7)]
TxRateMbps = Annotated[int, Field(ge=0, le=400_000)]
"""Mbit/s; 0 means no limit (what the kernel reports when none is set)."""

LINK_STATES: dict[str, int] = {"auto": 0, "enable": 1, "disable": 2}
"""``IFLA_VF_LINK_STATE_{AUTO,ENABLE,DISABLE}``."""


class VfConfigureParameters(ParameterModel):
    """The settings to hold while the VF is allocated; unset fields are left untouched."""

    mac: VfMac | None = None
    vlan: VfVlan | None = None
    qos: VlanQos | None = None
    spoofCheck: bool | None = None
    trust: bool | None = None
    minTxRate: TxRateMbps | None = None
    maxTxRate: TxRateMbps | None = None
    linkState: Literal["auto", "enable", "disable"] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> VfConfigureParameters:
        if all(getattr(self, name) is None for name in type(self).model_fields):
            raise ValueError("set at least one VF setting")
        if self.mac is not None and not re.fullmatch(UNICAST_MAC_PATTERN, self.mac):
            raise ValueError("mac must be a lower-case unicast MAC (aa:bb:cc:dd:ee:ff)")
        if self.mac == "00:00:00:00:00:00":
            raise ValueError("mac must not be all zeros")
        if self.qos is not None and self.vlan is None:
            raise ValueError("qos needs vlan")
        if self.qos and self.vlan == 0:
            raise ValueError("qos needs a VLAN ID, not 0")
        if self.minTxRate and self.maxTxRate and self.minTxRate > self.maxTxRate:
            raise ValueError("minTxRate must not exceed maxTxRate")
        return self


VF_CONFIGURE = OpcodeSpec(
    name="sriov/vf-configure/v1",
    summary="Set an allocated VF's MAC, VLAN/QoS, spoofchk, trust, rates, link state via its PF.",
    parameters=VfConfigureParameters,
    inputs={
        "function": PortSpec(
            HandleType.PCI_FUNCTION, None, ScopeKind.HOST, Access.EXCLUSIVE_CONFIGURE
        )
    },
    outputs={
        "function": PortSpec(
            HandleType.PCI_FUNCTION,
            None,
            ScopeKind.HOST,
            grants=frozenset({Access.READ, Access.EXCLUSIVE_CONFIGURE}),
            inherits="function",
        )
    },
    hooks=frozenset({Hook.PREPARE}),
    reversibility=Reversibility.REVERSIBLE,
    recovery=frozenset(
        {
            RecoveryStrategy.OBSERVE_AND_RECONCILE,
            RecoveryStrategy.RESTORE_BEFORE_IMAGE,
            RecoveryStrategy.QUARANTINE,
        }
    ),
    requires=frozenset({"exclusive-grant", "vf-mapping-verified"}),
    postconditions=frozenset({"vf-settings-match"}),
    changes=(
        "The PF's settings for one VF: the MAC it assigns, the VLAN/QoS it tags with, spoof "
        "checking, trust, min/max TX rate and link state (only the parameters that are set)."
    ),
    undo=(
        "Writes the recorded value of every setting it changed back through the same PF "
        "(same ifindex, name and bus device); a replaced PF is left alone."
    ),
)

SPECS: tuple[OpcodeSpec, ...] = (VF_CONFIGURE,)
