"""The journaled runner: executes bound programs so that a crash anywhere is recoverable.

Protocol per operation (design §3.5, §8.3)::

    commit intent (bound program, digests, authorisations, every effect Planned)
    for each effect, in order:
        capture before-image        -> commit before-image + Applying             1 commit
                                       (the first one together with the intent; later
                                       ones with the previous effect's outcome: group commit)
        recheck scope fence, input accesses, caller's identity/ownership recheck
        apply (native)
        observe + postconditions    -> Applied + typed outputs, pending (in memory)
    resolve and verify exports      -> commit Completed + result + last outcome   1 commit

Group commit (issue 15): an effect's outcome is not synced on its own; it rides in the next
synced batch — the next effect's before-image, the completion record, or the first
compensation commit. The intent, too, rides in the first effect's before-image batch
(capture only reads, so nothing has changed before that batch is durable). An N-effect
operation of reversible effects therefore costs N + 1 synced commits (budget N + 2); the
outcome of an Irreversible or Rediscover effect, which recovery may not be able to observe
again, is still synced on its own (one more commit each).

Boot-volatile effects (``OpcodeSpec.boot_volatile``: links, their addresses and namespace —
state only the running kernel holds) go further: the batch written before such an effect
mutates anything (intent, before-image, Undoing) is written to the WAL without its own
fdatasync. A SIGKILL loses no written record (the WAL is in the page cache; the crash matrix
kills at every boundary), and the only crash that can lose it, the machine's, also resets
every link it describes (recovery knows records of an earlier boot by their boot id).
An operation of N such effects costs one synced commit, its end record (or the caller's);
its removal costs none: the Undone end record of an operation whose every effect is
boot-volatile says only that links are gone, which a machine crash makes true by itself
(:attr:`RunResult.boot_volatile` tells the caller so, for its own removal record).

With ``sync_end=False`` (:meth:`Runner.run`, :meth:`Runner.cleanup`) the operation's end
record (Completed with the last outcome, or the final Undone) is written unsynced too and
becomes durable with the *caller's* next synced commit (the coordinator's Ready or Removed
record), which the caller makes before it acts on the result: a RunPodSandbox then costs
N + 2 synced commits in all (the attachment's intent, N effects, Ready), a StopPodSandbox
two. What group commit gives up is only knowledge, never safety: an effect's outcome is
durable before the next effect mutates anything (its before-image is in the same batch), and
a crash that loses an outcome leaves that effect Applying in the journal, which recovery
treats as Uncertain and *observes* (``recover``) — an outcome is never assumed.

A failure compensates the attempted effects in reverse, the failed one included. Each undo
costs one commit (the ``Undone`` of one effect is written together with the ``Undoing`` of
the next) plus one final commit. An effect whose outcome is unknown (apply or observe raised,
or a crash left it Applying) is first asked ``recover``: NotApplied needs no undo; Applied is
undone; Uncertain is undone only when the opcode is Reversible, otherwise it is Quarantined
and never applied or undone blindly again.

Cleanup (``undo: connect|prepare``) is :meth:`Runner.cleanup`: it replays the *recorded*
effects of the original operation in reverse from the journal alone (program, before-images,
inputs, outputs), needing no API object, and can record a terminal fence on the scope in the
same commit so that an older run for that scope can never resurrect it.

Concurrency: operations with different ids may run at once in different threads (the node
services serialise what must be, see :mod:`dmn.engine.mutation_lock`); two calls for one
operation id serialise on its key, and :meth:`Runner.recover` excludes every other call.
A group-commit batch only ever holds records of its own operation: the pending outcome lives
in the call's own frame, never on the runner, and what one public call keeps (its sync mode,
its environments) is per thread. Another thread's synced commit may make an unsynced record
of this operation durable earlier than its own next commit would — durable earlier is never
less safe. The journal must accept commits from several threads (the RocksDB store does: a
``WriteBatch`` is atomic and RocksDB orders concurrent writers).

Crash boundaries: the runner calls ``boundary(name)`` at every journal boundary so that tests
can kill the process exactly there. Names: ``before-intent``, ``after-intent``,
``after-before-image:<effect>`` (this effect's before-image and the previous effect's outcome
are durable), ``after-apply:<effect>``, ``after-outcome:<effect>`` (outcome observed, not yet
durable: it is written with the next batch), ``before-completed``, ``after-completed`` (the
end record written; unsynced with ``sync_end=False``), and on the undo path
``after-undoing:<effect>``, ``after-undo:<effect>``, ``after-compensated`` (the final
Undone/Quarantined record written), and ``after-undo-deferred:<effect>`` when an undo could
not reach what it changes (:class:`~dmn.opcodes.executor.UndoDeferred`): the effect stays
Undoing, the operation unfinished, and the next cleanup or recovery continues from it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from dmn.engine.bound import BoundEffect, BoundInput, BoundProgram, EffectOutputRef
from dmn.engine.journal import (
    UNFINISHED_STATES,
    EffectRecord,
    EffectState,
    Failure,
    Fence,
    Journal,
    OperationRecord,
    OperationState,
    RecoveryPolicy,
    RunCode,
)
from dmn.engine.mutation_lock import NodeMutationLock, operation_key
from dmn.engine.recovery import UndoAction, decide_compensation, observation_of
from dmn.interpreter.canonical_json import JSONValue
from dmn.opcodes.executor import (
    EffectContext,
    Executor,
    ExecutorError,
    RecoveryObservation,
    UndoDeferred,
)
from dmn.vocabulary.handles import Handle
from dmn.vocabulary.terms import Reversibility

_log = logging.getLogger(__name__)

BoundaryHook = Callable[[str], None]
Recheck = Callable[[EffectContext, BoundEffect], None]
"""Caller-supplied identity/ownership/protected-scope recheck; raises ExecutorError to refuse."""
EnvFactory = Callable[[OperationRecord], Any]
"""Builds the executor environment of a recorded operation (recovery, cleanup without env)."""


class RunRefused(Exception):
    """The runner refused to start (or replay) an operation; nothing was changed."""

    def __init__(self, code: RunCode, message: str, operation_id: str = "") -> None:
        self.code = code
        self.operation_id = operation_id
        super().__init__(f"{code.value}: {message}")


@dataclass(frozen=True, slots=True)
class RunResult:
    """Outcome of run/cleanup/recovery of one operation.

    ``state`` is Completed (``exports`` hold the verified outputs), Undone (``failure`` says
    why when it was a failed run) or Quarantined (``quarantined`` lists the effect ids).
    ``replayed`` is true when a completed operation's saved result was returned.
    ``boot_volatile`` is true when every effect of the operation is of a boot-volatile opcode:
    what it changed is state only the running kernel holds, so its Undone end record was
    written without a sync of its own and a caller's record that only says "undone" need not
    be synced either (a machine crash, the only thing that can lose such a record, makes it
    true by itself).
    """

    operation_id: str
    state: OperationState
    exports: Mapping[str, tuple[Handle, ...]] = field(default_factory=dict)
    failure: Failure | None = None
    replayed: bool = False
    quarantined: tuple[str, ...] = ()
    boot_volatile: bool = False
    #: the operation's effect records as the journal holds them (their recorded outcomes:
    #: what a caller reports from, without reading the journal again)
    effects: tuple[EffectRecord, ...] = ()

    @property
    def ok(self) -> bool:
        return self.state is OperationState.COMPLETED

    @classmethod
    def of(
        cls, op: OperationRecord, replayed: bool = False, *, boot_volatile: bool = False
    ) -> RunResult:
        return cls(
            operation_id=op.operation_id,
            state=op.state,
            exports=dict(op.result),
            failure=op.failure,
            replayed=replayed,
            quarantined=tuple(e.id for e in op.quarantined),
            boot_volatile=boot_volatile,
            effects=tuple(op.effects),
        )


class _CallState(threading.local):
    """What one public call of a thread keeps: whether its end record is synced, the
    caller's env per operation and the envs the factory built for it (closed at its end)."""

    def __init__(self) -> None:
        self.sync_end = True
        self.envs: dict[str, Any] = {}
        self.built: list[str] = []


