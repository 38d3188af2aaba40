"""The journal contract the runner writes through, and the records it writes (design §3.5, §5).

The interpreter never imports a database: the node agent's RocksDB store
(``dmn.agent.journal.store.JournalStore``) implements :class:`Journal`, and tests may use
:class:`MemoryJournal`. Every call to :meth:`Journal.commit` is one durable, atomic commit
(for the RocksDB store: one ``WriteBatch`` written with ``sync=True``); the runner groups its
writes so that one effect costs at most two commits and one operation at most two more.

Records are plain mutable dataclasses that serialise to JSON. An operation is stored as a
header (:class:`OperationRecord` without its effects) plus one record per effect, so a
commit writes only what changed.

Effect progress (design §3.8)::

    Planned -> Captured -> Applying -> Applied
                              |          |
                              +-> Undoing <-+
                                    |
                                  Undone            (Quarantined: ownership unprovable,
                                                      outcome uncertain, or undo failed)

The runner commits the before-image together with ``Applying`` (``Captured`` is the state of
an effect whose before-image was taken but whose apply was never started, e.g. a recheck
refused it).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from dmn.engine.bound import BoundProgram
from dmn.interpreter.canonical_json import JSONValue, sha256_digest
from dmn.vocabulary.handles import Handle


class EffectState(StrEnum):
    PLANNED = "Planned"
    CAPTURED = "Captured"
    APPLYING = "Applying"
    APPLIED = "Applied"
    UNDOING = "Undoing"
    UNDONE = "Undone"
    QUARANTINED = "Quarantined"


class OperationState(StrEnum):
    """``Running`` and the two undo states are unfinished; recovery reconciles them."""

    RUNNING = "Running"  # intent committed, effects being applied
    COMPLETED = "Completed"  # every effect applied, exports verified, result saved
    COMPENSATING = "Compensating"  # a failure is being compensated in reverse
    UNDOING = "Undoing"  # cleanup (undo: connect|prepare) of a completed operation
    UNDONE = "Undone"  # every attempted effect undone or proven not applied
    QUARANTINED = "Quarantined"  # finished, but at least one effect is Quarantined


UNFINISHED_STATES = frozenset(
    {OperationState.RUNNING, OperationState.COMPENSATING, OperationState.UNDOING}
)
TERMINAL_STATES = frozenset(
    {OperationState.COMPLETED, OperationState.UNDONE, OperationState.QUARANTINED}
)


class RecoveryPolicy(StrEnum):
    """What recovery does with a ``Running`` operation whose effects are not all applied.

    ``RollBack`` (the default) compensates in reverse: the caller never got an answer and
    will retry the same operation id. ``RollForward`` finishes the remaining effects.
    Either way an operation whose effects are all applied is rolled forward to Completed.
    """

    ROLL_BACK = "RollBack"
    ROLL_FORWARD = "RollForward"


class RunCode(StrEnum):
    """Stable reason codes of runner refusals and failures."""

    E_OPERATION_CONFLICT = "E_OPERATION_CONFLICT"  # same operation id, different digest
    E_FENCED = "E_FENCED"  # the scope has a terminal fence (removal happened)
    E_QUARANTINED = "E_QUARANTINED"  # the operation holds quarantined effects
    E_NO_EXECUTOR = "E_NO_EXECUTOR"
    E_RECHECK = "E_RECHECK"  # identity/ownership/access recheck refused the effect
    E_APPLY = "E_APPLY"
    E_OBSERVE = "E_OBSERVE"
    E_POSTCONDITION = "E_POSTCONDITION"
    E_EXPORT_MISSING = "E_EXPORT_MISSING"
    E_UNDO = "E_UNDO"
    E_NOT_FOUND = "E_NOT_FOUND"
    E_OUTPUT_MISSING = "E_OUTPUT_MISSING"  # an input refers to an output that was not produced
    E_CAPTURE = "E_CAPTURE"
    E_RECOVERED = "E_RECOVERED"  # rolled back by recovery after a restart


def handles_to_json(ports: Mapping[str, Sequence[Handle]]) -> dict[str, list[dict[str, Any]]]:
    return {port: [h.to_json() for h in hs] for port, hs in sorted(ports.items())}


def handles_from_json(data: Mapping[str, Any]) -> dict[str, tuple[Handle, ...]]:
    return {port: tuple(Handle.from_json(h) for h in hs) for port, hs in data.items()}


@dataclass(slots=True)
class Failure:
    """Why an operation or effect failed: a stable code, the effect, a message."""

    code: str
    message: str
    effect: str = ""

    def to_json(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message, "effect": self.effect}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Failure:
        return cls(str(data["code"]), str(data["message"]), str(data.get("effect", "")))


@dataclass(slots=True)
class EffectRecord:
    """Progress of one bound effect. ``inputs`` are the handles it was applied with."""

    index: int
    id: str
    kind: str
    state: EffectState = EffectState.PLANNED
    before: JSONValue = None
    inputs: dict[str, tuple[Handle, ...]] = field(default_factory=dict)
    outputs: dict[str, tuple[Handle, ...]] = field(default_factory=dict)
    failure: Failure | None = None
    note: str = ""  # recovery/quarantine explanation, shown by `dmn journal show`

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "index": self.index,
            "id": self.id,
            "kind": self.kind,
            "state": self.state.value,
            "before": self.before,
            "inputs": handles_to_json(self.inputs),
            "outputs": handles_to_json(self.outputs),
        }
        if self.failure is not None:
            out["failure"] = self.failure.to_json()
        if self.note:
            out["note"] = self.note
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EffectRecord:
        failure = data.get("failure")
        return cls(
            index=int(data["index"]),
            id=str(data["id"]),
            kind=str(data["kind"]),
            state=EffectState(data["state"]),
            before=data.get("before"),
            inputs=handles_from_json(data.get("inputs", {})),
            outputs=handles_from_json(data.get("outputs", {})),
            failure=Failure.from_json(failure) if failure is not None else None,
            note=str(data.get("note", "")),
        )


@dataclass(slots=True)
class OperationRecord:
    """One run of one bound program, identified by ``operation_id`` within ``scope``.

    ``scope`` names what the operation belongs to (a preparation or an attachment; the
    coordinator chooses, e.g. ``prep/<claimUID>/<fingerprint>``); terminal fences are
    per scope. ``digest`` is the semantic digest replays are compared against; the
    program's own contract digest and canonical digest are stored with it, and
    ``digests`` holds any further pinned digests the caller authorised against (plugin
    artifact, topology revision, descriptor contract).
    """

    operation_id: str
    scope: str
    program: BoundProgram
    digest: str
    state: OperationState = OperationState.RUNNING
    authorisations: tuple[JSONValue, ...] = ()
    digests: dict[str, str] = field(default_factory=dict)  # artifact, revision, descriptor…
    policy: RecoveryPolicy = RecoveryPolicy.ROLL_BACK
    attempt: int = 1
    result: dict[str, tuple[Handle, ...]] = field(default_factory=dict)
    failure: Failure | None = None
    effects: list[EffectRecord] = field(default_factory=list)
    _program_cache: tuple[dict[str, Any], str] | None = field(
        default=None, repr=False, compare=False
    )

    def _program_json(self) -> tuple[dict[str, Any], str]:
        """The program's JSON and digest, computed once (the program is immutable)."""
        if self._program_cache is None:
            data = self.program.to_json()
            self._program_cache = (data, sha256_digest(data))
        return self._program_cache

    @property
    def contract_digest(self) -> str:
        return self.program.contract_digest

    @property
    def quarantined(self) -> list[EffectRecord]:
        return [e for e in self.effects if e.state is EffectState.QUARANTINED]

    def header_json(self) -> dict[str, Any]:
        """Everything but the effect records (those are stored under their own keys)."""
        program, program_digest = self._program_json()
        out: dict[str, Any] = {
            "operationID": self.operation_id,
            "scope": self.scope,
            "program": program,
            "programDigest": program_digest,
            "contractDigest": self.program.contract_digest,
            "digest": self.digest,
            "state": self.state.value,
            "authorisations": list(self.authorisations),
            "digests": dict(sorted(self.digests.items())),
            "policy": self.policy.value,
            "attempt": self.attempt,
            "result": handles_to_json(self.result),
            "effectCount": len(self.effects),
        }
        if self.failure is not None:
            out["failure"] = self.failure.to_json()
        return out

    def to_json(self) -> dict[str, Any]:
        out = self.header_json()
        out["effects"] = [e.to_json() for e in self.effects]
        return out

    @classmethod
    def from_json(
        cls, header: Mapping[str, Any], effects: Iterable[Mapping[str, Any]] | None = None
    ) -> OperationRecord:
        failure = header.get("failure")
        effect_data = effects if effects is not None else header.get("effects", ())
        return cls(
            operation_id=str(header["operationID"]),
            scope=str(header["scope"]),
            program=BoundProgram.from_json(header["program"]),
            digest=str(header["digest"]),
            state=OperationState(header["state"]),
            authorisations=tuple(header.get("authorisations", ())),
            digests={str(k): str(v) for k, v in header.get("digests", {}).items()},
            policy=RecoveryPolicy(header.get("policy", RecoveryPolicy.ROLL_BACK.value)),
            attempt=int(header.get("attempt", 1)),
            result=handles_from_json(header.get("result", {})),
            failure=Failure.from_json(failure) if failure is not None else None,
            effects=sorted((EffectRecord.from_json(e) for e in effect_data), key=lambda e: e.index),
        )


