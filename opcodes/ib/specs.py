"""``ib/*`` opcodes: typed InfiniBand (IPoIB) port settings.

Why ``connect``: the settings belong to the IPoIB netdevice handed to the sandbox; Ethernet
VLAN/bond/MAC semantics never apply to an InfiniBand handle (design §6.6), so IB gets its own
opcode rather than overloading ``linux/link-configure``. The original mode and MTU are recorded
and restored.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

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

IPOIB_DATAGRAM_MAX_MTU = 4092
IpoibMtu = Annotated[int, Field(ge=256, le=65520)]
"""IPoIB MTU: datagram mode is limited to 4092 (4 KiB IB MTU minus the 4-byte header),
connected mode to 65520."""

_IB = frozenset({LinkType.INFINIBAND})
_CONFIGURE_GRANTS = frozenset({Access.READ, Access.EXCLUSIVE_CONFIGURE})


class PortConfigureParameters(ParameterModel):
    """IPoIB transport mode and MTU; at least one is set."""

    mode: Literal["datagram", "connected"] | None = None
    mtu: IpoibMtu | None = None

    @model_validator(mode="after")
    def _consistent(self) -> PortConfigureParameters:
        if self.mode is None and self.mtu is None:
            raise ValueError("set at least one of mode, mtu")
        if self.mode == "datagram" and self.mtu is not None and self.mtu > IPOIB_DATAGRAM_MAX_MTU:
            raise ValueError(f"datagram mode allows mtu up to {IPOIB_DATAGRAM_MAX_MTU}")
        return self


PORT_CONFIGURE = OpcodeSpec(
    name="ib/port-configure/v1",
    summary="Set IPoIB transport mode and MTU of a sandbox InfiniBand interface.",
    changes=(
        "Sets the IPoIB transport mode (datagram/connected) and/or MTU of an InfiniBand "
        "interface in the Pod's namespace; the originals are recorded."
    ),
    undo="Restores the recorded IPoIB mode and MTU.",
    parameters=PortConfigureParameters,
    inputs={
        "interface": PortSpec(
            HandleType.KERNEL_INTERFACE, _IB, ScopeKind.SANDBOX, Access.EXCLUSIVE_CONFIGURE
        )
    },
    outputs={
        "interface": PortSpec(
            HandleType.KERNEL_INTERFACE,
            _IB,
            ScopeKind.SANDBOX,
            grants=_CONFIGURE_GRANTS,
            inherits="interface",
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
    requires=frozenset({"same-sandbox", "owned-link", "exclusive-grant"}),
    postconditions=frozenset({"ib-port-state-match"}),
)

SPECS: tuple[OpcodeSpec, ...] = (PORT_CONFIGURE,)
