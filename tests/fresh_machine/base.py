"""The clean machine of the fresh-machine test: a minimal Debian bookworm root filesystem.

It holds only what the README tells a newcomer to install (``git``, ``make``, ``python3``,
``ca-certificates``) on top of Debian's ``minbase`` (essential packages and apt; no
iproute2, no ping, no python3-venv), so ``make lab`` must install whatever else it needs.
Made with ``mmdebstrap`` and cached under ``$DMN_FRESH_MACHINE_CACHE`` or
``/var/cache/dmn-fresh-machine`` (outside the clone) keyed by its inputs; a ``.complete``
stamp is written last and a stamped base is reused read-only (each run writes to an
overlay on it).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

RECIPE = "1"  # bump when what lands in the base changes beyond the inputs below
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
PACKAGES = ("git", "make", "python3", "ca-certificates")


def cache_root() -> Path:
    return Path(os.environ.get("DMN_FRESH_MACHINE_CACHE", "/var/cache/dmn-fresh-machine"))


def key() -> str:
    digest = hashlib.sha256("\0".join((RECIPE, SUITE, MIRROR, *PACKAGES)).encode())
    return digest.hexdigest()[:16]


def ensure_base() -> Path:
    """The cached root filesystem (built on first use); concurrent callers take turns."""
    base = cache_root() / f"base-{key()}"
    cache_root().mkdir(parents=True, exist_ok=True)
    with (cache_root() / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (base / ".complete").exists():
            shutil.rmtree(base, ignore_errors=True)
            base.mkdir()
            subprocess.run(
                ["mmdebstrap", "--variant=minbase", "--mode=root", "--quiet",
                 f"--include={','.join(PACKAGES)}", SUITE, str(base / "rootfs"), MIRROR],
                check=True, capture_output=True, text=True,
            )  # fmt: skip
            (base / ".complete").write_text(key() + "\n")
    return base / "rootfs"
