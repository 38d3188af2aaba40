"""Run the upstream-lab ``e2e`` tests in a second pytest process beside the rest of the session.

The e2e tests spend most of their time waiting on real components (kube-apiserver, the
scheduler, kubelet, containerd: ~450 s of a ~1300 s host session, little of it CPU), and the
other host tests never touch the upstream lab. When one session selects both, this plugin

1. moves the ``e2e`` items, and the :data:`FOLLOWERS` (``fresh_machine`` and ``image``: each
   works in a root filesystem of its own), to the end and, as soon as collection finishes,
   starts ``python -m pytest <their node ids>`` in a new process group for each of the two
   groups, with their output in a run folder under :data:`RUNS_ROOT` (the last
   :data:`KEEP_RUNS` are kept): the e2e process, and the followers' process beside it (the
   e2e process is the critical path and mostly waits on the lab's components; the followers
   took ~42 s of it at its end, mostly CPU of their own);
2. never runs those items in this process: at the first one of a group it waits for that
   group's process, then replays its reports (:mod:`tests.report_stream`) into this session,
   so the terminal and ``--junitxml`` show every outcome as usual; an item a process never
   finished is failed with the tail of its output;
3. prints an "e2e beside" summary: how many tests, each process's wall time, and how long
   this session waited for it at the end.

The upstream lab already works beside other test runs on one machine (it compares only host
state a lab could have made, and labs of concurrent runs take turns through a lock; see
``tests/e2e/conftest.py``). One machine-wide directory both sides may create is created
here first: ``/run/netns`` (the host tests' namespaces are mounted there and the lab's
``down`` removes the fixed paths it found absent).

Once they are started, this process lowers its own CPU priority, and the followers', by
``DMN_E2E_BESIDE_NICE`` (a nice increment, default 5; 0 leaves them alone): what this
process starts afterwards inherits it (the kernel lab's VM, the embedded labs). The e2e
process keeps its priority, and so do the lab components it starts. Why: the e2e tests
mostly wait for those components, which need CPU in short bursts; on the two shared cores
beside this process's tests and the VM's emulation they waited for the CPU instead (the
helm module took 357 s in a warm CI run and 172 s alone, 0.57 core on average). The work
of the others is throughput: it gets the same CPU, a little later.

``DMN_E2E_BESIDE=0`` keeps the e2e tests (and the followers) in this process, in the order
pytest gives. A session that selected no e2e test, or no other host test, runs them
in-process too.
``DMN_E2E_BESIDE_TIMEOUT`` (s, default 3000) bounds the second process; at its end, or when
this session ends first, the process is interrupted (SIGINT: its fixtures bring the lab
down) and killed 180 s later.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.kernel_lab.guest import GUEST_ENV
from tests.report_stream import REPORTS, ReportStream, read_reports, replay

MARKER = "e2e"
#: markers of tests that leave this process too, for a process of their own beside the e2e one
FOLLOWERS = ("fresh_machine", "image")
SWITCH_ENV = "DMN_E2E_BESIDE"
RUN_ENV = "DMN_E2E_BESIDE_RUN"
TIMEOUT_ENV = "DMN_E2E_BESIDE_TIMEOUT"
NICE_ENV = "DMN_E2E_BESIDE_NICE"
RUNS_ROOT = Path("/tmp/dmn-e2e-beside")
KEEP_RUNS = 3
INTERRUPT_GRACE_S = 180.0
NETNS_DIR = Path("/run/netns")
OUTPUT = "output.log"


def _is_e2e(item: pytest.Item) -> bool:
    return item.get_closest_marker(MARKER) is not None


def _is_beside(item: pytest.Item) -> bool:
    return _is_e2e(item) or any(item.get_closest_marker(m) is not None for m in FOLLOWERS)


def _timeout() -> float:
    try:
        return float(os.environ.get(TIMEOUT_ENV, "3000"))
    except ValueError:
        return 3000.0


def _nice() -> int:
    try:
        return max(0, int(os.environ.get(NICE_ENV, "5")))
    except ValueError:
        return 5


def _second_process() -> bool:
    return bool(os.environ.get(RUN_ENV))


def _enabled() -> bool:
    return (
        os.environ.get(SWITCH_ENV, "1") != "0"
        and not _second_process()
        and not os.environ.get(GUEST_ENV)
    )


@dataclass
class BesideRun:
    """One process beside this session (``name``: its folder in the session's run folder)
    and what it reported."""

    name: str
    nodeids: list[str]
    selected: frozenset[str] = frozenset()
    run_dir: Path | None = None
    process: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    started_wall: float = 0.0
    wall_s: float | None = None
    waited_s: float = 0.0
    timed_out: bool = False
    reports: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    collected: bool = False

    def start(self, session_dir: Path) -> None:
        self.run_dir = session_dir / self.name
        self.run_dir.mkdir()
        # PYTEST_ADDOPTS may name this session's --junitxml: the second process must not
        # write over it (its reports reach that file through this session)
        env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
        env[RUN_ENV] = str(self.run_dir)
        argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", "-rA",
                *self.nodeids]  # fmt: skip
        with open(self.run_dir / OUTPUT, "wb") as out:
            self.process = subprocess.Popen(
                argv,
                cwd=Path(__file__).resolve().parent.parent,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.started = time.monotonic()
        self.started_wall = time.time()

    def _wait(self, timeout: float) -> bool:
        assert self.process is not None
        try:
            self.process.wait(timeout=max(timeout, 0.0))
            return True
        except subprocess.TimeoutExpired:
            return False

    def stop(self) -> None:
        """Interrupt a still-running second process (its fixtures bring the lab down), then
        kill its process group."""
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGINT)
        if not self._wait(INTERRUPT_GRACE_S):
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def collect(self) -> None:
        """Wait for the second process once and load every report it streamed."""
        if self.collected or self.process is None or self.run_dir is None:
            return
        self.collected = True
        t0 = time.monotonic()
        remaining = _timeout() - (t0 - self.started)
        if not self._wait(remaining):
            self.timed_out = True
            self.stop()
        self.waited_s = time.monotonic() - t0
        # the second process usually ended long before this session came to wait for it:
        # its wall time ends with the last write to its output
        try:
            ended = (self.run_dir / OUTPUT).stat().st_mtime
            self.wall_s = ended - self.started_wall
        except OSError:
            self.wall_s = time.monotonic() - self.started
        self.reports = read_reports(self.run_dir / REPORTS)

    def output_tail(self, lines: int = 60) -> str:
        if self.run_dir is None:
            return ""
        try:
            text = (self.run_dir / OUTPUT).read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def failure_text(self, nodeid: str) -> str:
        if self.timed_out:
            why = f"the {self.name} process was stopped after {_timeout():.0f} s ({TIMEOUT_ENV})"
        else:
            code = self.process.returncode if self.process else None
            why = f"the {self.name} process exited {code} without finishing this test"
        where = f"\noutput: {self.run_dir / OUTPUT}" if self.run_dir else ""
        return f"e2e beside: {why} ({nodeid}){where}\n--- its output ---\n{self.output_tail()}"


_RUN_KEY = pytest.StashKey[list[BesideRun]]()
_SELECTED_KEY = pytest.StashKey[dict[str, list[str]]]()


def _session_dir() -> Path:
    """A new run folder for this session's processes; older ones beyond :data:`KEEP_RUNS`
    removed. ``/run/netns`` made first (module docstring)."""
    RUNS_ROOT.mkdir(parents=True, exist_ok=True)
    for old in sorted(RUNS_ROOT.iterdir())[:-KEEP_RUNS]:
        shutil.rmtree(old, ignore_errors=True)
    path = RUNS_ROOT / f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
    path.mkdir()
    NETNS_DIR.mkdir(parents=True, exist_ok=True)
    return path


def pytest_configure(config: pytest.Config) -> None:
    run_dir = os.environ.get(RUN_ENV)
    if run_dir:
        config.pluginmanager.register(
            ReportStream(config, Path(run_dir) / REPORTS), "e2e-beside-reports"
        )


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not _enabled():
        return
    e2e = [i for i in items if _is_e2e(i)]
    followers = [i for i in items if _is_beside(i) and not _is_e2e(i)]
    rest = [i for i in items if not _is_beside(i)]
    if not e2e or not rest:
        return
    beside = followers + e2e  # the followers' process usually ends first: waited for first
    items[:] = rest + beside
    for item in beside:  # this session only waits; the other processes' own timeouts govern
        item.add_marker(pytest.mark.timeout(_timeout() + INTERRUPT_GRACE_S + 60))
    groups = {"e2e": [i.nodeid for i in e2e], "followers": [i.nodeid for i in followers]}
    config.stash[_SELECTED_KEY] = {name: ids for name, ids in groups.items() if ids}


def pytest_collection_finish(session: pytest.Session) -> None:
    groups = session.config.stash.get(_SELECTED_KEY, None)
    if not groups or session.config.option.collectonly:
        return
    runs = [BesideRun(name, ids, frozenset(ids)) for name, ids in groups.items()]
    session.config.stash[_RUN_KEY] = runs
    session_dir = _session_dir()
    for run in runs:
        run.start(session_dir)
    _yield_cpu_to_e2e(runs)


def _yield_cpu_to_e2e(runs: list[BesideRun]) -> None:
    """This process and the followers' one a lower CPU priority than the e2e one (module
    docstring); a process already lowered further is left as it is."""
    step = _nice()
    if not step:
        return
    target = os.getpriority(os.PRIO_PROCESS, 0) + step
    for run in runs:
        if run.name != "e2e" and run.process is not None:
            with contextlib.suppress(OSError):
                if os.getpriority(os.PRIO_PROCESS, run.process.pid) < target:
                    os.setpriority(os.PRIO_PROCESS, run.process.pid, target)
    os.nice(step)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    runs = item.config.stash.get(_RUN_KEY, [])
    run = next((r for r in runs if item.nodeid in r.selected), None)
    if run is None:
        return None
    run.collect()
    replay(item, run.reports, run.failure_text)
    return True


def pytest_sessionfinish(session: pytest.Session) -> None:
    for run in session.config.stash.get(_RUN_KEY, []):
        run.stop()


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    runs = config.stash.get(_RUN_KEY, [])
    if not runs:
        return
    tr = terminalreporter
    tr.section("e2e beside")
    for run in runs:
        wall = f"{run.wall_s:.1f}s" if run.wall_s is not None else "n/a"
        tr.write_line(
            f"{len(run.nodeids)} test(s) in the {run.name} process: wall {wall}; this session "
            f"waited {run.waited_s:.1f}s for it at the end; output {run.run_dir / OUTPUT}"
            if run.run_dir
            else f"{run.name}: not started"
        )
