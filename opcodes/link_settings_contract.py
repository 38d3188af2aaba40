"""The contract of an opcode that changes settings of one link in the call's sandbox.

Why shared: ``sysctl/interface``, ``ethtool/features`` and the ``ip/*`` opcodes (and any
later per-interface setting) take the same input — a KernelInterface in the verified
sandbox that the call may ExclusiveConfigure — hand the same handle on, run in ``connect``,
are undone from their before-image and recover by observing, restoring or quarantining;
only their parameters, link types, an optional precondition and the postcondition differ.
Pure: imports no native library (spec modules use it).
"""

from __future__ import annotations

from pydantic import BaseModel

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


def link_settings_spec(
    *,
    name: str,
    summary: str,
    changes: str,
    undo: str,
    parameters: type[BaseModel],
    link_types: frozenset[LinkType],
    postcondition: str,
    precondition: str | None = None,
) -> OpcodeSpec:
    """A Reversible ``connect`` opcode over the ``interface`` port, continued as output."""
    return OpcodeSpec(
        name=name,
        boot_volatile=True,
        summary=summary,
        changes=changes,
        undo=undo,
        parameters=parameters,
        inputs={
            "interface": PortSpec(
                HandleType.KERNEL_INTERFACE,
                link_types,
                ScopeKind.SANDBOX,
                Access.EXCLUSIVE_CONFIGURE,
            )
        },
        outputs={
            "interface": PortSpec(
                HandleType.KERNEL_INTERFACE,
                link_types,
                ScopeKind.SANDBOX,
                grants=frozenset({Access.READ, Access.EXCLUSIVE_CONFIGURE}),
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
        requires=frozenset(
            {"same-sandbox", "owned-link", "exclusive-grant"}
            | ({precondition} if precondition is not None else set())
        ),
        postconditions=frozenset({postcondition}),
    )
