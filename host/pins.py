"""Persistent namespace pins (design §7.3, §8.4).

An open namespace fd lives only as long as the process. Before anything is moved into a
sandbox, the agent bind-mounts the sandbox's network namespace at
``<state-dir>/netns/<attachment-id>`` and records its (dev, inode) identity; every later
access — connect, cleanup, recovery after a restart — opens the namespace through that pin
and proves the identity first. A bare file where a pin should be is not a pin.

The pin directory is made a shared mount (as ``ip netns`` does for ``/var/run/netns``) so
that pins stay visible across mount-namespace boundaries when the agent runs in a container
with bidirectional propagation. A pin is removed only after its attachment's cleanup was
verified by the caller. Everything here is syscalls through libc (mount/umount2), no shell.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import logging
import os
import re
import threading
from pathlib import Path

from dmn.host.netns import (
    LinkEnvironment,
    NamespaceRef,
    WarmNamespaces,
    current_boot_id,
    identity_of,
)
from dmn.vocabulary.handles import NamespaceIdentity

_log = logging.getLogger(__name__)

MS_BIND = 0x1000
MS_REC = 0x4000
MS_SHARED = 1 << 20
MNT_DETACH = 0x2
PIN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
NSFS_REFERENCE = "/proc/self/ns/net"


class PinError(Exception):
    """A pin could not be made, opened or removed; ``code`` is a stable reason code."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        super().__init__(message)


_libc: ctypes.CDLL | None = None


def _c() -> ctypes.CDLL:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    return _libc


def _mount(source: str, target: str, flags: int) -> None:
    if _c().mount(source.encode(), target.encode(), None, flags, None) != 0:
        err = ctypes.get_errno()
        raise PinError("E_PIN_MOUNT", f"mount {source} -> {target}: {os.strerror(err)}")


def _umount(target: str) -> None:
    if _c().umount2(target.encode(), MNT_DETACH) != 0:
        err = ctypes.get_errno()
        if err not in (errno.EINVAL, errno.ENOENT):  # EINVAL: not a mount point
            raise PinError("E_PIN_UMOUNT", f"umount {target}: {os.strerror(err)}")


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def _is_mountpoint(path: Path) -> bool:
    """True when ``path`` is a mount point (also a directory bind-mounted onto itself, which
    ``os.path.ismount`` cannot see because both sides have the same device)."""
    wanted = os.path.realpath(path)
    with open("/proc/self/mountinfo") as info:
        return any(_unescape(line.split()[4]) == wanted for line in info)


def _nsfs_dev() -> int:
    return os.stat(NSFS_REFERENCE).st_dev


