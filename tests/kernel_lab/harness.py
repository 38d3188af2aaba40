"""Kernel lab pytest plugin: run ``kernel_lab`` tests inside one Debian-kernel VM per session.

On the host, when the selected tests include any marked ``kernel_lab``, the plugin

1. moves those items to the end of the run and, as soon as collection finishes, prepares the
   boot image (``image.py``) and starts one qemu VM (``vm.py``) in the background, so the
   guest boots and runs while the host tests run;
2. never runs those items' fixtures or bodies on the host: at each one it waits for the VM, then
   replays the guest's own setup/call/teardown reports (serialised by pytest, streamed through
   the shared run folder) into the host session — the host report shows the guest's outcome,
   traceback and captured output for each test;
3. reports a test the guest never reported (boot failure, crash, timeout) as failed, with the
   tail of the guest console; skips with a clear reason only when qemu cannot be installed;
4. prints a "kernel lab" summary: kernel, boot time, guest run time, and how long the host
   actually waited (the overhead the lab added to the session).

Inside the guest (``DMN_KERNEL_LAB_GUEST`` set by ``guest.py``) the plugin only streams reports.

Environment knobs: ``DMN_KERNEL_LAB_TIMEOUT`` (hard VM timeout, s, default 2400:
the guest session ran 740 s at CI load 5–12 before the PCI/VFIO, RDMA and devlink tests
joined it, and a full run at load 14 overran 1500 s),
``DMN_KERNEL_LAB_MEMORY`` (MiB, default 1024), ``DMN_KERNEL_LAB_CPUS`` (default 2),
``DMN_KERNEL_LAB_CPU_MODEL`` (qemu -cpu, default Nehalem: see ``vm.CPU_MODEL``),
``DMN_KERNEL_LAB_PROFILE`` (samples per second: the guest session runs under ``py-spy record
--subprocesses`` and leaves collapsed stacks in ``profile.txt`` of its run folder; needs
py-spy in the venv; TCG makes a few samples per second plenty for a twenty-minute session).
"""

from __future__ import annotations

import compileall
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests import crash_points
from tests.crash_fork_server import start_crash_fork_server
from tests.kernel_lab.guest import GUEST_ENV
from tests.kernel_lab.image import REPO_ROOT, RUNS_ROOT, BootImage, ImageError, prepare
from tests.kernel_lab.vm import CPU_MODEL, QEMU, VmRun, qemu_command
from tests.report_stream import REPORTS, ReportStream, read_reports, replay, replay_skipped

MARKER = "kernel_lab"
PROFILE_ENV = "DMN_KERNEL_LAB_PROFILE"
KEEP_RUNS = 3
APT_PACKAGES = ("qemu-system-x86", "busybox-static")


def _is_lab(item: pytest.Item) -> bool:
    return item.get_closest_marker(MARKER) is not None


