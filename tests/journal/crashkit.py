"""Shared pieces of the crash tests: the fork-server fixture, one crash case, fixtures."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from dmn.engine.bound import BoundProgram
from tests.crash_fork_server import CrashForkServer, crash_fork_server


@pytest.fixture(scope="session")
def server() -> Iterator[CrashForkServer]:
    s = crash_fork_server()
    yield s
    s.close()


@pytest.fixture
def crash_dir(tmp_path: Path) -> Iterator[Path]:
    """Where the matrix keeps its journals and worlds: tmpfs when available.

    SIGKILL leaves the page cache intact, so the crash semantics under test do not depend
    on the disk; fdatasync durability is proven separately (test_store's strace test).
    tmpfs keeps the hundreds of journal opens of the matrix fast.
    """
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        path = Path(tempfile.mkdtemp(prefix="dmn-crash-", dir=shm))
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)
    else:
        yield tmp_path


@dataclass
class Case:
    server: CrashForkServer
    dir: Path
    program: BoundProgram
    initial: dict[str, Any]
    executors: str = "test"
    fresh: bool = True
    op: str = "op-1"
    scope: str = "att/node/boot/pod/sbx"
    env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.fresh:
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
        reply = self.server.request(
            {
                "child": "journal",
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
                "env": self.env,
            }
        )
        report = json.loads(out.read_text()) if out.exists() else None
        return reply, report


def op_of(dump: dict[str, Any], op_id: str) -> dict[str, Any] | None:
    return next((o for o in dump["operations"] if o["operationID"] == op_id), None)