@dataclass(frozen=True, slots=True)
class Fence:
    """A terminal fence on a scope: removal happened; no older work may resurrect it."""

    scope: str
    reason: str
    operation_id: str = ""

    def to_json(self) -> dict[str, str]:
        return {"scope": self.scope, "reason": self.reason, "operationID": self.operation_id}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Fence:
        return cls(str(data["scope"]), str(data["reason"]), str(data.get("operationID", "")))


class Journal(Protocol):
    """What the runner needs from durable storage. Every ``commit`` is one synced commit."""

    def load_operation(self, operation_id: str) -> OperationRecord | None: ...

    def commit(
        self,
        operation: OperationRecord | None,
        effects: Sequence[EffectRecord] = (),
        fences: Sequence[Fence] = (),
        *,
        header: bool = True,
        sync: bool = True,
    ) -> None:
        """Atomically and durably write the given effect records of ``operation``, its
        header too when ``header`` is true, and ``fences`` (all of them or none).

        ``sync=False`` (group commit): written atomically, in order after every earlier
        commit, but durable only with the next synced commit (which makes every earlier
        write durable too); a crash may lose it, never a later synced commit without it."""
        ...

    def fence(self, scope: str) -> Fence | None: ...

    def unfinished_operations(self) -> list[OperationRecord]:
        """Operations whose state is in :data:`UNFINISHED_STATES`, in commit order."""
        ...


