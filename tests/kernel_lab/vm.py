"""Kernel lab, host side: boot one qemu VM that runs the guest pytest session.

The VM is ``qemu-system-x86_64 -accel tcg``. ``/dev/kvm`` exists on this machine but cannot
run a guest: its CPU flags show neither vmx nor svm, ``-accel kvm`` with ``-cpu host`` or
``max`` aborts setting MSR 0x10a (IA32_ARCH_CAPABILITIES), and with ``qemu64``, ``kvm64`` or
``host,-arch-capabilities`` the kernel hangs right after decompression (tried 2026-12-02). It has
the host root shared read-only over 9p (the guest puts a tmpfs overlay on it, so it runs the
host's venv and checkout unchanged), one run folder shared read-write for results, and an
``isa-debug-exit`` device through which the guest reports its status: qemu always exits 0 on a
guest power-off, so a missing status is itself a failure. A hard timeout kills qemu.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.kernel_lab.image import REPO_ROOT, BootImage

QEMU = "qemu-system-x86_64"
# The emulated CPU: x86-64-v2 (SSE4.2, POPCNT), no AVX. With ``max`` glibc and the wheels pick
# their AVX2/AVX-512 code paths, which TCG emulates more slowly than SSE: the same guest
# tests ran 14 % faster as Nehalem (41.1 s against 47.5 and 48.0 s of guest pytest).
# ``DMN_KERNEL_LAB_CPU_MODEL`` overrides it (tests/kernel_lab/harness.py).
CPU_MODEL = "Nehalem"
STAGE2 = Path(__file__).with_name("guest_stage2.sh")
ROOT_SHARE_OPTIONS = "security_model=none,readonly=on,multidevs=remap"
# Emulated PCI functions for the pci/* and vfio/* opcodes, behind a VT-d IOMMU (intel-iommu on a
# q35 machine; TCG needs no split irqchip). No udevd runs in the guest, so their drivers are
# loaded only by the tests that want them. Fixed addresses, so tests name them exactly:
#   ALONE: an e1000e behind its own PCIe root port — a single-function IOMMU group, resettable
#          by PM or by a secondary bus reset through the port;
#   SHARED_A/SHARED_B: two conventional-PCI e1000 NICs behind one PCIe-to-PCI bridge. Requester
#          IDs behind such a bridge alias to the bridge, so the kernel puts both (and the bridge)
#          in one IOMMU group: the substrate of "the group holds another function". (Two
#          functions of one multifunction e1000e slot are not enough: this kernel gives each
#          its own group.)
# Their netdev backends are user-mode networks with restrict=on: nothing is reachable, and
# romfile= skips the iPXE option ROMs, which only slow the boot. ``no_timer_check`` on the
# kernel command line: with VT-d interrupt remapping the kernel panics at boot when its IO-APIC
# timer check misses ticks ("timer doesn't work through Interrupt-remapped IO-APIC"), which TCG
# on a loaded host does now and then (seen once in three boots here); remapping itself is kept,
# since vfio_iommu_type1 refuses groups without it.
LAB_PCI_ALONE = "0000:01:00.0"
LAB_PCI_SHARED_A = "0000:02:01.0"
LAB_PCI_SHARED_B = "0000:02:02.0"
LAB_PCI_DEVICES = (
    "-device", "intel-iommu",
    "-device", "pcie-root-port,id=labrp1,chassis=1,slot=1,addr=0x5",
    "-netdev", "user,id=labn1,restrict=on",
    "-device", "e1000e,netdev=labn1,bus=labrp1,romfile=",
    "-device", "pcie-pci-bridge,id=labbr,addr=0x6",
    "-netdev", "user,id=labn2,restrict=on",
    "-device", "e1000,netdev=labn2,bus=labbr,addr=0x1,romfile=",
    "-netdev", "user,id=labn3,restrict=on",
    "-device", "e1000,netdev=labn3,bus=labbr,addr=0x2,romfile=",
)  # fmt: skip
MARKERS = ("LAB-STAGE2", "LAB-PYTEST-START", "LAB-PYTEST-END", "LAB-INIT-FAIL", "Kernel panic")


def qemu_command(
    image: BootImage, run_dir: Path, memory_mb: int, cpus: int, cpu_model: str = CPU_MODEL
) -> list[str]:
    append = " ".join(
        (
            "console=ttyS0 quiet panic=-1 mitigations=off intel_iommu=on no_timer_check",
            f"lab.stage2={STAGE2}",
            f"lab.run={run_dir}",
            f"lab.modules={image.modules_dir}",
            f"lab.repo={REPO_ROOT}",
            f"lab.python={sys.executable}",
        )
    )
    return [
        QEMU,
        "-accel", "tcg", "-M", "q35", "-cpu", cpu_model, "-smp", str(cpus), "-m", str(memory_mb),
        "-nodefaults", "-nographic", "-serial", "stdio", "-no-reboot",
        "-kernel", str(image.vmlinux),
        "-initrd", str(image.initramfs),
        "-append", append,
        "-virtfs", f"local,path=/,mount_tag=hostroot,{ROOT_SHARE_OPTIONS}",
        "-virtfs", f"local,path={run_dir},mount_tag=labrun,security_model=none,multidevs=remap",
        "-device", "isa-debug-exit,iobase=0xf4,iosize=0x04",
        *LAB_PCI_DEVICES,
    ]  # fmt: skip


@dataclass
class VmRun:
    """One running (then finished) VM: console log, marker times, exit status."""

    command: list[str]
    console_path: Path
    timeout_s: float
    started: float = 0.0
    finished: float | None = None
    exit_status: int | None = None
    cpu_s: float | None = None
    timed_out: bool = False
    marks: dict[str, float] = field(default_factory=dict)
    _proc: subprocess.Popen[bytes] | None = None
    _reader: threading.Thread | None = None
    _done: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        self.started = time.monotonic()
        self._proc = subprocess.Popen(
            self.command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        self._reader = threading.Thread(target=self._pump, name="kernel-lab-console", daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        killer = threading.Timer(self.timeout_s, self._kill)
        killer.daemon = True
        killer.start()
        with open(self.console_path, "w") as log:
            for raw in self._proc.stdout:
                t = time.monotonic() - self.started
                line = raw.decode(errors="replace").rstrip("\r\n")
                log.write(f"[{t:8.2f}] {line}\n")
                log.flush()
                for marker in MARKERS:
                    if marker in line and marker not in self.marks:
                        self.marks[marker] = t
        self.exit_status, self.cpu_s = _reap(self._proc)
        killer.cancel()
        self.finished = time.monotonic()
        self._done.set()

    def _kill(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self.timed_out = True
            self._proc.kill()

    def wait(self) -> float:
        """Block until qemu exits; return how long this call waited (the run's real overhead)."""
        t0 = time.monotonic()
        self._done.wait()
        return time.monotonic() - t0

    def terminate(self) -> None:
        self._kill()

    @property
    def guest_status(self) -> int | None:
        """The status the guest wrote to isa-debug-exit (qemu exits with ``status << 1 | 1``)."""
        if self.exit_status is None or self.exit_status & 1 == 0:
            return None
        return self.exit_status >> 1

    @property
    def wall_s(self) -> float:
        return (self.finished or time.monotonic()) - self.started

    def console_tail(self, lines: int = 60) -> str:
        try:
            text = self.console_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no console log)"
        return "\n".join(text[-lines:])


def _reap(proc: subprocess.Popen[bytes]) -> tuple[int, float | None]:
    """Wait for qemu and return its exit status and the CPU seconds it used (user + system,
    every vCPU thread): on two shared cores the VM's CPU is what it takes from the host tests,
    which its wall time alone does not show. None when something else reaped it first."""
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    except ChildProcessError:
        return proc.wait(), None
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_utime + usage.ru_stime
