"""A disk whose fsync fails for real: ext4 on a loop device backed by a file on a small tmpfs.

Why this and not a stub: the journal's durability is one ``fdatasync`` of RocksDB's WAL per
commit, and what must be tested is the agent's answer to that call failing. The host
kernel has no device-mapper (dm-flakey/dm-error), and an LD_PRELOAD shim would fake the
libc call rather than the kernel. Here the kernel does it: the loop device's backing file is
sparse on a tmpfs; :meth:`FailingDisk.fill` fills the tmpfs, after which a write into the
ext4 filesystem still succeeds (it lands in the page cache) but the writeback that
``fdatasync`` waits for cannot allocate the backing file's pages, so ``fdatasync`` returns
EIO — RocksDB reports "IO error: While fdatasync: ... Input/output error". ext4 then
aborts its journal and goes read-only, as it would on a failing disk.
:meth:`FailingDisk.repair` frees the space, checks the filesystem and mounts it again (what
an operator does before the agent restarts). Needs root (mount, losetup, mkfs.ext4, e2fsck).
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


def _run(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout.strip()


class FailingDisk:
    def __init__(self, root: Path) -> None:
        self.tmpfs = root / "backing"
        self.mount = root / "disk"
        self.image = self.tmpfs / "disk.img"
        self.filler = self.tmpfs / "filler"
        self.loop = ""

    def _attach_and_mount(self) -> None:
        self.loop = _run("losetup", "--find", "--show", str(self.image))
        _run("mount", "-o", "errors=continue", self.loop, str(self.mount))

    def create(self) -> None:
        self.tmpfs.mkdir(parents=True)
        self.mount.mkdir(parents=True)
        _run("mount", "-t", "tmpfs", "-o", "size=24m,mode=0700", "tmpfs", str(self.tmpfs))
        with open(self.image, "wb") as f:
            f.truncate(256 << 20)  # sparse: the tmpfs holds only what ext4 writes
        loop = _run("losetup", "--find", "--show", str(self.image))
        try:
            _run("mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=1,lazy_journal_init=1", loop)
        finally:
            _run("losetup", "-d", loop)
        self._attach_and_mount()

    def fill(self) -> None:
        """Fill the backing tmpfs, then make sure the disk has failed: from now on every
        commit in the disk fails (EIO, or EROFS once ext4 has gone read-only).

        Why the probe: a small write whose page and journal blocks happen to be allocated
        in the backing file already still syncs, so with the tmpfs merely full the first
        failing commit was sometimes the second one (seen once in ten runs). Fresh data
        written and synced in the disk until a sync fails makes the failure certain."""
        with open(self.filler, "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * 65536)
            except OSError:
                pass
        probe = self.mount / f".probe-{uuid.uuid4().hex[:8]}"
        chunk = os.urandom(1 << 20)
        try:
            with open(probe, "wb", buffering=0) as f:
                for _ in range(256):  # the whole 256 MiB disk at most
                    f.write(chunk)
                    os.fsync(f.fileno())
        except OSError:
            return
        raise AssertionError("the failing disk still syncs after its backing store filled")

    def repair(self) -> None:
        """Free the space, unmount, check and remount (the agent must not be running)."""
        self.filler.unlink(missing_ok=True)
        self._detach()
        subprocess.run(["e2fsck", "-fy", str(self.image)], capture_output=True, check=False)
        self._attach_and_mount()

    def _detach(self) -> None:
        if self.loop:
            if subprocess.run(["umount", str(self.mount)], capture_output=True).returncode:
                # still busy (a process of a failed test holds a file): detach it lazily;
                # the loop device is released when its last user goes (autoclear)
                subprocess.run(["umount", "-l", str(self.mount)], capture_output=True)
            subprocess.run(["losetup", "-d", self.loop], capture_output=True, check=False)
            self.loop = ""

    def destroy(self) -> None:
        self._detach()
        subprocess.run(["umount", "-l", str(self.tmpfs)], capture_output=True, check=False)


@contextmanager
def failing_disk(root: Path) -> Iterator[FailingDisk]:
    if os.geteuid() != 0:
        pytest.fail("a loop-device filesystem needs root (the test suite runs as root)")
    disk = FailingDisk(root / f"fd-{uuid.uuid4().hex[:8]}")
    try:
        disk.create()
        yield disk
    finally:
        disk.destroy()
