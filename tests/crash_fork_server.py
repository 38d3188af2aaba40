"""The crash fork server: one fresh interpreter, one forked child per crash step.

Why a server: forking the pytest process itself is unsafe (pyroute2 and RocksDB run helper
threads; a child forked while one holds a lock deadlocks), and starting an interpreter per
step made the crash matrices slow. This process imports its children up front but opens no
journal and no socket, so every forked child starts clean: it opens the journal (and its own
netlink sockets), runs one step and either exits or SIGKILLs itself at the requested
journal boundary.

Protocol: one JSON request per line on stdin; ``child`` names what the child does —
``journal`` (:mod:`tests.journal.crash_child`: test, builtin or kernel executors; writes
its report to ``out`` when it finishes), ``kernel`` (:mod:`tests.kernel.crash_child`:
real executors over namespace pins; appends each boundary name to ``out`` as it passes) or
``coordinator`` (:mod:`tests.coordinator.crash_child`: the node services against the lab API
server, killed at a runner or coordinator boundary).
The rest of the request is that child's. Reply per request: ``{"signal": n}`` when the
child was killed, else ``{"exit": code}``. :class:`CrashForkServer` is the test-side client;
:func:`crash_fork_server` gives a session's tests one shared server.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

Child = Callable[[dict[str, Any]], int]


def _children(names: list[str]) -> dict[str, Child]:
    """Import the named children (and through them the executors) once, before the first
    fork. Only those a session asks for: every module preloaded makes each fork dearer (the
    child's first collections touch, and so copy, every page of them: with the coordinator's
    modules too a fork, collect and exit took 159 ms here against 103 ms, and that multiplies
    under the kernel lab's emulation)."""
    children: dict[str, Child] = {}
    if "journal" in names or "kernel" in names:
        from tests.journal import crash_child as journal
        from tests.kernel import crash_child as kernel

        journal.preload()
        children |= {"journal": journal.child, "kernel": kernel.child}
    if "coordinator" in names:
        from tests.coordinator import crash_child as coordinator

        children["coordinator"] = coordinator.child
    return children


def main() -> None:
    children = _children(sys.argv[1:] or ["journal", "kernel"])
    sys.stdout.write(json.dumps({"ready": os.getpid()}) + "\n")
    sys.stdout.flush()
    for line in sys.stdin:
        req = json.loads(line)
        child = children[req["child"]]
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = child(req)
            except BaseException:
                traceback.print_exc(file=sys.stderr)
            finally:
                sys.stderr.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status):
            reply = {"signal": os.WTERMSIG(status)}
        else:
            reply = {"exit": os.WEXITSTATUS(status)}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


class CrashForkServer:
    """The server as a long-lived child process of the test session.

    Tests take one with :func:`crash_fork_server`, which hands every test of the session the
    same process (its start — a fresh interpreter importing the executors — cost about a
    quarter of the kernel lab's CPU when each matrix started its own). It keeps no state
    between requests: every child is forked from the same idle, freshly imported server.
    """

    def __init__(
        self,
        children: tuple[str, ...] = ("journal", "kernel"),
        capabilities: tuple[str, ...] | None = None,
    ) -> None:
        """``capabilities``: run the server (so every child) holding only these (names as
        ``CAP_NET_ADMIN`` less the prefix), as the unprivileged node agent's container does:
        ``setpriv`` (util-linux) limits the bounding set to them before the interpreter
        starts, so root's execve grants exactly those, none inheritable or ambient, and sets
        ``no_new_privs``."""
        self.children = children
        self.capabilities = capabilities
        self.shared = False
        self.busy = False
        self.ready = False
        argv = [sys.executable, "-m", "tests.crash_fork_server", *children]
        if capabilities is not None:
            keep = "".join(f",+{c.lower()}" for c in capabilities)
            argv = ["setpriv", "--inh-caps=-all", "--ambient-caps=-all",
                    f"--bounding-set=-all{keep}", "--no-new-privs", "--", *argv]  # fmt: skip
        self.proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def await_ready(self) -> None:
        """Wait for the interpreter's first line: until then the process may still be
        between fork and exec (the test's own cmdline and capabilities) or in ``setpriv``,
        so nothing read from ``/proc/<pid>`` before it describes the server."""
        if self.ready:
            return
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            raise AssertionError(f"crash fork server exited at start: {self.proc.returncode}")
        ready = json.loads(line)
        assert ready == {"ready": self.proc.pid}, ready
        self.ready = True

    def alive(self) -> bool:
        return self.proc.poll() is None and not self.busy

    def request(self, req: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.await_ready()
        self.busy = True  # stays set if the caller is interrupted before the reply
        self.proc.stdin.write(json.dumps(req) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "crash fork server died"
        reply: dict[str, Any] = json.loads(line)
        self.busy = False
        return reply

    def close(self) -> None:
        """End this test's use. A shared server lives on for the next test unless a request
        was cut off (a timeout, an interrupt): its reply could reach the next test, so it is
        stopped and the next test gets a new one."""
        if self.shared and self.alive():
            return
        key = (self.children, self.capabilities)
        if _SHARED.get(key) is self:
            del _SHARED[key]
        self.stop()

    def stop(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        if self.busy:
            self.proc.kill()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


_SHARED: dict[tuple[tuple[str, ...], tuple[str, ...] | None], CrashForkServer] = {}


def start_crash_fork_server(
    children: tuple[str, ...] = ("journal", "kernel"),
    capabilities: tuple[str, ...] | None = None,
) -> CrashForkServer:
    """The session's server for ``children`` (holding only ``capabilities``, if given),
    started now if it is not running, without waiting for it: a fixture that calls this
    before its own setup lets the server's imports (under the kernel lab's emulation, half a
    minute of one vCPU for the coordinator's) run beside that setup instead of inside the
    first test that kills."""
    key = (children, capabilities)
    server = _SHARED.get(key)
    if server is None or not server.alive():
        if server is not None:
            server.stop()
        server = CrashForkServer(children, capabilities)
        server.shared = True
        _SHARED[key] = server
    return server


def crash_fork_server(
    children: tuple[str, ...] = ("journal", "kernel"),
    capabilities: tuple[str, ...] | None = None,
) -> CrashForkServer:
    """The session's server for ``children`` (holding only ``capabilities``, if given),
    started on first use, ready when returned, and stopped at exit."""
    server = start_crash_fork_server(children, capabilities)
    server.await_ready()
    return server


@atexit.register
def _stop_shared() -> None:
    for server in list(_SHARED.values()):
        server.stop()
    _SHARED.clear()


if __name__ == "__main__":
    main()
