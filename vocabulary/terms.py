"""The words of the effect language, written once (design §3.1, §4.2).

Handle types, link types, accesses, scopes, output ownership, hooks, step kinds,
reversibility and recovery strategies are read by the document models
(``dmn.interpreter.documents``, which are also the NetworkPlugin CRD), the checker,
the binder, the opcode specs and executors, and the cluster API models. This module is
the one place they are spelled; it sits at the bottom of the import graph (it imports
nothing of the project) so that every layer can use it without a package cycle.

Each closed set has two spellings that are kept equal here:

* a ``StrEnum`` for code (``HandleType.KERNEL_INTERFACE``), and
* a ``Literal`` of the same values for strict pydantic documents (``HandleTypeName``):
  in strict mode a YAML string validates against a ``Literal`` but not against an enum,
  and the generated CRD carries the literal values as its ``enum``.

:func:`_same_values` runs at import: a value added to one spelling and not the other
fails every import of the vocabulary, so the two can never drift.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal, get_args


class HandleType(StrEnum):
    KERNEL_INTERFACE = "KernelInterface/v1"
    VFIO_DEVICE = "VfioDevice/v1"
    RDMA_DEVICE = "RdmaDevice/v1"
    SHARED_PARENT = "SharedParent/v1"
    HOST_REPRESENTOR = "HostRepresentor/v1"
    PCI_FUNCTION = "PciFunction/v1"
    NETWORK_ATTACHMENT = "NetworkAttachment/v1"


HandleTypeName = Literal[
    "KernelInterface/v1",
    "VfioDevice/v1",
    "RdmaDevice/v1",
    "SharedParent/v1",
    "HostRepresentor/v1",
    "PciFunction/v1",
    "NetworkAttachment/v1",
]


class LinkType(StrEnum):
    ETHERNET = "ethernet"
    INFINIBAND = "infiniband"


LinkTypeName = Literal["ethernet", "infiniband"]


class Access(StrEnum):
    READ = "Read"
    CREATE_CHILD = "CreateChild"
    EXCLUSIVE_CONFIGURE = "ExclusiveConfigure"
    EXCLUSIVE_MASTER = "ExclusiveMaster"
    ATTACH_MEMBER = "AttachMember"
    DEVICE_ACCESS = "DeviceAccess"


AccessName = Literal[
    "Read", "CreateChild", "ExclusiveConfigure", "ExclusiveMaster", "AttachMember", "DeviceAccess"
]


class ScopeKind(StrEnum):
    """Where a handle lives: the host, or the call's verified Pod sandbox."""

    HOST = "host"
    SANDBOX = "sandbox"


class Ownership(StrEnum):
    """What a plugin's output port claims about the handle it exports."""

    CREATED = "Created"
    MOVED = "Moved"
    GRANTED = "Granted"
    CONFIGURED = "Configured"
    ATTACHED = "Attached"


OwnershipName = Literal["Created", "Moved", "Granted", "Configured", "Attached"]


class Hook(StrEnum):
    """The hooks a program runs in; ``unprepare``/``remove`` only undo these."""

    PREPARE = "prepare"
    CONNECT = "connect"


HookName = Literal["prepare", "connect"]
HOOKS: tuple[HookName, ...] = ("prepare", "connect")


class StepKind(StrEnum):
    """A topology step: an allocation root (a DRA grant) or an operation on earlier steps."""

    ALLOCATION = "Allocation"
    OPERATION = "Operation"


StepKindName = Literal["Allocation", "Operation"]


class Reversibility(StrEnum):
    REVERSIBLE = "Reversible"
    IRREVERSIBLE = "Irreversible"
    REDISCOVER = "Rediscover"


class RecoveryStrategy(StrEnum):
    OBSERVE_AND_RECONCILE = "ObserveAndReconcile"
    RESTORE_BEFORE_IMAGE = "RestoreBeforeImage"
    REDISCOVER = "Rediscover"
    QUARANTINE = "Quarantine"


RecoveryName = Literal["ObserveAndReconcile", "RestoreBeforeImage", "Rediscover", "Quarantine"]


def _same_values(enum: type[StrEnum], literal: object) -> None:
    values = tuple(member.value for member in enum)
    if values != get_args(literal):
        raise ImportError(f"vocabulary: {enum.__name__} and its Literal spelling differ")


for _enum, _literal in (
    (HandleType, HandleTypeName),
    (LinkType, LinkTypeName),
    (Access, AccessName),
    (Ownership, OwnershipName),
    (Hook, HookName),
    (StepKind, StepKindName),
    (RecoveryStrategy, RecoveryName),
):
    _same_values(_enum, _literal)
if tuple(Hook) != HOOKS:
    raise ImportError("vocabulary: Hook and HOOKS differ")
