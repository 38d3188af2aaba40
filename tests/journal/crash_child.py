"""The crash matrix's step, run in a child of :mod:`tests.crash_fork_server` (``"child":
"journal"``): open the store, run one step, and either exit or be SIGKILLed by the runner's
boundary hook at the requested boundary index; the child's report goes to ``out``.

Request: ``{"action": "run"|"cleanup"|"recover"|"recover+run", "state_dir", "world",
"out", "op", "scope",
"program" (BoundProgram JSON, for run), "crash_at" (boundary index or null),
"fail" (injections), "executors": "test"|"builtin"|"kernel", "env" (kernel: host and
sandbox netns paths)}``.
Reply: ``{"exit": code}`` or ``{"signal": n}``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path
from typing import Any

from dmn.agent.journal.store import JournalStore
from dmn.engine.bound import BoundProgram
from dmn.engine.runner import Runner, RunRefused
from tests.journal.world import World, world_executors


def _executors(kind: str, world: World) -> dict[str, Any]:
    if kind == "builtin":
        from tests.journal.generic import builtin_executors

        return builtin_executors(world)
    if kind == "kernel":
        from dmn.opcodes.executor_table import default_executors

        return default_executors()
    return world_executors(world)


def _env(spec: dict[str, str] | None) -> Any:
    """The real executors' environment: host and sandbox namespaces by path (kernel only)."""
    if not spec:
        return None
    from dmn.host.netns import LinkEnvironment, NamespaceRef

    sandbox = NamespaceRef.at(spec["sandbox"])
    return LinkEnvironment(
        host=NamespaceRef.at(spec["host"]), sandbox=sandbox, pins=lambda: (sandbox,)
    )


def child(req: dict[str, Any]) -> int:
    boundaries: list[str] = []
    crash_at = req.get("crash_at")

    def hook(name: str) -> None:
        boundaries.append(name)
        if crash_at is not None and len(boundaries) - 1 == crash_at:
            os.kill(os.getpid(), signal.SIGKILL)

    world = World.load(Path(req["world"]))
    world.fail = dict(req.get("fail") or {})
    store = JournalStore.open(req["state_dir"])
    env = _env(req.get("env"))
    runner = Runner(store, _executors(req.get("executors", "test"), world), env=env, boundary=hook)
    report: dict[str, Any] = {}
    base = store.commits
    try:
        if req["action"] == "run":
            program = BoundProgram.from_json(req["program"])
            result = runner.run(req["op"], req["scope"], program)
            report["state"] = result.state.value
        elif req["action"] == "cleanup":
            result = runner.cleanup(req["op"], fence_scope=req["scope"])
            report["state"] = result.state.value
        else:  # "recover" or "recover+run": a second recovery, then the coordinator's retry
            report["recovered"] = [r.operation_id for r in runner.recover()]
            report["recover_commits"] = store.commits - base
            if req["action"] == "recover+run":
                report["world_after_recover"] = World.load(Path(req["world"])).snapshot()
                program = BoundProgram.from_json(req["program"])
                report["state"] = runner.run(req["op"], req["scope"], program).state.value
    except RunRefused as exc:
        report["refused"] = exc.code.value
    report["boundaries"] = boundaries
    report["commits"] = store.commits - base
    report["dump"] = store.dump()
    store.close()
    if env is not None:
        env.close()
    Path(req["out"]).write_text(json.dumps(report))
    return 0


def preload() -> None:
    """Import every executor family once, before the first fork.

    Importing pyroute2 and the opcode registry costs ~0.4 s; paid in every forked child it
    dominated the kernel matrix. Imports start no threads and open no sockets, so forking
    afterwards is safe, and each child still opens the journal and namespaces itself.
    """
    from tests.journal.generic import builtin_executors

    builtin_executors(World())
    with contextlib.suppress(ImportError):  # no pyroute2: the kernel matrix is skipped
        _executors("kernel", World())
