"""Crash matrix: SIGKILL at every journal boundary, recover in a fresh process, twice.

For each program: a reference run lists the boundaries and the completed world. Then, for
every boundary index k, a fresh journal + world runs the program in a forked child that is
SIGKILLed at boundary k; a second fresh child recovers; a third recovers again. Invariants:

* no operation is left unfinished;
* Completed ⇒ every effect Applied with its outputs recorded, and the world equals the
  reference completed world exactly (nothing foreign touched);
* Undone (or never started) ⇒ the world equals the initial world exactly;
* the second recovery commits nothing and changes nothing;
* a coordinator retry of the same operation afterwards completes to the reference world.

The same is done for cleanup (SIGKILL at every undo boundary) and for compensation after an
injected apply failure; injected observe and undo failures are checked too.
"""

from __future__ import annotations

import copy
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest

from dmn.engine.bound import BoundProgram
from dmn.opcodes.executor import EffectContext, RecoveryObservation
from tests.crash_fork_server import CrashForkServer
from tests.journal.builtin_calls import FOREIGN_WORLD, SCENARIOS, bind_scenario, covered_effects
from tests.journal.crashkit import Case, op_of
from tests.journal.generic import builtin_executors
from tests.journal.programs import child_program, foreign_world, reset_program
from tests.journal.world import World

pytestmark = pytest.mark.crash


