"""A read-only view of the journal's effect records, for executors whose state is shared.

Why: some effects are references to one shared kernel object — several attachments hold one
VLAN on a bridge uplink (``bridge/shared-uplink-vlan/v1``). Who still needs it cannot be read
from the kernel (an administrator can change it, and it does not say *who* added a VID): the
journal is the only authority (design §6.7, §8.1). Executors may not import the journal
(the opcode layer sits below the engine), so the node gives them this port through the
executor environment (:attr:`~dmn.opcodes.device_environment.DeviceEnvironment.effect_records`);
the engine implements it over its journal (``dmn.engine.effect_records``).

Contract: :meth:`EffectRecords.held` returns every recorded effect of one opcode whose
before-image is durable and whose undo has not finished — states ``Applying`` (the apply may
have happened), ``Applied``, ``Undoing`` and ``Quarantined`` (its outcome is unprovable: it
stays reserved). ``Planned``/``Captured`` effects changed nothing; ``Undone`` ones are gone. An
``Undoing`` record is being released: it no longer *needs* the shared object, but what its
before-image says (e.g. that this driver created it) is still evidence. A journal that cannot
be read whole raises (``E_JOURNAL_CORRUPT``): a count over part of the journal could remove
what an unreadable record still needs.

Operations of different claims and sandboxes run concurrently (the runner holds the node lock
shared, see ``dmn.engine.mutation_lock``), so an executor makes each read-decide-act section
over one shared object under :meth:`EffectRecords.serialized` of that object's name: a leaf
lock (nothing else is taken inside it) shared by every run on the node. A section started
after another operation's before-image commit sees that record; one started before it
finishes before that operation's own section begins.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

HOLDING_STATES = frozenset({"Applying", "Applied", "Undoing", "Quarantined"})
"""Effect states (the journal's ``EffectState`` values) :meth:`EffectRecords.held` returns."""
RELEASING = "Undoing"
"""The one of them whose record no longer needs what it referenced."""


@dataclass(frozen=True, slots=True)
class RecordedEffect:
    """One journaled effect as an executor may see it: who, in which state, its before-image."""

    operation_id: str
    effect_id: str
    state: str
    before: Any


class EffectRecords(Protocol):
    def held(self, kind: str) -> Sequence[RecordedEffect]:
        """Every effect of opcode ``kind`` in a :data:`HOLDING_STATES` state, in any order."""
        ...

    def serialized(self, name: str) -> AbstractContextManager[None]:
        """Exclusive, node-wide, for one shared object's read-decide-act section."""
        ...
