"""Recovery decisions: what to do with an effect whose outcome the journal does not know.

After a crash (or when ``apply``/``observe`` raised) an effect can be left ``Applying``: the
native action may or may not have happened. The runner never guesses. It asks the
executor's ``recover`` (which proves ownership by identity, e.g. the ``dmn:<op>:<effect>``
alias, never by name alone) and then decides with :func:`decide_compensation`:

=================  ==============  ============================================
effect state       observation     action
=================  ==============  ============================================
Captured           —               mark Undone (apply never started)
Applying           NotApplied      mark Undone (nothing to undo)
Applying           Applied         undo
Applying           Uncertain       undo if the opcode is Reversible and the effect's
                                   recovery strategy is not Quarantine; else Quarantine
Applied            —               undo
Undoing            —               undo again (undo is idempotent by contract)
=================  ==============  ============================================

An undo that raises leaves the effect Quarantined — except ``UndoDeferred`` (a peer such as
the API server did not answer): the effect stays Undoing, the operation unfinished, and the
next cleanup or recovery undoes it again. Quarantined effects are never applied or
undone again automatically; they stay visible (``dmn journal show``) and keep their
resources reserved until an operator resolves them.

Operation level (:meth:`dmn.engine.runner.Runner.recover`): a ``Running`` operation
whose effects all prove Applied is rolled forward to Completed; otherwise it is rolled back
(``RollBack`` policy, the default) or finished (``RollForward``, only when nothing is
uncertain). ``Compensating`` and ``Undoing`` operations continue their reverse pass. Every
decision is committed, so running recovery a second time finds nothing unfinished.
"""

from __future__ import annotations

from enum import StrEnum

from dmn.engine.journal import EffectState
from dmn.interpreter.canonical_json import JSONValue
from dmn.opcodes.executor import EffectContext, Executor, RecoveryObservation
from dmn.vocabulary.terms import RecoveryStrategy, Reversibility


class UndoAction(StrEnum):
    UNDO = "Undo"
    MARK_UNDONE = "MarkUndone"
    QUARANTINE = "Quarantine"


def observation_of(
    executor: Executor, ctx: EffectContext, before: JSONValue, strategy: str
) -> RecoveryObservation:
    """Ask the executor what happened; an exception or a Quarantine strategy is Uncertain."""
    if strategy == RecoveryStrategy.QUARANTINE.value:
        return RecoveryObservation.UNCERTAIN
    try:
        return RecoveryObservation(executor.recover(ctx, before))
    except Exception:
        return RecoveryObservation.UNCERTAIN


def decide_compensation(
    state: EffectState,
    observation: RecoveryObservation | None,
    reversibility: Reversibility | None,
    strategy: str = RecoveryStrategy.OBSERVE_AND_RECONCILE.value,
) -> tuple[UndoAction, str]:
    """The table in the module docstring; returns the action and a note for the record."""
    if state is EffectState.CAPTURED:
        return UndoAction.MARK_UNDONE, "never applied"
    if state is EffectState.APPLYING:
        if observation is RecoveryObservation.NOT_APPLIED:
            return UndoAction.MARK_UNDONE, "observed not applied"
        if observation is RecoveryObservation.APPLIED:
            return UndoAction.UNDO, "observed applied; undone"
        if (
            reversibility is Reversibility.REVERSIBLE
            and strategy != RecoveryStrategy.QUARANTINE.value
        ):
            return UndoAction.UNDO, "outcome uncertain; reversible, undone"
        return UndoAction.QUARANTINE, (
            f"outcome uncertain and opcode is {reversibility.value if reversibility else 'unknown'}"
            "; not retried, left for inspection"
        )
    if state in (EffectState.APPLIED, EffectState.UNDOING):
        return UndoAction.UNDO, ""
    return UndoAction.MARK_UNDONE, ""