class NamespacePins:
    """Pins under ``state_dir/netns``; ``host`` is the namespace that may never be pinned.

    With ``warm`` (the agent), each pinned namespace's fd and netlink sockets (and the
    host's) stay open across calls in one :class:`WarmNamespaces`, closed when the pin is
    released (or on :meth:`close`); every call still proves each pin's identity first.
    """

    def __init__(
        self, state_dir: Path, host_netns: str = "/proc/1/ns/net", *, warm: bool = False
    ) -> None:
        self.root = Path(state_dir) / "netns"
        self.host_netns = host_netns
        self.warm = WarmNamespaces() if warm else None
        self._root_ready = False
        # pins of different sandboxes are made at once (the node lock is per sandbox): the
        # first ones must not both bind-mount the directory onto itself
        self._root_lock = threading.Lock()

    def _ensure_root(self) -> None:
        """The pin directory exists, is a mount point and is shared. Done once per instance
        (issue 15: reading mountinfo on every pin cost milliseconds on a busy host); only
        :meth:`close` unmounts it, and it resets this."""
        with self._root_lock:
            if not self._root_ready:
                self._make_root()

    def _make_root(self) -> None:
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not _is_mountpoint(self.root):
            _mount(str(self.root), str(self.root), MS_BIND | MS_REC)
        if _c().mount(b"none", str(self.root).encode(), None, MS_SHARED | MS_REC, None) != 0:
            err = ctypes.get_errno()
            raise PinError("E_PIN_MOUNT", f"make {self.root} shared: {os.strerror(err)}")
        self._root_ready = True

    def path(self, attachment_id: str) -> Path:
        if not PIN_ID.fullmatch(attachment_id) or attachment_id in (".", ".."):
            raise PinError("E_PIN_ID", f"attachment id {attachment_id!r} is not a valid pin name")
        return self.root / attachment_id

    def _pinned_identity(self, target: Path) -> NamespaceIdentity | None:
        """The identity at ``target`` if it is a live namespace mount, else None."""
        try:
            st = os.stat(target)
        except FileNotFoundError:
            return None
        if st.st_dev != _nsfs_dev():
            return None  # a bare file: the mount is gone (e.g. after a reboot)
        return NamespaceIdentity(st.st_dev, st.st_ino, current_boot_id())

    def pin(self, attachment_id: str, source: str) -> NamespaceRef:
        """Bind-mount the namespace at ``source`` (a runtime-supplied ns path) as this pin.

        Idempotent for the same namespace; refuses the host namespace, a source that is not a
        network namespace, and an existing pin that holds a different namespace.
        """
        target = self.path(attachment_id)
        try:
            wanted = identity_of(source)
        except OSError as exc:
            raise PinError("E_NETNS_GONE", f"{source}: {exc.strerror}") from exc
        if wanted.dev != _nsfs_dev():
            raise PinError("E_NOT_A_NETNS", f"{source} is not a namespace file")
        host = identity_of(self.host_netns)
        if (wanted.dev, wanted.inode) == (host.dev, host.inode):
            raise PinError("E_HOST_NETNS", "the host network namespace cannot be a sandbox")
        existing = self._pinned_identity(target)
        if existing is not None:
            if (existing.dev, existing.inode) != (wanted.dev, wanted.inode):
                raise PinError("E_PIN_CONFLICT", f"{target} already pins another namespace")
            return NamespaceRef(existing, str(target))
        self._ensure_root()
        fd = os.open(target, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o400)
        os.close(fd)
        try:
            _mount(source, str(target), MS_BIND)
            got = self._pinned_identity(target)
            if got is None or (got.dev, got.inode) != (wanted.dev, wanted.inode):
                raise PinError("E_PIN_MISMATCH", f"{target} does not hold {source} after mount")
        except PinError:
            _umount(str(target))
            target.unlink(missing_ok=True)
            raise
        _log.info(
            "event=pin attachment=%s dev=%d inode=%d", attachment_id, wanted.dev, wanted.inode
        )
        return NamespaceRef(wanted, str(target))

    def open(self, attachment_id: str, identity: NamespaceIdentity) -> int:
        """An fd of the pinned namespace, proved to be ``identity`` (caller closes it)."""
        target = self.path(attachment_id)
        if identity.boot_id and identity.boot_id != current_boot_id():
            raise PinError("E_NETNS_STALE", f"{attachment_id} was pinned in another boot")
        try:
            fd = os.open(target, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError as exc:
            raise PinError("E_PIN_MISSING", f"no pin {target}") from exc
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (identity.dev, identity.inode):
            os.close(fd)
            raise PinError("E_PIN_MISMATCH", f"{target} does not hold the recorded namespace")
        return fd

    def ref(self, attachment_id: str) -> NamespaceRef | None:
        target = self.path(attachment_id)
        got = self._pinned_identity(target)
        return NamespaceRef(got, str(target)) if got is not None else None

    def list(self) -> list[NamespaceRef]:
        """Every live pin (what a LinkEnvironment searches for links absent from the host)."""
        if not self.root.is_dir():
            return []
        out = []
        for entry in sorted(self.root.iterdir()):
            got = self._pinned_identity(entry)
            if got is not None:
                out.append(NamespaceRef(got, str(entry)))
        return out

    def release(self, attachment_id: str, *, cleanup_verified: bool) -> None:
        """Unmount and remove a pin — only once the caller verified the attachment's cleanup."""
        if not cleanup_verified:
            raise PinError("E_PIN_BUSY", f"{attachment_id}: cleanup not verified; pin retained")
        target = self.path(attachment_id)
        if self.warm is not None:
            pinned = self._pinned_identity(target)
            if pinned is not None:
                self.warm.forget(pinned)  # its warm fd and sockets go with the pin
        _umount(str(target))
        target.unlink(missing_ok=True)
        _log.info("event=unpin attachment=%s", attachment_id)

    def link_environment(self, attachment_id: str | None = None) -> LinkEnvironment:
        """The executors' environment: the host namespace, this attachment's pinned sandbox
        (None for prepare and for recovery) and every live pin to search."""
        sandbox = self.ref(attachment_id) if attachment_id else None
        if attachment_id and sandbox is None:
            raise PinError("E_PIN_MISSING", f"no live pin for attachment {attachment_id}")
        return LinkEnvironment(
            host=NamespaceRef.at(self.host_netns),
            sandbox=sandbox,
            pins=self.list,
            state_dir=self.root.parent,
            warm=self.warm,
        )

    def close(self) -> None:
        """Close warm namespaces; unmount the pin directory's own bind mount once no pin is
        left (tests, uninstall)."""
        if self.warm is not None:
            self.warm.close()
        if self.root.is_dir() and not any(self.root.iterdir()) and _is_mountpoint(self.root):
            _umount(str(self.root))
            self._root_ready = False
