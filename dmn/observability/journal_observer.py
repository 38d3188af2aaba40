"""Metrics from the journal's commits: the one place every effect's outcome becomes durable.

The journal store calls :meth:`JournalObserver.committed` after each successful commit with
what it wrote. From the operation's state transitions it times each hook program (intent
commit → terminal commit, labelled with the program's hook and plugin; the undo of a
completed operation is timed as ``remove``/``unprepare``), and from each effect record it
counts effects reaching Applied, Undone or Quarantined once per transition. Nothing here
changes what is written; an observer failure is the caller's to ignore.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from dmn.engine.journal import (
    TERMINAL_STATES,
    EffectRecord,
    EffectState,
    OperationRecord,
    OperationState,
)
from dmn.observability.metrics import EFFECTS, HOOK_DURATION, JOURNAL_COMMIT

COUNTED = frozenset({EffectState.APPLIED, EffectState.UNDONE, EffectState.QUARANTINED})
UNDO_HOOK = {"prepare": "unprepare", "connect": "remove"}


class JournalObserver:
    def __init__(self) -> None:
        self._started: dict[str, tuple[float, str]] = {}  # operation -> (start, hook label)
        self._seen: dict[tuple[str, int], EffectState] = {}
        # commits of different operations arrive from several threads at once (the node
        # lock is per claim and sandbox); the tables are shared by all of them
        self._lock = threading.Lock()

    def committed(
        self,
        operation: OperationRecord | None,
        effects: Sequence[EffectRecord],
        seconds: float,
    ) -> None:
        JOURNAL_COMMIT.observe(seconds)
        if operation is None:
            return
        with self._lock:
            self._track(operation, effects)

    def _track(self, operation: OperationRecord, effects: Sequence[EffectRecord]) -> None:
        op_id = operation.operation_id
        now = time.monotonic()
        hook = operation.program.hook
        state = operation.state
        if state is OperationState.RUNNING and op_id not in self._started:
            self._started[op_id] = (now, hook)
        elif state is OperationState.UNDOING:
            undo = UNDO_HOOK.get(hook, f"undo-{hook}")
            if self._started.get(op_id, (0.0, ""))[1] != undo:
                self._started[op_id] = (now, undo)
        for effect in effects:
            key = (op_id, effect.index)
            if effect.state in COUNTED and self._seen.get(key) is not effect.state:
                EFFECTS.labels(opcode=effect.kind, state=effect.state.value).inc()
            self._seen[key] = effect.state
        if state in TERMINAL_STATES:
            started = self._started.pop(op_id, None)
            if started is not None:
                HOOK_DURATION.labels(
                    hook=started[1], plugin=operation.program.plugin, outcome=state.value
                ).observe(now - started[0])
            for key in [k for k in self._seen if k[0] == op_id]:
                del self._seen[key]
