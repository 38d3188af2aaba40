"""Crash matrix with the real runner, real RocksDB journal and the real pyroute2 executors.

Builtin connect programs (host-cni kernel: move + configure a veth root; macvlan-cni:
create, move, configure a child of a veth parent), bound by the real binder, run in scratch
namespaces. A forked child is SIGKILLed at each journal boundary (and at each boundary of a
cleanup); a fresh child recovers; another recovers again and retries. The host and sandbox
namespaces must then equal the baseline (Undone) or the completed reference (Completed),
compared by name, alias, MTU, MAC (except kernel-random MACs of created children), state,
kind and addresses — nothing foreign touched, nothing left behind.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dmn.engine.bound import BoundProgram
from dmn.engine.journal import MemoryJournal
from dmn.vocabulary.handles import Scope
from dmn.vocabulary.terms import Access, ScopeKind

pytestmark = [pytest.mark.crash, pytest.mark.netns]

if os.geteuid() != 0:  # pragma: no cover
    pytest.skip("needs root for network namespaces", allow_module_level=True)

pyroute2 = pytest.importorskip("pyroute2")

from dmn.engine.binder import Call, bind_program  # noqa: E402
from dmn.engine.runner import Runner  # noqa: E402
from dmn.host.netns import NamespaceRef  # noqa: E402
from dmn.interpreter.loader import load_builtin_plugins, load_plugin_dir  # noqa: E402
from tests.crash_fork_server import CrashForkServer  # noqa: E402
from tests.journal.crashkit import Case, op_of  # noqa: E402
from tests.kernel.scratch import netns_path  # noqa: E402
from tests.kernel.world import EXECUTORS, World, host_handle, world  # noqa: E402

CREATED_KINDS = {"macvlan", "ipvlan", "vlan", "bond"}
HOST_CHILD_PLUGIN = Path(__file__).parent / "plugins/macvlan-host-child/v1"


def _norm(snap: dict[str, tuple[Any, ...]]) -> dict[str, tuple[Any, ...]]:
    """Drop the MAC of links the kernel created with a random address."""
    out = {}
    for name, (alias, mtu, mac, up, kind, addrs) in snap.items():
        out[name] = (alias, mtu, None if kind in CREATED_KINDS else mac, up, kind, addrs)
    return out


class KernelMatrix:
    def __init__(
        self, server: CrashForkServer, tmp: Path, w: World, sandbox: str, program: BoundProgram
    ):
        self.server, self.tmp, self.w, self.sandbox = server, tmp, w, sandbox
        self.program = program
        self.env = {"host": netns_path(w.host), "sandbox": netns_path(sandbox)}
        self.n = 0
        self.baseline = self.snapshot()
        ref = self.case()
        reply, report = ref.step("run")
        assert reply == {"exit": 0} and report is not None, reply
        assert report["state"] == "Completed", report["dump"]["operations"]
        self.run_boundaries: list[str] = report["boundaries"]
        self.done = self.snapshot()
        assert self.done != self.baseline
        reply, report = ref.step("cleanup")
        assert report is not None and report["state"] == "Undone", report
        assert self.snapshot() == self.baseline
        self.cleanup_boundaries: list[str] = report["boundaries"]

    def snapshot(self) -> dict[str, Any]:
        return {
            "host": _norm(self.w.snapshot(self.w.host)),
            "sandbox": _norm(self.w.snapshot(self.sandbox)),
        }

    def case(self) -> Case:
        self.n += 1
        world = {"objects": {}, "attrs": {}, "resets": {}}
        c = Case(self.server, self.tmp / f"k{self.n}", self.program, world, "kernel", env=self.env)
        (c.dir / "world.json").write_text(json.dumps(world))
        return c

    def recover_twice(self, case: Case, allow_completed: bool = True) -> str:
        reply, report = case.step("recover")
        assert reply == {"exit": 0} and report is not None, reply
        assert report["dump"]["unfinished"] == []
        op = op_of(report["dump"], case.op)
        state = op["state"] if op is not None else "Absent"
        snap = self.snapshot()
        if state == "Completed":
            assert allow_completed
            assert snap == self.done
        else:
            assert state in ("Undone", "Absent"), op
            assert snap == self.baseline
        reply, report = case.step("recover")
        assert report is not None and report["recovered"] == [] and report["recover_commits"] == 0
        assert self.snapshot() == snap
        return state

    def run_crashes(self) -> list[str]:
        states = []
        for k in range(len(self.run_boundaries)):
            case = self.case()
            reply, _ = case.step("run", crash_at=k)
            assert reply == {"signal": signal.SIGKILL}, (k, reply)
            states.append(self.recover_twice(case))
            _, report = case.step("run")  # the coordinator's retry completes
            assert report is not None and report["state"] == "Completed"
            assert self.snapshot() == self.done
            _, report = case.step("cleanup")  # and removal restores the host exactly
            assert report is not None and report["state"] == "Undone"
            assert self.snapshot() == self.baseline
        return states

    def cleanup_crashes(self) -> None:
        for k in range(len(self.cleanup_boundaries)):
            case = self.case()
            _, report = case.step("run")
            assert report is not None and report["state"] == "Completed"
            reply, _ = case.step("cleanup", crash_at=k)
            assert reply == {"signal": signal.SIGKILL}, (k, reply)
            assert self.recover_twice(case, allow_completed=False) == "Undone"


@pytest.fixture
def kernel_world() -> Iterator[tuple[World, str]]:
    with world() as w:
        yield w, w.sandbox()


def _sandbox_scope(sandbox: str) -> Scope:
    return Scope(ScopeKind.SANDBOX, NamespaceRef.at(netns_path(sandbox)).identity)


def test_host_cni_connect_kernel_crash_matrix(
    server: CrashForkServer, crash_dir: Path, kernel_world: tuple[World, str]
) -> None:
    w, sandbox = kernel_world
    root, _peer = w.veth(w.host, mtu=1400)
    handle = host_handle(w.ipr(w.host), root, Access.EXCLUSIVE_CONFIGURE)
    call = Call(
        config={"mode": "kernel", "ifName": "net1", "mtu": 1300, "up": True},
        operation_id="op-1",
        prepared={"interface": (handle,)},
        sandbox=_sandbox_scope(sandbox),
    )
    program = bind_program(load_builtin_plugins()["host-cni"], "connect", call)
    assert isinstance(program, BoundProgram), program
    m = KernelMatrix(server, crash_dir, w, sandbox, program)
    assert "net1" in m.done["sandbox"] and root not in m.done["host"]
    states = m.run_crashes()
    assert states[0] == "Absent" and states[-1] == "Completed" and "Undone" in states
    m.cleanup_crashes()


def _macvlan_connect(w: World, sandbox: str, plugin: Any) -> BoundProgram:
    """``plugin``'s connect program over a share of a veth parent its prepare held."""
    parent, _peer = w.veth(w.host)
    config = {"ifName": "net1", "mtu": 1500, "up": True}
    handle = host_handle(w.ipr(w.host), parent, Access.CREATE_CHILD)
    prepare = bind_program(
        plugin,
        "prepare",
        Call(config=config, operation_id="prep-1", allocation={"parent": (handle,)}),
    )
    assert isinstance(prepare, BoundProgram), prepare
    prepared = Runner(MemoryJournal(), EXECUTORS, env=w.env(sandbox)).run(
        "prep-1", "prep/claim-1/fp", prepare
    )
    assert prepared.ok, prepared.failure
    call = Call(
        config=config,
        operation_id="op-1",
        prepared=dict(prepared.exports),
        sandbox=_sandbox_scope(sandbox),
    )
    program = bind_program(plugin, "connect", call)
    assert isinstance(program, BoundProgram), program
    return program


