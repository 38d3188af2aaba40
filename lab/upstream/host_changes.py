"""What the upstream lab changes on the host, recorded before it changes it, undone by ``down``.

The record is ``<lab>/host.json``, written before each change, so a lab killed at any
point still leaves proof of what is ours:

* ``links`` — kernel links the lab created in the host namespace (its "NICs", the node
  address pair, the primary network's bridge); removed by name only if recorded;
* ``sysctls`` — values of the kernel settings kubelet (and the CNI bridge) may write at
  start, restored verbatim;
* ``paths`` — fixed host paths upstream components create regardless of their flags
  (``/var/log/containers``, libcni's cache ``/var/lib/cni``, containerd's shim sockets
  under ``/run/containerd``) that did **not** exist before: removed; ones that existed are
  left alone;
* ``cgroups`` — the lab's cgroup root (``dmn-lab``) in every cgroup-v1 hierarchy, created
  by the lab so kubelet's ``cgroupRoot`` keeps every Pod cgroup under it; its processes are
  killed and its directories removed bottom-up.

Mounts are not recorded: everything the lab's processes mount lies under the lab's own
directory (itself made a shared mount by the lab, :func:`make_shared_mount`), so
``unmount_under`` detaches every mount point at or below it (deepest first).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import shutil
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_NAME = "dmn-lab"
SYSCTLS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
    "net/ipv4/ip_forward",
)
FIXED_PATHS = ("/var/log/containers", "/var/lib/cni", "/run/containerd", "/var/run/netns")
MNT_DETACH = 2


@dataclass
class HostRecord:
    links: list[str] = field(default_factory=list)
    sysctls: dict[str, str] = field(default_factory=dict)
    paths: list[str] = field(default_factory=list)  # created by the lab (absent before)
    cgroups: list[str] = field(default_factory=list)

    @classmethod
    def load(cls, path: Path) -> HostRecord:
        try:
            return cls(**json.loads(path.read_text()))
        except FileNotFoundError:
            return cls()

    def save(self, path: Path) -> None:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=1))
        os.replace(tmp, path)


def _sysctl_path(name: str) -> Path:
    return Path("/proc/sys") / name


def snapshot_host(record: HostRecord) -> None:
    """Fill ``sysctls`` and ``paths`` from the host as it is now (before the lab starts)."""
    for name in SYSCTLS:
        with contextlib.suppress(OSError):
            record.sysctls[name] = _sysctl_path(name).read_text().strip()
    record.paths = [p for p in FIXED_PATHS if not os.path.lexists(p)]


def restore_sysctls(record: HostRecord) -> None:
    for name, value in record.sysctls.items():
        path = _sysctl_path(name)
        try:
            if path.read_text().strip() != value:
                path.write_text(value)
                log.info("event=sysctl-restored name=%s value=%s", name, value)
        except OSError as exc:
            log.warning("event=sysctl-not-restored name=%s error=%s", name, exc)


def remove_created_paths(record: HostRecord) -> None:
    for p in record.paths:
        path = Path(p)
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.is_dir():
            shutil.rmtree(path, ignore_errors=True)


def v1_hierarchies() -> list[Path]:
    """Mounted cgroup-v1 hierarchies (``/sys/fs/cgroup/<controller>``), not the unified one."""
    out = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        parts = line.split()
        if len(parts) > 2 and parts[2] == "cgroup" and parts[1].startswith(str(CGROUP_ROOT)):
            out.append(Path(parts[1]))
    return sorted(set(out))


def create_cgroups(record: HostRecord, lab_file: Path, name: str = CGROUP_NAME) -> None:
    """The top-level cgroup ``name`` (one kubelet's cgroup root) in every hierarchy."""
    # on a hybrid host runc also mirrors Pod cgroups below the unified (cgroup2) mount;
    # the lab does not create that tree but records it, when absent now, as its own
    unified = CGROUP_ROOT / "unified" / name
    if (CGROUP_ROOT / "unified").is_dir() and not unified.exists():
        record.cgroups.append(str(unified))
        record.save(lab_file)
    for hierarchy in v1_hierarchies():
        path = hierarchy / name
        if path.exists():
            continue
        record.cgroups.append(str(path))
        record.save(lab_file)
        path.mkdir()
        if hierarchy.name == "cpuset":  # a cpuset cgroup takes no task until it has cpus/mems
            for knob in ("cpuset.cpus", "cpuset.mems"):
                (path / knob).write_text((hierarchy / knob).read_text())


def _cgroup_pids(root: Path) -> set[int]:
    pids: set[int] = set()
    for procs in root.rglob("cgroup.procs"):
        with contextlib.suppress(OSError, ValueError):
            pids.update(int(x) for x in procs.read_text().split())
    return pids


def kill_cgroup_processes(record: HostRecord, timeout: float = 10.0) -> None:
    """SIGKILL every process in the lab's cgroups (containers the runtime left behind)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids: set[int] = set()
        for cg in record.cgroups:
            if Path(cg).is_dir():
                pids |= _cgroup_pids(Path(cg))
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
    log.warning("event=cgroup-processes-left")


def remove_cgroups(record: HostRecord) -> list[str]:
    """Remove the lab's cgroup trees bottom-up; returns the ones that could not go."""
    left = []
    for cg in record.cgroups:
        root = Path(cg)
        if not root.is_dir():
            continue
        dirs = sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
        for d in [*dirs, root]:
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)
        if root.exists():
            left.append(cg)
    return left


_libc = ctypes.CDLL(None, use_errno=True)


def mounts_under(root: Path) -> list[str]:
    """Mount points at or below ``root``, deepest first (from /proc/self/mountinfo)."""
    base = str(root.resolve())
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == base or point.startswith(base + "/"):
            points.append(point)
    return sorted(points, key=lambda p: -p.count("/"))


MS_BIND = 4096
MS_REC = 16384
MS_SHARED = 1 << 20


def make_shared_mount(root: Path) -> None:
    """Bind-mount ``root`` onto itself and make it a shared mount (recursively).

    Why: containerd refuses a container mount with ``Bidirectional`` propagation (the node
    agent's state directory, whose namespace pins must outlive its container) unless the
    source lies on a shared mount, and ``HostToContainer`` unless shared or slave — as on
    any systemd host. This machine's ``/`` is private; the lab makes only its own
    directory shared, so nothing outside it changes. Call before anything is mounted below
    ``root``; ``unmount_under(root)`` detaches it with the rest."""
    path = str(root.resolve()).encode()
    if _libc.mount(path, path, None, MS_BIND | MS_REC, None) != 0:
        raise OSError(ctypes.get_errno(), f"bind-mounting {root} onto itself")
    if _libc.mount(None, path, None, MS_SHARED | MS_REC, None) != 0:
        raise OSError(ctypes.get_errno(), f"making {root} a shared mount")


def unmount_under(root: Path) -> list[str]:
    """Detach every mount at or below ``root``; returns the ones still mounted."""
    for _ in range(5):
        points = mounts_under(root)
        if not points:
            return []
        for point in points:
            if _libc.umount2(point.encode(), MNT_DETACH) != 0:
                log.debug("event=umount-failed point=%s errno=%d", point, ctypes.get_errno())
    return mounts_under(root)