class Matrix:
    """Runs the whole matrix for one program; ``tmp`` is a fresh directory per case."""

    def __init__(
        self,
        server: CrashForkServer,
        tmp: Path,
        program: BoundProgram,
        initial: dict[str, Any],
        executors: str = "test",
    ) -> None:
        self.server, self.tmp, self.program = server, tmp, program
        self.initial, self.executors = initial, executors
        self.n = 0
        ref = self.case()
        reply, report = ref.step("run")
        assert reply == {"exit": 0} and report is not None, reply
        assert report["state"] == "Completed", report["dump"]
        self.run_boundaries: list[str] = report["boundaries"]
        self.done = ref.world()
        self.completed_snapshot = self.tmp / "completed"
        shutil.copytree(ref.dir, self.completed_snapshot)
        reply, report = ref.step("cleanup")
        assert reply == {"exit": 0} and report is not None and report["state"] == "Undone"
        assert ref.world() == self.initial_world()
        self.cleanup_boundaries: list[str] = report["boundaries"]

    def initial_world(self) -> dict[str, Any]:
        return {k: copy.deepcopy(self.initial.get(k, {})) for k in ("objects", "attrs")}

    def case(self, completed: bool = False) -> Case:
        """A fresh journal + world; ``completed``: a copy of the reference completed run."""
        self.n += 1
        path = self.tmp / f"c{self.n}"
        if completed:
            shutil.copytree(self.completed_snapshot, path)
            return Case(self.server, path, self.program, self.initial, self.executors, fresh=False)
        return Case(self.server, path, self.program, self.initial, self.executors)

    def quarantinable(self) -> set[str]:
        """Effects whose declared recovery after an uncertain outcome is Quarantine."""
        return {e.id for e in self.program.effects if e.recovery == "Quarantine"}

    def without(self, world: dict[str, Any], op: dict[str, Any]) -> dict[str, Any]:
        """The world minus what quarantined effects may have left (kept for inspection)."""
        world = copy.deepcopy(world)
        for e in op["effects"]:
            if e["state"] != "Quarantined":
                continue
            world["objects"].pop(f"dmn:{op['operationID']}:{e['id']}", None)
            for attr in [a for a in world["attrs"] if a.endswith("." + e["kind"])]:
                world["attrs"].pop(attr)
        return world

    def recover_and_check(self, case: Case, allow_completed: bool = True) -> str:
        reply, report = case.step("recover")
        assert reply == {"exit": 0} and report is not None, reply
        dump = report["dump"]
        assert dump["unfinished"] == []
        op = op_of(dump, case.op)
        state = op["state"] if op is not None else "Absent"
        if state == "Completed":
            assert allow_completed
            assert all(e["state"] == "Applied" and e["before"] is not None for e in op["effects"])
            assert sorted(op["result"]) == sorted(self.program.exports)
            assert case.world() == self.done
        elif state == "Quarantined":
            quarantined = {e["id"] for e in op["effects"] if e["state"] == "Quarantined"}
            assert quarantined and quarantined <= self.quarantinable(), op
            assert all(e["note"] for e in op["effects"] if e["state"] == "Quarantined")
            others = [e for e in op["effects"] if e["id"] not in quarantined]
            assert all(e["state"] in ("Undone", "Planned") for e in others), op
            assert self.without(case.world(), op) == self.without(self.initial_world(), op)
        else:
            assert state in ("Undone", "Absent"), (state, op)
            if op is not None:
                assert all(e["state"] in ("Undone", "Planned") for e in op["effects"]), op
            assert case.world() == self.initial_world()
        return state

    def recover_again_then_retry(self, case: Case, state: str) -> dict[str, Any]:
        """A second recovery (fresh process) changes nothing; then the coordinator retries."""
        snap = case.world()
        reply, report = case.step("recover+run")
        assert reply == {"exit": 0} and report is not None, reply
        assert report["recovered"] == [] and report["recover_commits"] == 0
        after = report["world_after_recover"]
        assert {k: after[k] for k in ("objects", "attrs")} == snap
        return report

    def run_crashes(self) -> list[str]:
        states = []
        for k in range(len(self.run_boundaries)):
            case = self.case()
            reply, _ = case.step("run", crash_at=k)
            assert reply == {"signal": signal.SIGKILL}, (k, self.run_boundaries[k], reply)
            state = self.recover_and_check(case)
            states.append(state)
            # the retry completes (or replays); a quarantined operation is refused and
            # nothing is applied again
            snap = case.world()
            report = self.recover_again_then_retry(case, state)
            if state == "Quarantined":
                assert report.get("refused") == "E_QUARANTINED" and case.world() == snap
            else:
                assert report["state"] == "Completed" and case.world() == self.done
        return states

    def cleanup_crashes(self) -> None:
        for k in range(len(self.cleanup_boundaries)):
            case = self.case(completed=True)
            reply, _ = case.step("cleanup", crash_at=k)
            assert reply == {"signal": signal.SIGKILL}, (k, reply)
            assert self.recover_and_check(case, allow_completed=False) == "Undone"
            report = self.recover_again_then_retry(case, "Undone")
            assert report.get("refused") == "E_FENCED"  # the fence holds after recovery
            assert case.world() == self.initial_world()

    def compensation_crashes(self, failing_effect: str) -> None:
        probe = self.case()
        reply, report = probe.step("run", fail={"apply": failing_effect})
        assert reply == {"exit": 0} and report is not None and report["state"] == "Undone"
        assert probe.world() == self.initial_world()
        for k, name in enumerate(report["boundaries"]):
            if not name.startswith("after-undo"):
                continue
            case = self.case()
            reply, _ = case.step("run", crash_at=k, fail={"apply": failing_effect})
            assert reply == {"signal": signal.SIGKILL}
            assert self.recover_and_check(case, allow_completed=False) == "Undone"
            self.recover_again_then_retry(case, "Undone")

    def injected_failures(self, observe_effect: str, undo_effect: str) -> None:
        # observe: postconditions false → the effect is undone with the rest
        case = self.case()
        _, report = case.step("run", fail={"observe": f"{observe_effect}=postcondition"})
        assert report is not None and report["state"] == "Undone"
        failure = op_of(report["dump"], case.op)["failure"]
        assert (failure["code"], failure["effect"]) == ("E_POSTCONDITION", observe_effect)
        assert case.world() == self.initial_world()
        # undo fails during cleanup → that effect Quarantined with a record, the rest undone,
        # recovery leaves it alone
        case = self.case(completed=True)
        _, report = case.step("cleanup", fail={"undo": undo_effect})
        assert report is not None and report["state"] == "Quarantined"
        op = op_of(report["dump"], case.op)
        assert [q["id"] for q in report["dump"]["quarantined"]] == [undo_effect]
        assert all(e["state"] == "Undone" for e in op["effects"] if e["id"] != undo_effect)
        assert self.without(case.world(), op) == self.without(self.initial_world(), op)
        snap = case.world()
        _, report = case.step("recover")
        assert report is not None and report["recovered"] == [] and report["commits"] == 0
        assert case.world() == snap


def _programs() -> list[tuple[str, BoundProgram, dict[str, Any]]]:
    return [
        ("child", child_program(), foreign_world()),
    ]