class MemoryJournal:
    """An in-process :class:`Journal` for tests of the runner contract (not durable).

    It stores JSON, not objects, so a test sees exactly what a durable store would return.
    """

    def __init__(self) -> None:
        self.headers: dict[str, dict[str, Any]] = {}
        self.effects: dict[str, dict[int, dict[str, Any]]] = {}
        self.fences: dict[str, dict[str, str]] = {}
        self.order: list[str] = []
        self.commits = 0
        self._lock = threading.Lock()  # commits may come from several threads at once

    def load_operation(self, operation_id: str) -> OperationRecord | None:
        header = self.headers.get(operation_id)
        if header is None:
            return None
        effects = self.effects.get(operation_id, {})
        return OperationRecord.from_json(header, [effects[i] for i in sorted(effects)])

    def commit(
        self,
        operation: OperationRecord | None,
        effects: Sequence[EffectRecord] = (),
        fences: Sequence[Fence] = (),
        *,
        header: bool = True,
        sync: bool = True,
    ) -> None:
        with self._lock:
            if sync:
                self.commits += 1
            if operation is not None:
                op_id = operation.operation_id
                if header or op_id not in self.headers:
                    if op_id not in self.headers:
                        self.order.append(op_id)
                    self.headers[op_id] = operation.header_json()
                stored = self.effects.setdefault(op_id, {})
                for e in effects:
                    stored[e.index] = e.to_json()
            for f in fences:
                self.fences[f.scope] = f.to_json()

    def fence(self, scope: str) -> Fence | None:
        data = self.fences.get(scope)
        return Fence.from_json(data) if data is not None else None

    def effects_of_kind(self, kind: str) -> list[tuple[str, EffectRecord]]:
        out = []
        for op_id in self.order:
            for data in self.effects.get(op_id, {}).values():
                if data["kind"] == kind:
                    out.append((op_id, EffectRecord.from_json(data)))
        return out

    def unfinished_operations(self) -> list[OperationRecord]:
        out = []
        for op_id in self.order:
            if OperationState(self.headers[op_id]["state"]) in UNFINISHED_STATES:
                record = self.load_operation(op_id)
                assert record is not None
                out.append(record)
        return out
