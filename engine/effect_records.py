"""The journal's effect records as the executors' read-only reference port.

:class:`JournalEffectRecords` implements :class:`~dmn.opcodes.effect_records.EffectRecords`
over any journal that can list its effects of one opcode (:class:`EffectScan`: the agent's
RocksDB store and :class:`~dmn.engine.journal.MemoryJournal`). It must wrap the same journal
instance the runner writes through, so that what an executor reads under the node mutation
lock includes every earlier commit (group-committed, unsynced ones too: a crash that loses one
leaves that effect ``Applying``, which still holds). One instance serves the whole node: its
:meth:`JournalEffectRecords.serialized` locks (one per shared object's name, leaves of the
lock order) are what keep concurrent operations' sections over one object apart.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Protocol

from dmn.engine.journal import EffectRecord
from dmn.opcodes.effect_records import HOLDING_STATES, RecordedEffect
from dmn.opcodes.executor import ExecutorError


class EffectScan(Protocol):
    def effects_of_kind(self, kind: str) -> list[tuple[str, EffectRecord]]:
        """Every recorded effect of opcode ``kind`` as (operation id, record); raises when
        an operation cannot be read (a partial answer would undercount references)."""
        ...


class JournalEffectRecords:
    def __init__(self, journal: EffectScan) -> None:
        self.journal = journal
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}

    @contextmanager
    def serialized(self, name: str) -> Iterator[None]:
        with self._guard:
            lock = self._locks.setdefault(name, threading.Lock())
        with lock:
            yield

    def held(self, kind: str) -> Sequence[RecordedEffect]:
        try:
            found = self.journal.effects_of_kind(kind)
        except Exception as exc:
            code = getattr(exc, "code", "")
            if isinstance(code, str) and code.startswith("E_JOURNAL"):
                raise ExecutorError(code, f"effect records of {kind} unreadable: {exc}") from exc
            raise
        return [
            RecordedEffect(op, rec.id, rec.state.value, rec.before)
            for op, rec in found
            if rec.state.value in HOLDING_STATES
        ]
