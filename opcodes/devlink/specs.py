"""``devlink/*`` opcodes: eswitch mode management of a physical function.

Why ``prepare``: an eswitch transition is node-level management under a whole-node drain
(DeviceExposurePolicy ``action: ManageEswitch``, design §6.7), never a per-share or
per-sandbox step, so it is illegal in ``connect``. No builtin plugin emits it; the agent's
eswitch manager runs it through the same runner and journal. It is ``Rediscover``: VF and
representor mappings are found again after the transition, and undo restores the recorded mode
under a renewed drain. The seed names it ``linux/eswitch-configure/v1``; the vocabulary of
design §3.6 files it under the devlink family.
"""

from __future__ import annotations

from typing import Literal

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


class EswitchConfigureParameters(ParameterModel):
    """The desired eswitch mode; inline and encapsulation attributes are never changed."""

    mode: Literal["legacy", "switchdev"]


ESWITCH_CONFIGURE = OpcodeSpec(
    name="devlink/eswitch-configure/v1",
    summary="Set a drained PF's devlink eswitch mode, recording the original for restoration.",
    changes=(
        "Switches a drained physical function's eswitch between legacy and switchdev; VFs "
        "and representors are recreated by the driver."
    ),
    undo=(
        "Restores the recorded eswitch mode under a renewed drain and rediscovers VFs and "
        "representors."
    ),
    parameters=EswitchConfigureParameters,
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
        )
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
    requires=frozenset({"drained-scope", "exclusive-grant", "protected-scope-clear"}),
    postconditions=frozenset({"eswitch-mode-match", "function-rediscovered"}),
)

SPECS: tuple[OpcodeSpec, ...] = (ESWITCH_CONFIGURE,)