def _env_number(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def _ensure_qemu() -> str | None:
    """Return why qemu is unusable, or None. Tries to install it once when running as root."""
    if shutil.which(QEMU) and Path("/bin/busybox").is_file():
        return None
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        return f"{QEMU} or busybox-static missing and cannot be installed (not root / no apt)"
    proc = subprocess.run(
        ["apt-get", "-o", "DPkg::Lock::Timeout=300", "install", "-y", "-q",
         "--no-install-recommends", *APT_PACKAGES],
        capture_output=True, text=True, check=False,
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
    )  # fmt: skip
    if proc.returncode != 0 or not shutil.which(QEMU):
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return f"qemu cannot be installed: apt-get install {' '.join(APT_PACKAGES)}: {tail}"
    return None


def _warm_rewrite_cache(run_dir: Path, nodeids: list[str]) -> None:
    """Collect the lab tests once on the host (fast) with bytecode writing on, so the guest
    finds pytest's assertion-rewritten modules and every import already compiled."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env[GUEST_ENV] = str(run_dir)  # guest mode: collecting must not boot another VM
    argv = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    subprocess.run(
        [*argv, *nodeids], cwd=REPO_ROOT, env=env, capture_output=True, check=False, timeout=300
    )


@dataclass
class LabSession:
    """Host-side state of the one lab VM of this pytest session."""

    nodeids: list[str]
    run_dir: Path | None = None
    image: BootImage | None = None
    vm: VmRun | None = None
    skip_reason: str | None = None
    error: str | None = None
    waited_s: float = 0.0
    prepare_s: float = 0.0
    reports: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    collected: bool = False

    def start(self) -> None:
        t0 = time.monotonic()
        self.skip_reason = _ensure_qemu()
        if self.skip_reason:
            return
        try:
            self.image = prepare()
        except ImageError as exc:
            self.error = f"kernel lab image could not be prepared: {exc}"
            return
        runs = RUNS_ROOT.resolve()  # resolved: see image.prepare
        runs.mkdir(parents=True, exist_ok=True)
        for old in sorted(runs.iterdir())[:-KEEP_RUNS]:
            shutil.rmtree(old, ignore_errors=True)
        self.run_dir = runs / f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
        self.run_dir.mkdir()
        request: dict[str, Any] = {"nodeids": self.nodeids, "per_test_timeout": 900}
        if _env_number(PROFILE_ENV, 0) > 0:
            request["profile_hz"] = _env_number(PROFILE_ENV, 0)
        # the guest collects and kills as the host chose (a full matrix has more parameters,
        # a slice fewer): the resolved choice, never recomputed in the guest
        request["crash_matrix"] = crash_points.mode()
        (self.run_dir / "request.json").write_text(json.dumps(request))
        # bytecode for the guest: it reads the host tree read-only, writes would land in tmpfs
        for folder in (
            "tests",
            "opcodes",
            "agent",
            "engine",
            "interpreter",
            "vocabulary",
            "programs",
        ):
            compileall.compile_dir(REPO_ROOT / folder, quiet=2, workers=1)
        _warm_rewrite_cache(self.run_dir, self.nodeids)
        self.prepare_s = time.monotonic() - t0
        self.vm = VmRun(
            command=qemu_command(
                self.image,
                self.run_dir,
                memory_mb=_env_number("DMN_KERNEL_LAB_MEMORY", 1024),
                cpus=_env_number("DMN_KERNEL_LAB_CPUS", 2),
                cpu_model=os.environ.get("DMN_KERNEL_LAB_CPU_MODEL", CPU_MODEL),
            ),
            console_path=self.run_dir / "console.log",
            timeout_s=_env_number("DMN_KERNEL_LAB_TIMEOUT", 2400),
        )
        self.vm.start()

    def collect(self) -> None:
        """Wait for the VM once and load every report the guest streamed."""
        if self.collected:
            return
        self.collected = True
        if self.vm is None or self.run_dir is None:
            return
        self.waited_s = self.vm.wait()
        self.reports = read_reports(self.run_dir / REPORTS)
        if self.vm.timed_out:
            self.error = f"kernel lab VM killed after the hard timeout of {self.vm.timeout_s}s"
        elif self.vm.guest_status is None:
            self.error = f"kernel lab VM exited {self.vm.exit_status} without a guest status"

    def stop(self) -> None:
        if self.vm is not None:
            self.vm.terminate()

    def failure_text(self, nodeid: str) -> str:
        why = self.error or "the guest finished without reporting this test"
        tail = self.vm.console_tail() if self.vm else ""
        where = f"\nconsole: {self.vm.console_path}" if self.vm else ""
        return f"kernel lab: {why} ({nodeid}){where}\n--- guest console tail ---\n{tail}"


_SESSION_KEY = pytest.StashKey[LabSession]()


def _replay(item: pytest.Item, lab: LabSession) -> None:
    if lab.skip_reason:
        replay_skipped(item, lab.skip_reason)
        return
    lab.collect()
    replay(item, lab.reports, lab.failure_text)


# pyroute2 gives the helper process behind ``netns.create`` 2 s to answer; under qemu's TCG
# emulation, with CI's host tests on the same two cores, a fork + unshare took longer
# ("no response from the child" in a CI run). The guest's timeouts are the emulated
# kernel's, not the host's.
GUEST_PYROUTE2_COMMUNICATE_TIMEOUT = 60


def pytest_configure(config: pytest.Config) -> None:
    run_dir = os.environ.get(GUEST_ENV)
    if run_dir:
        from pyroute2 import config as pyroute2_config

        pyroute2_config.default_communicate_timeout = GUEST_PYROUTE2_COMMUNICATE_TIMEOUT
        config.pluginmanager.register(GuestReporter(config, Path(run_dir)), "kernel-lab-guest")


class GuestReporter(ReportStream):
    """Guest side: stream every test report to the shared run folder."""

    def __init__(self, config: pytest.Config, run_dir: Path) -> None:
        super().__init__(config, run_dir / REPORTS)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Start the session's default crash fork server now when a ``crash`` test was
        collected: its imports then run on the guest's second vCPU beside the first tests
        instead of inside the first test that kills."""
        if any(item.get_closest_marker("crash") for item in session.items):
            start_crash_fork_server()


def _host() -> bool:
    return not os.environ.get(GUEST_ENV)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not _host():
        return
    lab = [i for i in items if _is_lab(i)]
    if not lab:
        return
    items[:] = [i for i in items if not _is_lab(i)] + lab
    hard = _env_number("DMN_KERNEL_LAB_TIMEOUT", 2400)
    for item in lab:  # the host only waits for the VM; its own hard timeout governs
        item.add_marker(pytest.mark.timeout(hard + 300))


def pytest_collection_finish(session: pytest.Session) -> None:
    if not _host() or session.config.option.collectonly:
        return
    nodeids = [i.nodeid for i in session.items if _is_lab(i)]
    if not nodeids:
        return
    lab = LabSession(nodeids)
    session.config.stash[_SESSION_KEY] = lab
    lab.start()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    if not _host() or not _is_lab(item):
        return None
    lab = item.config.stash.get(_SESSION_KEY, None)
    if lab is None:
        return None
    _replay(item, lab)
    return True


def pytest_sessionfinish(session: pytest.Session) -> None:
    lab = session.config.stash.get(_SESSION_KEY, None)
    if lab is not None:
        lab.stop()


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    lab = config.stash.get(_SESSION_KEY, None)
    if lab is None:
        return
    tr = terminalreporter
    tr.section("kernel lab")
    if lab.skip_reason:
        tr.write_line(f"skipped {len(lab.nodeids)} test(s): {lab.skip_reason}")
        return
    if lab.image is None or lab.vm is None:
        tr.write_line(f"not run: {lab.error}")
        return
    vm = lab.vm
    boot = vm.marks.get("LAB-STAGE2")
    start = vm.marks.get("LAB-PYTEST-START")
    end = vm.marks.get("LAB-PYTEST-END")
    console = vm.console_path.relative_to(REPO_ROOT)
    tr.write_line(f"kernel {lab.image.describe()} under qemu TCG; console {console}")
    tr.write_line(crash_points.describe())
    tr.write_line(
        "boot to stage 2: "
        + (f"{boot:.1f}s" if boot is not None else "n/a")
        + "; guest pytest: "
        + (f"{end - start:.1f}s" if start is not None and end is not None else "n/a")
        + f"; VM wall {vm.wall_s:.1f}s"
        + (f" (qemu CPU {vm.cpu_s:.0f}s)" if vm.cpu_s is not None else "")
        + f"; image prepare {lab.prepare_s:.1f}s"
        + f"; host waited {lab.waited_s:.1f}s (lab overhead on this session)"
    )
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    tr.write_line(
        f"host session CPU: pytest {own.ru_utime + own.ru_stime:.0f}s, its reaped children "
        f"{children.ru_utime + children.ru_stime:.0f}s (qemu included)"
    )
    for nodeid in lab.nodeids:
        reports = lab.reports.get(nodeid, [])
        outcome = "not reported"
        duration = 0.0
        for data in reports:
            duration += float(data.get("duration", 0.0))
            if data["outcome"] != "passed" or data["when"] == "call":
                outcome = data["outcome"]
                if outcome != "passed":
                    break
        tr.write_line(f"  [guest] {outcome:>12} {duration:7.2f}s {nodeid}")
    if lab.error:
        tr.write_line(f"error: {lab.error}")