@pytest.mark.parametrize(
    ("name", "program", "initial"), _programs(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_crash_matrix(
    server: CrashForkServer,
    crash_dir: Path,
    name: str,
    program: BoundProgram,
    initial: dict[str, Any],
) -> None:
    m = Matrix(server, crash_dir, program, initial)
    assert m.run_boundaries[0] == "before-intent" and m.run_boundaries[-2:] == [
        "before-completed",
        "after-completed",
    ]
    assert len(m.run_boundaries) == 4 + 3 * len(program.effects)
    assert m.cleanup_boundaries[-1] == "after-compensated"
    states = m.run_crashes()
    assert states[0] == "Absent" and states[-1] == "Completed"
    m.cleanup_crashes()
    m.compensation_crashes(program.effects[-1].id)


@pytest.mark.parametrize("label", [s[0] for s in SCENARIOS])
def test_crash_matrix_builtin(server: CrashForkServer, crash_dir: Path, label: str) -> None:
    """Every builtin hook program, bound by the real binder, under the real opcode specs."""
    program = bind_scenario(label)
    assert isinstance(program, BoundProgram), f"does not bind: {program}"
    m = Matrix(server, crash_dir, program, FOREIGN_WORLD, executors="builtin")
    assert len(m.run_boundaries) == 4 + 3 * len(program.effects)
    assert len(m.cleanup_boundaries) == 2 * len(program.effects) + 1
    states = m.run_crashes()
    assert states[0] == "Absent" and states[-1] == "Completed"
    m.cleanup_crashes()
    failing = [e.id for e in program.effects if e.id not in m.quarantinable()]
    if failing:
        m.compensation_crashes(failing[-1])
        m.injected_failures(failing[-1], program.effects[0].id)


def test_crash_matrix_covers_every_builtin_effect_line() -> None:
    from dmn.interpreter.loader import load_builtin_plugins

    covered = covered_effects()
    for name, plugin in load_builtin_plugins().items():
        for hook in ("prepare", "connect"):
            program = plugin.program(hook)
            if program is None:
                continue
            declared = {e.id for e in program.body.effects}
            missing = declared - covered.get(f"{name}/{hook}", set())
            assert not missing, f"{name}/{hook}: effects {sorted(missing)} bound by no scenario"


def test_injected_failures_in_subprocess(server: CrashForkServer, crash_dir: Path) -> None:
    m = Matrix(server, crash_dir, child_program(), foreign_world())
    # observe: postcondition false → compensated
    case = m.case()
    _, report = case.step("run", fail={"observe": "mtu=postcondition"})
    assert report is not None and report["state"] == "Undone"
    assert op_of(report["dump"], case.op)["failure"]["code"] == "E_POSTCONDITION"
    assert case.world() == m.initial_world()
    # undo fails during cleanup → quarantined, explicit record, recovery leaves it alone
    case = m.case()
    case.step("run")
    _, report = case.step("cleanup", fail={"undo": "create"})
    assert report is not None and report["state"] == "Quarantined"
    quarantined = report["dump"]["quarantined"]
    assert [q["id"] for q in quarantined] == ["create"] and quarantined[0]["note"]
    snap = case.world()
    assert snap["objects"]["vlan10"]["alias"] == "dmn:op-1:create"  # kept for inspection
    _, report = case.step("recover")
    assert report is not None and report["recovered"] == [] and report["commits"] == 0
    assert case.world() == snap


def test_irreversible_uncertain_after_sigkill_is_quarantined(
    server: CrashForkServer, crash_dir: Path
) -> None:
    m = Matrix(server, crash_dir, reset_program(), foreign_world())
    k = m.run_boundaries.index("after-apply:reset")
    case = m.case()
    reply, _ = case.step("run", crash_at=k)
    assert reply == {"signal": signal.SIGKILL}
    _, report = case.step("recover")
    assert report is not None
    op = op_of(report["dump"], case.op)
    assert op["state"] == "Quarantined"
    assert op["effects"][0]["state"] == "Quarantined" and "uncertain" in op["effects"][0]["note"]
    assert case.resets() == {"obj:pf0": 1}  # never re-applied
    _, report = case.step("recover")
    assert report is not None and report["commits"] == 0
    _, report = case.step("run")
    assert report is not None and report.get("refused") == "E_QUARANTINED"
    assert case.resets() == {"obj:pf0": 1}


def test_the_generic_executor_answers_uncertain_for_irreversible_specs() -> None:
    """The runner-contract executor must not claim to read back what no real executor can:
    an Irreversible spec recovers as Uncertain, a reversible one from its marker."""
    world = World()
    executors = builtin_executors(world)
    ctx = EffectContext("op", "e", {}, {}, None)
    assert executors["pci/function-reset/v1"].recover(ctx, {}) is RecoveryObservation.UNCERTAIN
    assert executors["linux/link-configure/v1"].recover(ctx, {}) is RecoveryObservation.NOT_APPLIED
