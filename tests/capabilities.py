"""Linux capability numbers (``<linux/capability.h>``) for reading ``/proc/<pid>/status``.

The unprivileged node agent is checked against the chart's ``nodeAgent.capabilities`` in two
places: its real container on the upstream lab (``tests/e2e/test_helm_install.py``) and the
kernel lab's executors run under exactly those (:func:`tests.kernel.node.unprivileged_server`).
"""

from __future__ import annotations

from pathlib import Path

NAMES = (
    "CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
    "SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW",
    "IPC_LOCK", "IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT",
    "SYS_ADMIN", "SYS_BOOT", "SYS_NICE", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD",
    "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG",
    "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON", "BPF", "CHECKPOINT_RESTORE",
)  # fmt: skip
BITS = {name: bit for bit, name in enumerate(NAMES)}


def names(mask: str) -> set[str]:
    """The capabilities in a ``/proc/<pid>/status`` mask (hex); an unnamed bit by number."""
    bits = int(mask, 16)
    return {NAMES[b] if b < len(NAMES) else f"bit{b}" for b in range(64) if bits >> b & 1}


def status(pid: int | str = "self") -> dict[str, str]:
    """``/proc/<pid>/status`` as field → value (stripped)."""
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}