class _EffectFailed(Exception):
    def __init__(self, failure: Failure) -> None:
        self.failure = failure
        super().__init__(failure.message)


def _describe(exc: BaseException) -> tuple[str, str]:
    if isinstance(exc, ExecutorError):
        return exc.code, str(exc)
    return "", f"{type(exc).__name__}: {exc}"


class Runner:
    """Runs, cleans up and recovers operations against one journal and executor registry.

    ``executors`` maps opcode names (``linux/create-vlan/v1``) to executors. The executor
    environment (:attr:`EffectContext.env`) of an operation is, in order: the ``env`` given
    to :meth:`run`/:meth:`cleanup` for that call, else ``env_factory(operation_record)``
    (how recovery rebuilds it from the journal, e.g. from a pinned namespace), else the
    constructor's ``env``. :meth:`run`, :meth:`cleanup` and :meth:`recover_operation` hold
    the node mutation ``lock`` shared with the operation's own key, so operations with
    different ids run concurrently; :meth:`recover` holds it exclusively (see the module doc).
    """

    def __init__(
        self,
        journal: Journal,
        executors: Mapping[str, Executor],
        *,
        env: Any = None,
        lock: NodeMutationLock | None = None,
        recheck: Recheck | None = None,
        boundary: BoundaryHook | None = None,
        env_factory: EnvFactory | None = None,
    ) -> None:
        self.journal = journal
        self.executors = executors
        self.env = env
        self.env_factory = env_factory
        # per public call, so per thread: operations of different threads run at once
        self._call = _CallState()
        self.lock = lock if lock is not None else NodeMutationLock()
        self._recheck_hook = recheck
        self._boundary_hook = boundary

    @property
    def _sync_end(self) -> bool:
        return self._call.sync_end

    @property
    def _call_envs(self) -> dict[str, Any]:
        return self._call.envs

    @property
    def _built_envs(self) -> list[str]:
        return self._call.built

    # ------------------------------------------------------------------ public API

    def run(
        self,
        operation_id: str,
        scope: str,
        program: BoundProgram,
        *,
        digest: str | None = None,
        authorisations: Sequence[JSONValue] = (),
        digests: Mapping[str, str] | None = None,
        policy: RecoveryPolicy = RecoveryPolicy.ROLL_BACK,
        env: Any = None,
        sync_end: bool = True,
    ) -> RunResult:
        """Run ``program`` as operation ``operation_id`` of ``scope``.

        ``digest`` is the semantic digest (default: the bound program's digest);
        ``authorisations`` and ``digests`` (artifact, revision, …) are journaled with the
        intent as the record of what was authorised. A
        completed operation with the same digest returns its saved result; a different
        digest under the same id raises :class:`RunRefused` (E_OPERATION_CONFLICT); a
        fenced scope raises E_FENCED; an operation holding quarantined effects raises
        E_QUARANTINED. An operation left unfinished by a crash is recovered first.

        ``sync_end=False``: the end record is not synced on its own; the caller's next synced
        commit, made before it acts on the result, makes it durable (a crash that loses it
        leaves the last effect Applying, which recovery observes, never assumes).
        """
        semantic = digest if digest is not None else program.digest
        with (
            self.lock.hold(f"run {operation_id}", [operation_key(operation_id)]),
            self._with_env(operation_id, env),
            self._end_sync(sync_end),
        ):
            attempt = 1
            existing = self.journal.load_operation(operation_id)
            if existing is not None:
                if existing.digest != semantic:
                    raise RunRefused(
                        RunCode.E_OPERATION_CONFLICT,
                        f"operation {operation_id} was recorded with digest {existing.digest}, "
                        f"not {semantic}",
                        operation_id,
                    )
                if existing.scope != scope:
                    raise RunRefused(
                        RunCode.E_OPERATION_CONFLICT,
                        f"operation {operation_id} belongs to scope {existing.scope}, not {scope}",
                        operation_id,
                    )
                self._refuse_if_fenced(existing.scope, operation_id)
                if existing.state in UNFINISHED_STATES:
                    self._recover(existing)
                if existing.state is OperationState.COMPLETED:
                    _log.info("operation=%s event=replay", operation_id)
                    return RunResult.of(existing, replayed=True)
                if existing.state is OperationState.QUARANTINED:
                    raise RunRefused(
                        RunCode.E_QUARANTINED,
                        f"operation {operation_id} has quarantined effects "
                        f"{[e.id for e in existing.quarantined]}; inspect before retrying",
                        operation_id,
                    )
                attempt = existing.attempt + 1  # Undone: a fresh attempt
            self._refuse_if_fenced(scope, operation_id)
            missing = sorted({e.kind for e in program.effects if e.kind not in self.executors})
            if missing:
                raise RunRefused(
                    RunCode.E_NO_EXECUTOR, f"no executor for {', '.join(missing)}", operation_id
                )
            op = OperationRecord(
                operation_id=operation_id,
                scope=scope,
                program=program,
                digest=semantic,
                authorisations=tuple(authorisations),
                digests=dict(digests or {}),
                policy=policy,
                attempt=attempt,
                effects=[EffectRecord(i, e.id, e.kind) for i, e in enumerate(program.effects)],
            )
            # the intent is committed together with the first effect's before-image
            # (capture only reads); see _apply_one
            self._forward(op, 0, intent=True)
            return RunResult.of(op)

    def cleanup(
        self,
        operation_id: str,
        *,
        fence_scope: str | None = None,
        reason: str = "removed",
        env: Any = None,
        sync_end: bool = True,
    ) -> RunResult:
        """Undo a recorded operation in reverse from the journal alone.

        With ``fence_scope`` a terminal fence is committed first (in the same commit as the
        Undoing state), so no older run for that scope can start or replay afterwards. An
        operation that was never recorded changed nothing (the intent is always committed
        before the first effect): the result is Undone. ``sync_end`` as for :meth:`run`:
        the final Undone record rides with the caller's next synced commit.
        """
        with (
            self.lock.hold(f"cleanup {operation_id}", [operation_key(operation_id)]),
            self._with_env(operation_id, env),
            self._end_sync(sync_end),
        ):
            fences = [Fence(fence_scope, reason, operation_id)] if fence_scope else []
            op = self.journal.load_operation(operation_id)
            if op is None:
                if fences:
                    self.journal.commit(None, fences=fences)
                return RunResult(operation_id, OperationState.UNDONE, boot_volatile=True)
            if op.state in UNFINISHED_STATES:
                self._recover(op)
            if op.state is OperationState.COMPLETED:
                op.state = OperationState.UNDOING
                self._compensate(op, None, fences=fences)
            elif fences:
                self.journal.commit(None, fences=fences)
            return RunResult.of(op, boot_volatile=self._boot_volatile(op))

    def fence(self, scope: str, reason: str, operation_id: str = "") -> None:
        """Record a terminal fence on ``scope`` without undoing anything (one commit).

        Deliberately does not wait for the node mutation lock: removal fences first, then
        waits for work in flight. A run of that scope in progress sees the fence at its next
        effect's recheck and compensates instead of finishing (design §3.9).
        """
        self.journal.commit(None, fences=[Fence(scope, reason, operation_id)])

    def recover(self) -> list[RunResult]:
        """Reconcile every unfinished operation (start-up). Running it twice changes nothing."""
        with self.lock.exclusive("recover"), self._with_env("", None):
            results = []
            for op in self.journal.unfinished_operations():
                self._recover(op)
                results.append(RunResult.of(op))
            return results

    def recover_operation(self, operation_id: str) -> RunResult | None:
        with (
            self.lock.hold(f"recover {operation_id}", [operation_key(operation_id)]),
            self._with_env(operation_id, None),
        ):
            op = self.journal.load_operation(operation_id)
            if op is None:
                return None
            if op.state in UNFINISHED_STATES:
                self._recover(op)
            return RunResult.of(op)

    # ------------------------------------------------------------------ forward path

    def _commit_intent(self, op: OperationRecord, *, first: EffectRecord | None = None) -> None:
        """The intent: header and every effect record (``first`` already Applying with its
        before-image when the batch carries it) in one commit, synced unless ``first`` is a
        boot-volatile effect (:meth:`_synced_before`)."""
        self._boundary("before-intent")
        self.journal.commit(op, op.effects, sync=first is None or self._synced_before(first.kind))
        self._boundary("after-intent")
        _log.info(
            "operation=%s scope=%s event=intent effects=%d attempt=%d first_before_image=%s",
            op.operation_id,
            op.scope,
            len(op.effects),
            op.attempt,
            first is not None,
        )

    def _synced_before(self, kind: str) -> bool:
        """Is the record written before an effect of ``kind`` mutates anything synced on its
        own? Not for a boot-volatile opcode (``OpcodeSpec.boot_volatile``): it rides with the
        operation's next synced commit (the next non-volatile effect's, the end record or the
        caller's), since a killed process loses no written record and a machine crash resets
        what the record describes. Unknown kinds are synced."""
        executor = self.executors.get(kind)
        return executor is None or not executor.spec.boot_volatile

    def _boot_volatile(self, op: OperationRecord) -> bool:
        """Is every effect of ``op`` of a boot-volatile opcode (:meth:`_synced_before`)? Then
        everything it changed is state a machine crash resets, and an Undone end record of it
        is not synced on its own (:meth:`_compensate`)."""
        return all(not self._synced_before(rec.kind) for rec in op.effects)

    def _forward(self, op: OperationRecord, start: int, *, intent: bool = False) -> None:
        """Apply effects ``start..`` then Complete; compensate on the first failure.

        ``intent``: the operation's intent is not committed yet; it goes into the first
        effect's before-image batch (or is committed alone when there is no effect or the
        first capture fails)."""
        program = op.program
        pending: list[EffectRecord] = []  # an outcome waiting for the next synced batch
        if intent and not program.effects:
            self._commit_intent(op)
        for index in range(start, len(program.effects)):
            bound, rec = program.effects[index], op.effects[index]
            try:
                self._apply_one(op, bound, rec, pending, intent=intent and index == start)
            except _EffectFailed as failed:
                _log.warning(
                    "operation=%s effect=%s event=failed code=%s message=%s",
                    op.operation_id,
                    rec.id,
                    failed.failure.code,
                    failed.failure.message,
                )
                # an outcome still pending is written by the first compensation commit
                # (every effect compensation touches is written whole)
                self._compensate(op, failed.failure, carry=pending)
                return
        self._complete(op, pending)

    def _apply_one(
        self,
        op: OperationRecord,
        bound: BoundEffect,
        rec: EffectRecord,
        pending: list[EffectRecord],
        *,
        intent: bool = False,
    ) -> None:
        """Run one effect. ``pending`` holds the previous effect's outcome, committed here
        with this effect's before-image; on return it holds this effect's outcome. With
        ``intent`` the operation's intent rides in the same batch as the before-image."""
        executor = self.executors[bound.kind]
        inputs = self._resolve_inputs(op, bound.inputs, rec.id)
        ctx = EffectContext(op.operation_id, rec.id, inputs, bound.parameters, self._env(op))
        try:
            before = executor.capture(ctx)
        except Exception as exc:
            code, msg = _describe(exc)
            rec.failure = Failure(code or RunCode.E_CAPTURE.value, msg, rec.id)
            if intent:
                self._commit_intent(op)  # the refused attempt is recorded, then compensated
            raise _EffectFailed(rec.failure) from exc
        rec.before = before
        rec.inputs = dict(inputs)
        rec.state = EffectState.APPLYING
        if intent:
            self._commit_intent(op, first=rec)
        else:
            self.journal.commit(
                op, [*pending, rec], header=False, sync=self._synced_before(bound.kind)
            )
        pending.clear()
        self._boundary(f"after-before-image:{rec.id}")
        try:
            self._recheck(op, bound, executor, ctx)
        except Exception as exc:
            code, msg = _describe(exc)
            rec.state = EffectState.CAPTURED  # never applied; compensation records Undone
            rec.failure = Failure(code or RunCode.E_RECHECK.value, msg, rec.id)
            raise _EffectFailed(rec.failure) from exc
        try:
            executor.apply(ctx, before)
        except Exception as exc:
            code, msg = _describe(exc)
            rec.failure = Failure(code or RunCode.E_APPLY.value, msg, rec.id)
            raise _EffectFailed(rec.failure) from exc  # stays Applying: outcome unknown
        self._boundary(f"after-apply:{rec.id}")
        try:
            observed = executor.observe(ctx, before)
        except Exception as exc:
            code, msg = _describe(exc)
            rec.failure = Failure(code or RunCode.E_OBSERVE.value, msg, rec.id)
            raise _EffectFailed(rec.failure) from exc
        if not observed.postconditions_ok:
            rec.state = EffectState.APPLIED  # in memory only: compensation undoes it
            rec.outputs = dict(observed.outputs)
            rec.failure = Failure(
                RunCode.E_POSTCONDITION.value,
                observed.detail or f"postconditions of {rec.id} do not hold",
                rec.id,
            )
            raise _EffectFailed(rec.failure)
        rec.state = EffectState.APPLIED
        rec.outputs = dict(observed.outputs)
        if executor.spec.reversibility is Reversibility.REVERSIBLE:
            pending.append(rec)  # durable with the next batch (group commit)
        else:
            # an irreversible or rediscover effect's outcome may not be observable again
            # after a crash (Uncertain would quarantine it): it is synced on its own
            self.journal.commit(op, [rec], header=False)
        self._boundary(f"after-outcome:{rec.id}")

    def _complete(self, op: OperationRecord, pending: Sequence[EffectRecord] = ()) -> None:
        try:
            exports = self._resolve_exports(op)
        except _EffectFailed as failed:
            if pending:
                self.journal.commit(op, pending, header=False)
            self._compensate(op, failed.failure)
            return
        self._boundary("before-completed")
        op.state = OperationState.COMPLETED
        op.result = exports
        op.failure = None
        self.journal.commit(op, pending, sync=self._sync_end)
        self._boundary("after-completed")
        _log.info("operation=%s event=completed", op.operation_id)

    def _recheck(
        self, op: OperationRecord, bound: BoundEffect, executor: Executor, ctx: EffectContext
    ) -> None:
        fence = self.journal.fence(op.scope)
        if fence is not None:
            raise ExecutorError(
                RunCode.E_FENCED.value, f"scope {op.scope} was fenced: {fence.reason}"
            )
        for port, spec in executor.spec.inputs.items():
            if spec.access is None:
                continue
            for handle in ctx.inputs.get(port, ()):
                if not handle.grants(spec.access):
                    raise ExecutorError(
                        RunCode.E_RECHECK.value,
                        f"input {port} handle {handle.id} does not grant {spec.access.value}",
                    )
        if self._recheck_hook is not None:
            self._recheck_hook(ctx, bound)

    # ------------------------------------------------------------------ references

    def _outputs_of(self, op: OperationRecord, ref: EffectOutputRef, user: str) -> list[Handle]:
        for rec in op.effects:
            if rec.id == ref.effect and rec.state is EffectState.APPLIED:
                handles = rec.outputs.get(ref.port, ())
                if ref.index is None:
                    if handles:
                        return list(handles)
                elif 0 <= ref.index < len(handles):
                    return [handles[ref.index]]
                break
        raise _EffectFailed(
            Failure(
                RunCode.E_OUTPUT_MISSING.value,
                f"{user} needs output {ref.effect}.{ref.port}"
                + (f"[{ref.index}]" if ref.index is not None else "")
                + ", which was not produced",
                user,
            )
        )

    def _resolve_ports(
        self, op: OperationRecord, ports: Mapping[str, tuple[BoundInput, ...]], user: str
    ) -> dict[str, tuple[Handle, ...]]:
        out: dict[str, tuple[Handle, ...]] = {}
        for port, values in ports.items():
            handles: list[Handle] = []
            for value in values:
                if isinstance(value, Handle):
                    handles.append(value)
                else:
                    handles.extend(self._outputs_of(op, value, user))
            out[port] = tuple(handles)
        return out

    def _resolve_inputs(
        self, op: OperationRecord, ports: Mapping[str, tuple[BoundInput, ...]], user: str
    ) -> dict[str, tuple[Handle, ...]]:
        return self._resolve_ports(op, ports, user)

    def _resolve_exports(self, op: OperationRecord) -> dict[str, tuple[Handle, ...]]:
        exports = self._resolve_ports(op, op.program.exports, "exports")
        for name, handles in exports.items():
            if not handles:
                raise _EffectFailed(
                    Failure(RunCode.E_EXPORT_MISSING.value, f"export {name} is empty", "")
                )
        return exports

    # ------------------------------------------------------------------ undo path

    def _context(self, op: OperationRecord, rec: EffectRecord) -> EffectContext:
        bound = op.program.effects[rec.index]
        return EffectContext(op.operation_id, rec.id, rec.inputs, bound.parameters, self._env(op))

    @contextmanager
    def _end_sync(self, sync_end: bool) -> Iterator[None]:
        """For one public call: whether the end record is synced on its own."""
        self._call.sync_end = sync_end
        try:
            yield
        finally:
            self._call.sync_end = True

    @contextmanager
    def _with_env(self, operation_id: str, env: Any) -> Iterator[None]:
        """For one public call: the caller's env for this operation (not closed by us);
        envs the factory builds meanwhile are closed when the call ends."""
        if env is not None:
            self._call_envs[operation_id] = env
        try:
            yield
        finally:
            if env is not None:
                self._call_envs.pop(operation_id, None)
            self._close_built_envs()

    def _env(self, op: OperationRecord) -> Any:
        if op.operation_id in self._call_envs:
            return self._call_envs[op.operation_id]
        if self.env_factory is not None:
            env = self.env_factory(op)
            self._call_envs[op.operation_id] = env
            self._built_envs.append(op.operation_id)
            return env
        return self.env

    def _close_built_envs(self) -> None:
        """Close environments the factory built during one public call (if closable)."""
        while self._built_envs:
            env = self._call_envs.pop(self._built_envs.pop(), None)
            close = getattr(env, "close", None)
            if callable(close):
                try:
                    close()
                except Exception:
                    _log.exception("event=env-close-failed")

    def _observe_recovery(self, op: OperationRecord, rec: EffectRecord) -> RecoveryObservation:
        bound = op.program.effects[rec.index]
        executor = self.executors.get(rec.kind)
        if executor is None:
            return RecoveryObservation.UNCERTAIN
        return observation_of(executor, self._context(op, rec), rec.before, bound.recovery)

    def _compensate(
        self,
        op: OperationRecord,
        failure: Failure | None,
        *,
        fences: Sequence[Fence] = (),
        carry: Sequence[EffectRecord] = (),
    ) -> None:
        """Undo attempted effects in reverse; finish Undone or Quarantined.

        Used for a failed run (``failure`` set), for cleanup (op already Undoing) and by
        recovery. Effects already Undone/Quarantined or never started are skipped, which
        makes a second pass a no-op. ``carry``: records whose outcome is not yet durable
        (group commit); they ride in the first compensation commit.
        """
        if op.state is not OperationState.UNDOING:
            op.state = OperationState.COMPENSATING
        if failure is not None:
            op.failure = failure
        pending: list[EffectRecord] = list(carry)
        header_written = False
        fence_list = list(fences)
        for rec in reversed(op.effects):
            if any(r is rec for r in pending):
                pending.remove(rec)  # written below with its compensation state
            if rec.state in (EffectState.PLANNED, EffectState.UNDONE, EffectState.QUARANTINED):
                continue
            executor = self.executors.get(rec.kind)
            reversibility = executor.spec.reversibility if executor is not None else None
            observation = (
                self._observe_recovery(op, rec) if rec.state is EffectState.APPLYING else None
            )
            strategy = op.program.effects[rec.index].recovery
            action, note = decide_compensation(rec.state, observation, reversibility, strategy)
            if action is UndoAction.MARK_UNDONE:
                rec.state, rec.note = EffectState.UNDONE, note
                pending.append(rec)
                continue
            if action is UndoAction.QUARANTINE or executor is None:
                rec.state = EffectState.QUARANTINED
                rec.note = note if executor is not None else f"no executor for {rec.kind}"
                pending.append(rec)
                _log.warning(
                    "operation=%s effect=%s event=quarantined note=%s",
                    op.operation_id,
                    rec.id,
                    rec.note,
                )
                continue
            rec.state = EffectState.UNDOING
            pending.append(rec)
            self.journal.commit(
                op,
                pending,
                fence_list,
                header=not header_written,
                sync=self._synced_before(rec.kind) or bool(fence_list),
            )
            header_written, pending, fence_list = True, [], []
            self._boundary(f"after-undoing:{rec.id}")
            try:
                executor.undo(self._context(op, rec), rec.before, rec.outputs)
            except UndoDeferred as exc:
                # nothing after it is undone: the reverse order is the contract
                rec.failure = Failure(exc.code, str(exc), rec.id)
                rec.note = "undo deferred; retried by the next cleanup or recovery"
                self.journal.commit(op, [rec], sync=True)
                self._boundary(f"after-undo-deferred:{rec.id}")
                _log.warning(
                    "operation=%s effect=%s event=undo-deferred code=%s message=%s",
                    op.operation_id,
                    rec.id,
                    exc.code,
                    exc,
                )
                return
            except Exception as exc:
                code, msg = _describe(exc)
                rec.state = EffectState.QUARANTINED
                rec.failure = Failure(code or RunCode.E_UNDO.value, msg, rec.id)
                rec.note = "undo failed; left for inspection"
                _log.warning(
                    "operation=%s effect=%s event=undo-failed message=%s",
                    op.operation_id,
                    rec.id,
                    msg,
                )
            else:
                rec.state = EffectState.UNDONE
                rec.note = note
            self._boundary(f"after-undo:{rec.id}")
            pending.append(rec)
        op.state = OperationState.QUARANTINED if op.quarantined else OperationState.UNDONE
        # an Undone operation of boot-volatile effects says only that links are gone, which a
        # machine crash (the only thing that loses an unsynced record) also makes true; a
        # Quarantined one is synced (an operator must find it); a fence is never left to
        # ride: it guards against older runs, not just this one
        volatile = op.state is OperationState.UNDONE and self._boot_volatile(op)
        sync = (self._sync_end and not volatile) or bool(fence_list)
        self.journal.commit(op, pending, fence_list, sync=sync)
        self._boundary("after-compensated")
        _log.info("operation=%s event=%s", op.operation_id, op.state.value.lower())

    # ------------------------------------------------------------------ recovery

    def _recover(self, op: OperationRecord) -> None:
        """Reconcile one unfinished operation; see :mod:`dmn.engine.recovery`."""
        _log.info("operation=%s state=%s event=recover", op.operation_id, op.state.value)
        if op.state is not OperationState.RUNNING:
            self._compensate(op, None)
            return
        pending: list[EffectRecord] = []
        uncertain = False
        for rec in op.effects:
            if rec.state is not EffectState.APPLYING:
                continue
            observation = self._observe_recovery(op, rec)
            if observation is RecoveryObservation.APPLIED:
                executor = self.executors[rec.kind]
                try:
                    observed = executor.observe(self._context(op, rec), rec.before)
                except Exception:
                    uncertain = True
                    continue
                if observed.postconditions_ok:
                    rec.state = EffectState.APPLIED
                    rec.outputs = dict(observed.outputs)
                    rec.note = "observed applied after restart"
                    pending.append(rec)
                else:
                    uncertain = True
            elif observation is RecoveryObservation.NOT_APPLIED:
                rec.state = EffectState.CAPTURED
            else:
                uncertain = True
        if all(rec.state is EffectState.APPLIED for rec in op.effects):
            self._complete(op, pending)
            return
        if op.policy is RecoveryPolicy.ROLL_FORWARD and not uncertain:
            if pending:
                self.journal.commit(op, pending, header=False)
            start = next(i for i, r in enumerate(op.effects) if r.state is not EffectState.APPLIED)
            self._forward(op, start)
            return
        # Effects reconciled above are written by the compensation commits.
        self._compensate(
            op,
            Failure(RunCode.E_RECOVERED.value, "rolled back by recovery after a restart"),
        )

    def _refuse_if_fenced(self, scope: str, operation_id: str) -> None:
        fence = self.journal.fence(scope)
        if fence is not None:
            raise RunRefused(
                RunCode.E_FENCED,
                f"scope {scope} has a terminal fence ({fence.reason}); "
                "an older operation cannot resurrect it",
                operation_id,
            )

    def _boundary(self, name: str) -> None:
        if self._boundary_hook is not None:
            self._boundary_hook(name)
