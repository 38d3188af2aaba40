"""The runner's contract against an in-memory world and journal (and once on RocksDB)."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest

from dmn.engine.bound import BoundEffect, BoundProgram
from dmn.engine.journal import (
    EffectState,
    MemoryJournal,
    OperationState,
    RecoveryPolicy,
    RunCode,
)
from dmn.engine.mutation_lock import MutationLockTimeout, NodeMutationLock
from dmn.engine.runner import Runner, RunRefused
from dmn.vocabulary.terms import Access
from tests.journal.programs import PARENT, child_program, foreign_world, reset_program
from tests.journal.world import World, host_handle, world_executors
from tests.waiting import wait_for


class Crash(BaseException):
    """Stands in for SIGKILL in-process: nothing after the boundary runs."""


def make(journal=None, world=None, boundary=None):
    world = world or World(data=copy.deepcopy(foreign_world()))
    journal = journal if journal is not None else MemoryJournal()
    return Runner(journal, world_executors(world), boundary=boundary), journal, world


def state(world: World) -> dict:
    return world.snapshot()


INITIAL = World(data=copy.deepcopy(foreign_world())).snapshot()


def test_happy_path_commits_and_exports() -> None:
    runner, journal, world = make()
    result = runner.run("op1", "att/a", child_program())
    assert result.ok and not result.replayed
    assert result.exports["interface"][0].inventory_id == "obj:vlan10"
    snap = state(world)
    assert snap["objects"]["vlan10"] == {"alias": "dmn:op1:create", "parent": "obj:eth0"}
    assert snap["attrs"]["obj:vlan10.mtu"] == 1400 and snap["attrs"]["obj:vlan10.up"] is True
    # group commit: one per effect (before-image + intent or previous outcome) + Completed
    assert journal.commits == 3 + 1
    op = journal.load_operation("op1")
    assert op is not None and op.state is OperationState.COMPLETED
    assert [e.state for e in op.effects] == [EffectState.APPLIED] * 3
    assert op.effects[1].before == {"attr": "obj:vlan10.mtu", "present": False, "value": None}
    assert op.effects[1].inputs["interface"][0].inventory_id == "obj:vlan10"


def test_group_commit_outcome_rides_in_the_next_batch_and_is_never_assumed() -> None:
    """An outcome is durable with the next effect's before-image (or the completion record);
    until then the journal says Applying, so a crash there is recovered by observation."""
    seen: dict[str, list[str]] = {}
    journal = MemoryJournal()

    def boundary(name: str) -> None:
        op = journal.load_operation("op1")
        if op is not None:
            seen[name] = [e.state.value for e in op.effects]

    runner, _, _ = make(journal=journal, boundary=boundary)
    assert runner.run("op1", "att/a", child_program()).ok
    create = "after-outcome:create"
    assert seen[create][0] == "Applying"  # observed, not yet durable
    second = [n for n in seen if n.startswith("after-before-image:")][1]
    assert seen[second][:2] == ["Applied", "Applying"]  # one batch: outcome + before-image
    assert seen["before-completed"][-1] == "Applying"  # the end record carries the last one
    op = journal.load_operation("op1")
    assert op is not None and [e.state for e in op.effects] == [EffectState.APPLIED] * 3


def test_end_record_rides_with_the_callers_commit_when_asked() -> None:
    """``sync_end=False``: Completed (and cleanup's final Undone) is written, not synced on
    its own; the caller's next synced commit makes it durable (issue 15)."""
    runner, journal, world = make()
    assert runner.run("op1", "att/a", child_program(), sync_end=False).ok
    assert journal.commits == 3  # one per effect; the end record rides
    op = journal.load_operation("op1")
    assert op is not None and op.state is OperationState.COMPLETED
    assert [e.state for e in op.effects] == [EffectState.APPLIED] * 3
    base = journal.commits
    undone = runner.cleanup("op1", sync_end=False)
    assert undone.state is OperationState.UNDONE and not undone.boot_volatile
    assert journal.commits - base == 3  # one per undo; the final Undone rides
    assert state(world) == INITIAL
    # the next call syncs its end record on its own again
    assert runner.run("op2", "att/b", child_program()).ok
    assert journal.commits - base == 3 + 4


def test_crash_with_an_outcome_pending_is_recovered_by_observation() -> None:
    def boundary(name: str) -> None:
        if name == "before-completed":
            raise Crash

    runner, journal, world = make(boundary=boundary)
    with pytest.raises(Crash):
        runner.run("op1", "att/a", child_program())
    op = journal.load_operation("op1")
    assert op is not None and op.effects[-1].state is EffectState.APPLYING
    calls = len(world.calls)
    runner2, _, _ = make(journal=journal, world=world)
    (result,) = runner2.recover()
    assert result.state is OperationState.COMPLETED  # observed Applied, not assumed
    assert not [c for c in world.calls[calls:] if c.startswith("apply:")]  # nothing re-run


def test_an_irreversible_outcome_is_synced_on_its_own() -> None:
    """Recovery may not be able to observe an irreversible effect again: its outcome is not
    deferred (a lost outcome would quarantine a reset that succeeded)."""
    seen: dict[str, list[str]] = {}
    journal = MemoryJournal()

    def boundary(name: str) -> None:
        op = journal.load_operation("op-r")
        if op is not None:
            seen[name] = [e.state.value for e in op.effects]

    runner, _, _ = make(journal=journal, boundary=boundary)
    assert runner.run("op-r", "prep/a", reset_program()).ok
    assert seen["after-outcome:reset"][0] == "Applied"
    assert seen["after-outcome:mode"] == ["Applied", "Applying"]  # reversible: deferred


def test_replay_same_digest_returns_saved_result_without_effects() -> None:
    runner, journal, world = make()
    first = runner.run("op1", "att/a", child_program())
    calls, commits = list(world.calls), journal.commits
    again = runner.run("op1", "att/a", child_program())
    assert again.replayed and again.exports == first.exports
    assert world.calls == calls and journal.commits == commits


def test_same_id_different_digest_is_refused() -> None:
    runner, _, world = make()
    runner.run("op1", "att/a", child_program())
    with pytest.raises(RunRefused) as err:
        runner.run("op1", "att/a", child_program(mtu=1500))
    assert err.value.code is RunCode.E_OPERATION_CONFLICT
    assert state(world)["attrs"]["obj:vlan10.mtu"] == 1400


@pytest.mark.parametrize(
    ("step", "effect", "code"),
    [
        ("apply", "up", "E_INJECTED"),
        ("apply", "create", "E_INJECTED"),
        ("observe", "mtu", "E_INJECTED"),
        ("observe", "mtu=postcondition", "E_POSTCONDITION"),
    ],
)
def test_failure_compensates_in_reverse_including_failed(step, effect, code) -> None:
    runner, journal, world = make()
    world.fail = {step: effect}
    result = runner.run("op1", "att/a", child_program())
    failed = effect.split("=")[0]
    assert result.state is OperationState.UNDONE
    assert result.failure is not None and result.failure.code == code
    assert result.failure.effect == failed
    assert state(world) == INITIAL
    undos = [c for c in world.calls if c.startswith("undo:")]
    attempted = ["create", "mtu", "up"][: ["create", "mtu", "up"].index(failed) + 1]
    assert undos == [f"undo:{e}" for e in reversed(attempted)]
    op = journal.load_operation("op1")
    assert all(e.state in (EffectState.UNDONE, EffectState.PLANNED) for e in op.effects)


def test_undo_failure_quarantines_and_keeps_undoing_the_rest() -> None:
    runner, journal, world = make()
    world.fail = {"apply": "up", "undo": "mtu"}
    result = runner.run("op1", "att/a", child_program())
    assert result.state is OperationState.QUARANTINED
    assert result.quarantined == ("mtu",)
    snap = state(world)
    assert "vlan10" not in snap["objects"]  # create was still undone
    op = journal.load_operation("op1")
    assert op.effects[1].note == "undo failed; left for inspection"
    with pytest.raises(RunRefused) as err:
        runner.run("op1", "att/a", child_program())
    assert err.value.code is RunCode.E_QUARANTINED


def test_deferred_undo_stops_the_reverse_pass_and_is_retried_not_quarantined() -> None:
    """An undo whose peer did not answer (``UndoDeferred``) leaves its effect Undoing and the
    operation unfinished, undoes nothing before it in the program (reverse order is the
    contract), and the next cleanup continues from it."""
    runner, journal, world = make()
    assert runner.run("op1", "att/a", child_program()).ok
    world.fail = {"defer-undo": "mtu"}
    result = runner.cleanup("op1")
    assert result.state is OperationState.UNDOING and not result.quarantined
    op = journal.load_operation("op1")
    assert [e.state for e in op.effects] == [
        EffectState.APPLIED,
        EffectState.UNDOING,
        EffectState.UNDONE,
    ]
    assert "vlan10" in state(world)["objects"]  # create is not undone before mtu
    assert [o.operation_id for o in journal.unfinished_operations()] == ["op1"]
    world.fail = {}
    result = runner.cleanup("op1")
    assert result.state is OperationState.UNDONE
    assert state(world) == INITIAL
    undos = [c for c in world.calls if c.startswith("undo:")]
    assert undos == ["undo:up", "undo:mtu", "undo:mtu", "undo:create"]


def test_foreign_object_with_expected_name_is_never_adopted_or_deleted() -> None:
    runner, _, world = make()
    result = runner.run("op1", "att/a", child_program(name="other"))
    assert result.state is OperationState.UNDONE
    assert result.failure.code == "E_EXISTS"
    assert state(world) == INITIAL  # "other" (foreign) untouched


def test_irreversible_uncertain_effect_is_quarantined_not_retried() -> None:
    runner, _, world = make()
    world.fail = {"apply": "reset"}
    result = runner.run("op2", "prep/c/f", reset_program())
    assert result.state is OperationState.QUARANTINED and result.quarantined == ("reset",)
    assert state(world)["resets"] == {"obj:pf0": 1}
    with pytest.raises(RunRefused):
        runner.run("op2", "prep/c/f", reset_program())
    assert state(world)["resets"] == {"obj:pf0": 1}


def test_recheck_refuses_missing_access_before_apply() -> None:
    runner, _, world = make()
    program = child_program()
    weak = host_handle("eth0", Access.READ)
    create = program.effects[0]
    effects = (
        BoundEffect(
            create.id, create.source_id, create.kind, {"parent": (weak,)}, create.parameters
        ),
        *program.effects[1:],
    )
    bad = BoundProgram(
        program.plugin, "v1", "connect", program.contract_digest, effects, program.exports
    )
    result = runner.run("op1", "att/a", bad)
    assert result.failure.code == RunCode.E_RECHECK.value
    assert world.calls == [] and state(world) == INITIAL


def test_unknown_opcode_refused_before_intent() -> None:
    runner, journal, _ = make()
    program = child_program()
    e = program.effects[0]
    bad = BoundProgram(
        "p", "v1", "connect", "d", (BoundEffect(e.id, e.id, "test/nope/v1", e.inputs, {}),)
    )
    with pytest.raises(RunRefused) as err:
        runner.run("op1", "att/a", bad)
    assert err.value.code is RunCode.E_NO_EXECUTOR and journal.commits == 0


def test_cleanup_replays_recorded_effects_in_reverse_and_fences() -> None:
    runner, journal, world = make()
    runner.run("op1", "att/a", child_program())
    world.calls.clear()
    # cleanup needs nothing but the journal: a fresh runner over the same journal
    fresh = Runner(journal, world_executors(world))
    result = fresh.cleanup("op1", fence_scope="att/a")
    assert result.state is OperationState.UNDONE
    assert world.calls == ["undo:up", "undo:mtu", "undo:create"]
    assert state(world) == INITIAL
    # the terminal fence stops the older connect from resurrecting (run or replay)
    with pytest.raises(RunRefused) as err:
        fresh.run("op1", "att/a", child_program())
    assert err.value.code is RunCode.E_FENCED
    with pytest.raises(RunRefused):
        fresh.run("op-late", "att/a", child_program())
    assert state(world) == INITIAL
    # cleanup again is a no-op
    commits = journal.commits
    assert fresh.cleanup("op1", fence_scope="att/a").state is OperationState.UNDONE
    assert world.calls == ["undo:up", "undo:mtu", "undo:create"]
    assert journal.commits == commits + 1  # only the (idempotent) fence rewrite


def test_cleanup_of_unknown_operation_is_undone_and_fences() -> None:
    runner, journal, _ = make()
    assert runner.cleanup("ghost", fence_scope="att/z").state is OperationState.UNDONE
    assert journal.fence("att/z") is not None


def test_undone_operation_can_be_retried_as_a_new_attempt() -> None:
    runner, journal, world = make()
    world.fail = {"apply": "up"}
    assert runner.run("op1", "att/a", child_program()).state is OperationState.UNDONE
    world.fail = {}
    result = runner.run("op1", "att/a", child_program())
    assert result.ok and journal.load_operation("op1").attempt == 2


@pytest.mark.parametrize(
    "boundary",
    [
        "after-intent",
        "after-before-image:create",
        "after-apply:create",
        "after-outcome:create",
        "after-before-image:mtu",
        "after-apply:up",
        "after-outcome:up",
        "before-completed",
    ],
)
def test_in_process_crash_then_recovery_twice(boundary: str) -> None:
    def hook(name: str) -> None:
        if name == boundary:
            raise Crash(name)

    journal = MemoryJournal()
    runner, _, world = make(journal=journal, boundary=hook)
    with pytest.raises(Crash):
        runner.run("op1", "att/a", child_program())
    recovered = Runner(journal, world_executors(world)).recover()
    assert len(recovered) == 1
    op = journal.load_operation("op1")
    if boundary in ("before-completed", "after-outcome:up", "after-apply:up"):
        assert op.state is OperationState.COMPLETED  # all applied: rolled forward
        assert state(world)["objects"]["vlan10"]["alias"] == "dmn:op1:create"
    else:
        assert op.state is OperationState.UNDONE
        assert state(world) == INITIAL
    commits, snap = journal.commits, state(world)
    assert Runner(journal, world_executors(world)).recover() == []
    assert journal.commits == commits and state(world) == snap


def test_crash_during_cleanup_is_finished_by_recovery() -> None:
    journal = MemoryJournal()
    runner, _, world = make(journal=journal)
    runner.run("op1", "att/a", child_program())

    def hook(name: str) -> None:
        if name == "after-undo:mtu":
            raise Crash(name)

    with pytest.raises(Crash):
        Runner(journal, world_executors(world), boundary=hook).cleanup("op1", fence_scope="att/a")
    assert journal.load_operation("op1").state is OperationState.UNDOING
    Runner(journal, world_executors(world)).recover()
    assert journal.load_operation("op1").state is OperationState.UNDONE
    assert state(world) == INITIAL


def test_roll_forward_policy_finishes_remaining_effects() -> None:
    def hook(name: str) -> None:
        if name == "after-outcome:create":
            raise Crash(name)

    journal = MemoryJournal()
    runner, _, world = make(journal=journal, boundary=hook)
    with pytest.raises(Crash):
        runner.run("op1", "att/a", child_program(), policy=RecoveryPolicy.ROLL_FORWARD)
    [result] = Runner(journal, world_executors(world)).recover()
    assert result.ok and state(world)["attrs"]["obj:vlan10.up"] is True


def test_irreversible_left_applying_by_crash_is_quarantined_with_record() -> None:
    def hook(name: str) -> None:
        if name == "after-apply:reset":
            raise Crash(name)

    journal = MemoryJournal()
    runner, _, world = make(journal=journal, boundary=hook)
    with pytest.raises(Crash):
        runner.run("op2", "prep/c/f", reset_program())
    [result] = Runner(journal, world_executors(world)).recover()
    assert result.state is OperationState.QUARANTINED and result.quarantined == ("reset",)
    op = journal.load_operation("op2")
    assert "uncertain" in op.effects[0].note
    assert state(world)["resets"] == {"obj:pf0": 1}
    assert Runner(journal, world_executors(world)).recover() == []


def test_runner_on_rocksdb_store_keeps_commit_budget(tmp_path: Path) -> None:
    from dmn.agent.journal.store import JournalStore

    with JournalStore.open(tmp_path) as store:
        base = store.commits
        runner, _, _world = make(journal=store)
        result = runner.run(
            "op1",
            "att/a",
            child_program(),
            authorisations=[{"claimUID": "c1", "effects": ["test/create/v1"]}],
            digests={"artifact": "sha256:a", "revision": "sha256:r"},
        )
        assert result.ok
        assert store.commits - base == 3 + 1  # N + 1 synced commits (budget N + 2)
        assert [op.operation_id for op in store.operations("att/a")] == ["op1"]
        assert store.unfinished_operations() == []
    with JournalStore.open(tmp_path) as store:
        op = store.load_operation("op1")
        assert op.state is OperationState.COMPLETED and op.program == child_program()
        assert op.digests == {"artifact": "sha256:a", "revision": "sha256:r"}
        assert op.authorisations == ({"claimUID": "c1", "effects": ["test/create/v1"]},)
        assert op.digest == child_program().digest and op.contract_digest == "sha256:contract"
        assert op.result["interface"][0].inventory_id == "obj:vlan10"


def test_runs_of_one_operation_serialise_and_wait_bounded() -> None:
    """The runner holds its operation's key: a second call for the same operation waits
    (bounded, MutationLockTimeout naming the holder, nothing changed); see
    tests/journal/test_mutation_lock.py for the lock's own contract."""
    import threading

    from dmn.engine.mutation_lock import operation_key

    runner, _, world = make()
    runner.lock = NodeMutationLock(timeout=0.05)
    errors: list[MutationLockTimeout] = []
    with runner.lock.hold("holder of op1", [operation_key("op1")]):

        def other() -> None:
            try:
                runner.run("op1", "att/a", child_program())
            except MutationLockTimeout as exc:
                errors.append(exc)

        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert errors and "holder of op1" in str(errors[0])
    assert runner.journal.load_operation("op1") is None and state(world) == INITIAL
    assert runner.run("op1", "att/a", child_program()).ok


def test_parent_handle_is_a_grant_not_an_object() -> None:
    assert PARENT.grants(Access.CREATE_CHILD)


class _Env:
    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_env_per_call_and_factory_for_recovery() -> None:
    seen: list[str] = []
    world = World(data=copy.deepcopy(foreign_world()))
    executors = world_executors(world)
    create = executors["test/create/v1"]
    original = create.capture

    def capture(ctx):
        seen.append(ctx.env.name)
        return original(ctx)

    create.capture = capture
    recover_original = create.recover

    def recover(ctx, before):
        seen.append(ctx.env.name)
        return recover_original(ctx, before)

    create.recover = recover
    journal = MemoryJournal()

    def hook(name: str) -> None:
        if name == "after-apply:create":
            raise Crash(name)

    runner = Runner(journal, executors, env=_Env("default"), boundary=hook)
    with pytest.raises(Crash):
        runner.run("op1", "att/a", child_program(), env=_Env("call"))
    built: list[_Env] = []

    def factory(op):
        env = _Env(f"rebuilt:{op.operation_id}")
        built.append(env)
        return env

    Runner(journal, executors, env_factory=factory).recover()
    assert seen == ["call", "rebuilt:op1"]
    assert len(built) == 1 and built[0].closed


def test_caller_recheck_refusal_compensates_without_applying() -> None:
    from dmn.opcodes.executor import ExecutorError

    world = World(data=copy.deepcopy(foreign_world()))

    def recheck(ctx, bound) -> None:
        if bound.id == "mtu":
            raise ExecutorError("E_PROTECTED", "interface became protected")

    journal = MemoryJournal()
    runner = Runner(journal, world_executors(world), recheck=recheck)
    result = runner.run("op1", "att/a", child_program())
    assert result.state is OperationState.UNDONE and result.failure.code == "E_PROTECTED"
    assert world.calls == ["apply:create", "undo:create"]  # mtu never applied nor undone
    op = journal.load_operation("op1")
    assert op.effects[1].state is EffectState.UNDONE and op.effects[1].note == "never applied"
    assert state(world) == INITIAL


def test_fence_without_cleanup_blocks_new_runs_of_the_scope() -> None:
    runner, journal, world = make()
    runner.fence("att/a", "sandbox stopped")
    with pytest.raises(RunRefused) as err:
        runner.run("op1", "att/a", child_program())
    assert err.value.code is RunCode.E_FENCED and "sandbox stopped" in str(err.value)
    assert journal.commits == 1 and world.calls == []


@pytest.mark.adversarial
def test_runs_of_different_operations_overlap_and_their_batches_do_not_mix(
    tmp_path: Path,
) -> None:
    """Issue 13: op-a's first apply does not return until op-b ran to completion in another
    thread (so b never waited for a), on the RocksDB store; each operation's records are
    exactly its own (group commit: N + 1 synced commits each, no outcome in the other's
    batch), and a's unsynced end record (sync_end=False) did not change b's."""
    import threading

    from dmn.agent.journal.store import JournalStore

    world = World(data=copy.deepcopy(foreign_world()))
    executors = world_executors(world)
    create = executors["test/create/v1"]
    original_apply = create.apply
    b_done = threading.Event()

    def apply(ctx, before) -> None:
        if ctx.operation_id == "op-a":
            assert b_done.wait(60), "op-b waited for op-a"
        original_apply(ctx, before)

    create.apply = apply
    with JournalStore.open(tmp_path) as journal:
        runner = Runner(journal, executors)
        base = journal.commits
        results: dict[str, object] = {}

        def run(op: str, name: str, sync_end: bool) -> None:
            results[op] = runner.run(op, f"att/{op}", child_program(name), sync_end=sync_end)
            if op == "op-b":
                b_done.set()

        ta = threading.Thread(target=run, args=("op-a", "ca", False))
        ta.start()
        wait_for(lambda: "run op-a" in runner.lock.holder, timeout=60, what="op-a inside")
        tb = threading.Thread(target=run, args=("op-b", "cb", True))
        tb.start()
        tb.join(60)
        ta.join(60)
        for op, name in (("op-a", "ca"), ("op-b", "cb")):
            rec = journal.load_operation(op)
            assert rec is not None and rec.state is OperationState.COMPLETED, op
            assert [e.state for e in rec.effects] == [EffectState.APPLIED] * 3
            assert rec.result["interface"][0].inventory_id == f"obj:{name}", op
            assert rec.effects[0].before is not None and rec.operation_id == op
        # op-a: 3 synced (intent+first, two more before-images), end unsynced; op-b: 3 + end
        assert journal.commits - base == 3 + 4


@pytest.mark.adversarial
def test_runs_of_one_operation_serialise_and_the_second_replays() -> None:
    import threading

    world = World(data=copy.deepcopy(foreign_world()))
    executors = world_executors(world)
    create = executors["test/create/v1"]
    original_apply = create.apply
    inside, release = threading.Event(), threading.Event()

    def apply(ctx, before) -> None:
        inside.set()
        assert release.wait(60)
        original_apply(ctx, before)

    create.apply = apply
    runner = Runner(MemoryJournal(), executors)
    results = []

    def run() -> None:
        results.append(runner.run("op1", "att/a", child_program()))

    t1 = threading.Thread(target=run)
    t1.start()
    assert inside.wait(60)
    t2 = threading.Thread(target=run)
    t2.start()
    wait_for(lambda: "run op1" in runner.lock.waiting, timeout=60, what="the second run to wait")
    release.set()
    t1.join(60)
    t2.join(60)
    assert [r.replayed for r in results] == [False, True]
    assert world.calls.count("apply:create") == 1


def test_fence_during_a_run_in_flight_stops_it_at_the_next_effect() -> None:
    import threading

    world = World(data=copy.deepcopy(foreign_world()))
    executors = world_executors(world)
    create = executors["test/create/v1"]
    original_apply = create.apply
    entered, release = threading.Event(), threading.Event()

    def slow_apply(ctx, before) -> None:
        original_apply(ctx, before)
        entered.set()
        assert release.wait(60)

    create.apply = slow_apply
    journal = MemoryJournal()
    runner = Runner(journal, executors, lock=NodeMutationLock(timeout=60))
    results = []
    t = threading.Thread(target=lambda: results.append(runner.run("op1", "att/a", child_program())))
    t.start()
    assert entered.wait(60)
    runner.fence("att/a", "sandbox removed")  # does not wait for the run's lock
    release.set()
    t.join()
    [result] = results
    assert result.state is OperationState.UNDONE
    assert result.failure.code == RunCode.E_FENCED.value and result.failure.effect == "mtu"
    assert state(world) == INITIAL


def test_node_lock_is_held_only_inside_runner_calls() -> None:
    """The lock is free again after every outcome (completed, refused, compensated, crash),
    so nothing outside the runner's own journal commits and effects ever waits on it."""
    import threading

    def free(lock: NodeMutationLock) -> bool:
        got: list[bool] = []

        def take() -> None:  # another thread, and a pass: nothing at all may be held
            with lock.exclusive("probe", timeout=60):
                got.append(True)

        t = threading.Thread(target=take)
        t.start()
        t.join(60)
        return got == [True] and lock.holder == ""

    runner, _, world = make()
    assert runner.run("op1", "att/a", child_program()).ok and free(runner.lock)
    with pytest.raises(RunRefused):
        runner.run("op1", "att/a", child_program(mtu=1500))
    assert free(runner.lock)
    world.fail = {"apply": "up"}
    assert runner.run("op2", "att/b", child_program("c2")).state is OperationState.UNDONE
    assert free(runner.lock)

    def crash(name: str) -> None:
        if name == "after-apply:mtu":
            raise Crash(name)

    crashing, _, _ = make(boundary=crash)
    with pytest.raises(Crash):
        crashing.run("op3", "att/c", child_program())
    assert free(crashing.lock)


def volatile_executors(world: World) -> dict:
    """The world's executors with specs that say their effects are boot-volatile."""
    executors = world_executors(world)
    for executor in executors.values():
        executor.spec = dataclasses.replace(executor.spec, boot_volatile=True)
    return executors


def test_boot_volatile_effects_cost_one_synced_commit_on_rocksdb(tmp_path: Path) -> None:
    """Intent and before-images of boot-volatile effects ride with the end record: a run of
    three such effects is one fdatasync; its cleanup none (its Undone says only that links
    are gone, which a machine crash makes true too), with a fence one (the fence's); what
    was written unsynced is in the store after it is closed and reopened."""
    from dmn.agent.journal.store import JournalStore

    world = World(data=copy.deepcopy(foreign_world()))
    with JournalStore.open(tmp_path) as store:
        runner = Runner(store, volatile_executors(world))
        base = store.commits
        assert runner.run("op1", "att/a", child_program()).ok
        assert store.commits - base == 1
        base = store.commits
        undone = runner.cleanup("op1")
        assert undone.state is OperationState.UNDONE and undone.boot_volatile
        assert store.commits - base == 0
        assert runner.run("op2", "att/b", child_program()).ok
        base = store.commits
        assert runner.cleanup("op2", fence_scope="att/b").state is OperationState.UNDONE
        assert store.commits - base == 1  # a fence is synced with the first Undoing
        assert runner.run("op3", "att/c", child_program(), sync_end=False).ok
    with JournalStore.open(tmp_path) as store:
        op = store.load_operation("op3")
        assert op is not None and op.state is OperationState.COMPLETED
        assert [e.state for e in op.effects] == [EffectState.APPLIED] * 3
        op = store.load_operation("op1")
        assert op is not None and op.state is OperationState.UNDONE
        assert [e.state for e in op.effects] == [EffectState.UNDONE] * 3


@pytest.mark.parametrize(
    "boundary",
    [
        "after-intent",
        "after-before-image:create",
        "after-apply:create",
        "after-outcome:create",
        "after-before-image:mtu",
        "after-apply:up",
        "after-outcome:up",
        "before-completed",
        "after-undoing:up",
        "after-undo:mtu",
        "after-undoing:create",
    ],
)
def test_boot_volatile_crash_at_every_boundary_is_recovered(boundary: str) -> None:
    """A killed process keeps every record it wrote, synced or not (the MemoryJournal, like
    the WAL in the page cache): recovery after a crash at any boundary of a run or its
    cleanup of boot-volatile effects ends exactly as with synced records."""

    def hook(name: str) -> None:
        if name == boundary:
            raise Crash(name)

    journal = MemoryJournal()
    world = World(data=copy.deepcopy(foreign_world()))
    runner = Runner(journal, volatile_executors(world), boundary=hook)
    with pytest.raises(Crash):
        runner.run("op1", "att/a", child_program())
        runner.cleanup("op1", fence_scope="att/a")
    Runner(journal, volatile_executors(world)).recover()
    op = journal.load_operation("op1")
    assert op is not None
    if boundary in ("before-completed", "after-outcome:up", "after-apply:up"):
        assert op.state is OperationState.COMPLETED
        assert state(world)["objects"]["vlan10"]["alias"] == "dmn:op1:create"
    else:
        assert op.state is OperationState.UNDONE
        assert state(world) == INITIAL
    commits, snap = journal.commits, state(world)
    assert Runner(journal, volatile_executors(world)).recover() == []
    assert journal.commits == commits and state(world) == snap