def test_macvlan_connect_crash_matrix(
    server: CrashForkServer, crash_dir: Path, kernel_world: tuple[World, str]
) -> None:
    w, sandbox = kernel_world
    program = _macvlan_connect(w, sandbox, load_builtin_plugins()["macvlan-cni"])
    m = KernelMatrix(server, crash_dir, w, sandbox, program)
    assert m.done["sandbox"]["net1"][4] == "macvlan"
    states = m.run_crashes()
    assert states[0] == "Absent" and states[-1] == "Completed" and "Undone" in states
    m.cleanup_crashes()


def test_v1_host_child_macvlan_crash_matrix(
    server: CrashForkServer, crash_dir: Path, kernel_world: tuple[World, str]
) -> None:
    """The v1 host-child opcodes no builtin program uses (create-macvlan/v1 on the host,
    link-move/v1 into the sandbox, link-configure/v1), through a test plugin, with SIGKILL at
    every boundary of the run and of its cleanup: the crash window between the create and
    the move (a child in the host) and inside the move are recovered with nothing left."""
    w, sandbox = kernel_world
    plugin, diagnostics = load_plugin_dir(HOST_CHILD_PLUGIN)
    assert plugin is not None, diagnostics
    program = _macvlan_connect(w, sandbox, plugin)
    assert [e.kind for e in program.effects] == [
        "linux/create-macvlan/v1",
        "linux/link-move/v1",
        "linux/link-configure/v1",
    ]
    m = KernelMatrix(server, crash_dir, w, sandbox, program)
    assert m.done["sandbox"]["net1"][4] == "macvlan"
    states = m.run_crashes()
    assert states[0] == "Absent" and states[-1] == "Completed" and "Undone" in states
    m.cleanup_crashes()
