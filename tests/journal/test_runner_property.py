"""Property: for any program, any injected failure and any crash point, recovery converges.

Hypothesis draws a program of create/set effects (sets target created children or a
pre-existing host object), an optional failure (apply raises, observe raises, postcondition
false) and an optional crash boundary (the run stops dead there, as after SIGKILL; the
journal keeps what was committed, the world what was done). A fresh runner then recovers.
Invariants: nothing unfinished; Completed ⇒ the world equals a clean run's world; otherwise
the world equals the initial world; a second recovery commits nothing; cleanup of a
completed operation restores the initial world.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dmn.engine.bound import BoundEffect, BoundProgram, EffectOutputRef
from dmn.engine.journal import MemoryJournal, OperationState
from dmn.engine.runner import Runner
from tests.journal.programs import DEVICE, PARENT, foreign_world
from tests.journal.world import World, world_executors

pytestmark = pytest.mark.property


class Crash(BaseException):
    pass


@st.composite
def programs(draw: Any) -> BoundProgram:
    n = draw(st.integers(1, 6))
    effects: list[BoundEffect] = []
    created: list[str] = []
    for i in range(n):
        if not created or draw(st.booleans()):
            eid = f"c{i}"
            # sometimes the name of a foreign object: it must never be adopted or deleted
            name = draw(st.sampled_from([f"n{i}", f"n{i}", f"n{i}", "other"]))
            effects.append(
                BoundEffect(eid, eid, "test/create/v1", {"parent": (PARENT,)}, {"name": name})
            )
            created.append(eid)
        else:
            eid = f"s{i}"
            target = draw(st.sampled_from([*created, "host"]))
            port = (DEVICE,) if target == "host" else (EffectOutputRef(target, "interface"),)
            key = draw(st.sampled_from(["mtu", "up", "mode"]))
            effects.append(
                BoundEffect(
                    eid,
                    eid,
                    "test/set/v1",
                    {"interface": port},
                    {"key": key, "value": draw(st.integers(0, 3))},
                )
            )
    exports = {"interface": (EffectOutputRef(created[-1], "interface"),)}
    return BoundProgram("prop", "v1", "connect", "sha256:c", tuple(effects), exports)


def _world() -> World:
    return World(data=copy.deepcopy(foreign_world()))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    program=programs(),
    failure=st.sampled_from([None, "apply", "observe", "postcondition"]),
    failing_index=st.integers(0, 5),
    crash_at=st.one_of(st.none(), st.integers(0, 25)),
)
def test_recovery_converges(
    program: BoundProgram, failure: str | None, failing_index: int, crash_at: int | None
) -> None:
    reference = _world()
    completes = Runner(MemoryJournal(), world_executors(reference)).run("op", "s", program).ok
    done, initial = reference.snapshot(), _world().snapshot()
    if not completes:
        assert done == initial  # the clean run failed (foreign name) and undid itself

    world = _world()
    if failure is not None:
        target = program.effects[failing_index % len(program.effects)].id
        world.fail = (
            {"observe": f"{target}=postcondition"}
            if failure == "postcondition"
            else {failure: target}
        )
    seen: list[str] = []

    def hook(name: str) -> None:
        seen.append(name)
        if crash_at is not None and len(seen) - 1 == crash_at:
            raise Crash(name)

    journal = MemoryJournal()
    with contextlib.suppress(Crash):
        Runner(journal, world_executors(world), boundary=hook).run("op", "s", program)
    world.fail = {}
    Runner(journal, world_executors(world)).recover()
    assert journal.unfinished_operations() == []
    op = journal.load_operation("op")
    if op is None:
        assert world.snapshot() == initial
        return
    if op.state is OperationState.COMPLETED:
        assert completes and world.snapshot() == done
        commits = journal.commits
        assert Runner(journal, world_executors(world)).recover() == []
        assert journal.commits == commits
        assert Runner(journal, world_executors(world)).cleanup("op").state is OperationState.UNDONE
        assert world.snapshot() == initial
    else:
        assert op.state is OperationState.UNDONE, op
        assert world.snapshot() == initial
        commits = journal.commits
        assert Runner(journal, world_executors(world)).recover() == []
        assert journal.commits == commits
