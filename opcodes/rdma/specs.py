"""``rdma/*`` opcodes: RDMA device namespace association and character-device access.

Why ``connect``: both act toward the verified sandbox. ``netns-assign`` moves an exclusively
allocated RDMA device into the sandbox's network namespace over scoped NETLINK_RDMA (only in
exclusive netns mode) and records the original association; ``device-access`` grants the
sandbox exactly the allocated device's character nodes, never every uverbs/umad node
(design §6.6).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

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

_SANDBOX_DEVICE_GRANTS = frozenset({Access.READ, Access.DEVICE_ACCESS})
_NETNS_GRANTS = frozenset({Access.READ, Access.EXCLUSIVE_CONFIGURE, Access.DEVICE_ACCESS})
"""An RDMA device moved into the sandbox's namespace under an exclusive grant is usable
there: the association is what the exclusive allocation was for, so the moved handle also
grants device access (a new handle, not a continuation of the host one)."""

RdmaNode = Literal["uverbs", "rdma_cm", "umad"]


class NetnsAssignParameters(ParameterModel):
    """The node's RDMA netns mode the call expects; the target is the call's verified sandbox.

    ``exclusive`` moves the device into the sandbox's namespace. ``shared`` moves nothing:
    in shared mode every namespace sees every RDMA device, so the association is verified
    (the sandbox sees this device) and recorded, and isolation rests on the character nodes
    ``rdma/device-access`` grants. Either is refused when the kernel runs the other mode."""

    netnsMode: Literal["exclusive", "shared"] = "exclusive"


class RdmaDeviceAccessParameters(ParameterModel):
    """Which character-device classes of the allocated RDMA device the sandbox may open."""

    nodes: list[RdmaNode] = Field(min_length=1, max_length=3)

    @field_validator("nodes")
    @classmethod
    def _unique(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("nodes must not repeat")
        return value


NETNS_ASSIGN = OpcodeSpec(
    name="rdma/netns-assign/v1",
    summary="Associate an exclusively allocated RDMA device with the verified sandbox.",
    changes=(
        "Exclusive RDMA netns mode: moves the allocated RDMA device into the Pod's network "
        "namespace; the original association is recorded. Shared mode (netnsMode: shared): "
        "changes nothing, verifies that the sandbox sees the device and records it."
    ),
    undo="Moves the RDMA device back to its recorded original namespace (shared: nothing).",
    parameters=NetnsAssignParameters,
    inputs={
        "rdma": PortSpec(HandleType.RDMA_DEVICE, None, ScopeKind.HOST, Access.EXCLUSIVE_CONFIGURE)
    },
    outputs={
        "rdma": PortSpec(
            HandleType.RDMA_DEVICE,
            None,
            ScopeKind.SANDBOX,
            grants=_NETNS_GRANTS,
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
        {"rdma-exclusive-netns", "rdma-netns-mode", "exclusive-grant", "protected-scope-clear"}
    ),
    postconditions=frozenset({"rdma-in-sandbox"}),
)

DEVICE_ACCESS = OpcodeSpec(
    name="rdma/device-access/v1",
    summary="Grant the verified sandbox the allocated RDMA device's character nodes only.",
    changes=(
        "Changes nothing in the kernel: records the allocated RDMA device's character "
        "nodes (uverbs, rdma_cm, umad) that the sandbox's containers may open."
    ),
    undo=("Drops the recorded grant; containers started afterwards no longer get those nodes."),
    parameters=RdmaDeviceAccessParameters,
    inputs={
        "rdma": PortSpec(HandleType.RDMA_DEVICE, None, ScopeKind.SANDBOX, Access.DEVICE_ACCESS)
    },
    outputs={
        "rdma": PortSpec(
            HandleType.RDMA_DEVICE,
            None,
            ScopeKind.SANDBOX,
            grants=_SANDBOX_DEVICE_GRANTS,
            inherits="rdma",
        )
    },
    hooks=frozenset({Hook.CONNECT}),
    reversibility=Reversibility.REVERSIBLE,
    recovery=frozenset({RecoveryStrategy.OBSERVE_AND_RECONCILE, RecoveryStrategy.QUARANTINE}),
    requires=frozenset({"same-sandbox", "device-node-identity"}),
    postconditions=frozenset({"rdma-node-identity"}),
)

SPECS: tuple[OpcodeSpec, ...] = (NETNS_ASSIGN, DEVICE_ACCESS)
