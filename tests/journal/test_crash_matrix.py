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
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dmn.interpreter.bound import BoundProgram
from tests.journal.programs import child_program, foreign_world, reset_program

pytestmark = pytest.mark.crash

ROOT = Path(__file__).resolve().parents[2]


class Server:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.journal.crash_server"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def call(self, req: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "crash server died"
        reply: dict[str, Any] = json.loads(line)
        return reply

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.close()


@dataclass
class Case:
    server: Server
    dir: Path
    program: BoundProgram
    initial: dict[str, Any]
    executors: str = "test"
    op: str = "op-1"
    scope: str = "att/node/boot/pod/sbx"

    def __post_init__(self) -> None:
        self.dir.mkdir(parents=True)
        self.world_path.write_text(json.dumps(self.initial))

    @property
    def world_path(self) -> Path:
        return self.dir / "world.json"

    def world(self) -> dict[str, Any]:
        """The reversible part of the world (irreversible traces, e.g. reset counters, are
        checked by the tests that expect them)."""
        data = json.loads(self.world_path.read_text())
        return {k: data[k] for k in ("objects", "attrs")}

    def resets(self) -> dict[str, int]:
        return dict(json.loads(self.world_path.read_text())["resets"])

    def step(
        self, action: str, crash_at: int | None = None, fail: dict[str, str] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        out = self.dir / "out.json"
        out.unlink(missing_ok=True)
        reply = self.server.call(
            {
                "action": action,
                "state_dir": str(self.dir / "state"),
                "world": str(self.world_path),
                "out": str(out),
                "op": self.op,
                "scope": self.scope,
                "program": self.program.to_json(),
                "crash_at": crash_at,
                "fail": fail or {},
                "executors": self.executors,
            }
        )
        report = json.loads(out.read_text()) if out.exists() else None
        return reply, report


def _op(dump: dict[str, Any], op_id: str) -> dict[str, Any] | None:
    return next((o for o in dump["operations"] if o["operationID"] == op_id), None)


class Matrix:
    """Runs the whole matrix for one program; ``tmp`` is a fresh directory per case."""

    def __init__(
        self,
        server: Server,
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
        reply, report = ref.step("cleanup")
        assert reply == {"exit": 0} and report is not None and report["state"] == "Undone"
        assert ref.world() == self.initial_world()
        self.cleanup_boundaries: list[str] = report["boundaries"]

    def initial_world(self) -> dict[str, Any]:
        return {k: copy.deepcopy(self.initial.get(k, {})) for k in ("objects", "attrs")}

    def case(self) -> Case:
        self.n += 1
        return Case(
            self.server, self.tmp / f"c{self.n}", self.program, self.initial, self.executors
        )

    def recover_and_check(self, case: Case, allow_completed: bool = True) -> str:
        reply, report = case.step("recover")
        assert reply == {"exit": 0} and report is not None, reply
        dump = report["dump"]
        assert dump["unfinished"] == []
        op = _op(dump, case.op)
        state = op["state"] if op is not None else "Absent"
        if state == "Completed":
            assert allow_completed
            assert all(e["state"] == "Applied" for e in op["effects"])
            for e, bound in zip(op["effects"], self.program.effects, strict=True):
                assert e["before"] is not None or bound.kind.endswith("/v1")
            assert case.world() == self.done
        else:
            assert state in ("Undone", "Absent"), (state, op)
            if op is not None:
                assert all(e["state"] in ("Undone", "Planned") for e in op["effects"]), op
            assert case.world() == self.initial_world()
        # recovery twice changes nothing
        snap = case.world()
        reply, report = case.step("recover")
        assert reply == {"exit": 0} and report is not None
        assert report["recovered"] == [] and report["commits"] == 0
        assert case.world() == snap
        return state

    def run_crashes(self) -> list[str]:
        states = []
        for k in range(len(self.run_boundaries)):
            case = self.case()
            reply, _ = case.step("run", crash_at=k)
            assert reply == {"signal": signal.SIGKILL}, (k, self.run_boundaries[k], reply)
            states.append(self.recover_and_check(case))
            # the coordinator retries the same operation: it completes (or replays)
            reply, report = case.step("run")
            assert reply == {"exit": 0} and report is not None
            assert report["state"] == "Completed" and case.world() == self.done
        return states

    def cleanup_crashes(self) -> None:
        for k in range(len(self.cleanup_boundaries)):
            case = self.case()
            reply, _ = case.step("run")
            assert reply == {"exit": 0}
            reply, _ = case.step("cleanup", crash_at=k)
            assert reply == {"signal": signal.SIGKILL}, (k, reply)
            assert self.recover_and_check(case, allow_completed=False) == "Undone"
            reply, report = case.step("run")  # the fence holds after recovery
            assert report is not None and report.get("refused") == "E_FENCED"
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


def _programs() -> list[tuple[str, BoundProgram, dict[str, Any]]]:
    return [
        ("child", child_program(), foreign_world()),
    ]


@pytest.mark.parametrize(
    ("name", "program", "initial"), _programs(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_crash_matrix(
    server: Server, tmp_path: Path, name: str, program: BoundProgram, initial: dict[str, Any]
) -> None:
    m = Matrix(server, tmp_path, program, initial)
    assert m.run_boundaries[0] == "before-intent" and m.run_boundaries[-1] == "before-completed"
    assert len(m.run_boundaries) == 3 + 3 * len(program.effects)
    states = m.run_crashes()
    assert states[0] == "Absent" and states[-1] == "Completed"
    m.cleanup_crashes()
    m.compensation_crashes(program.effects[-1].id)


def test_injected_failures_in_subprocess(server: Server, tmp_path: Path) -> None:
    m = Matrix(server, tmp_path, child_program(), foreign_world())
    # observe: postcondition false → compensated
    case = m.case()
    _, report = case.step("run", fail={"observe": "mtu=postcondition"})
    assert report is not None and report["state"] == "Undone"
    assert _op(report["dump"], case.op)["failure"]["code"] == "E_POSTCONDITION"
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
    server: Server, tmp_path: Path
) -> None:
    m = Matrix(server, tmp_path, reset_program(), foreign_world())
    k = m.run_boundaries.index("after-apply:reset")
    case = m.case()
    reply, _ = case.step("run", crash_at=k)
    assert reply == {"signal": signal.SIGKILL}
    _, report = case.step("recover")
    assert report is not None
    op = _op(report["dump"], case.op)
    assert op["state"] == "Quarantined"
    assert op["effects"][0]["state"] == "Quarantined" and "uncertain" in op["effects"][0]["note"]
    assert case.resets() == {"obj:pf0": 1}  # never re-applied
    _, report = case.step("recover")
    assert report is not None and report["commits"] == 0
    _, report = case.step("run")
    assert report is not None and report.get("refused") == "E_QUARANTINED"
    assert case.resets() == {"obj:pf0": 1}
