"""The sysfs one network namespace sees: how an executor reaches netdev attributes that
exist only in sysfs for a link that lives in a sandbox.

Why this exists: a sysfs instance shows under ``class/net`` (and under each device's
``net/``) only the netdevs of the network namespace that was current when it was mounted.
The agent's ``/sys`` is the host's view, so an IPoIB netdev moved into a Pod's namespace is
not in it at all. :class:`NetnsSysfs` runs a function against a sysfs root that shows exactly
one recorded namespace.

:class:`MountedNetnsSysfs` (what a node runs): a dedicated thread leaves the process's mount
namespace (``unshare(CLONE_FS | CLONE_NEWNS)``, which affects that thread only), marks every
mount private so nothing propagates back to the host, enters the namespace
(``setns(CLONE_NEWNET)`` on the fd the :class:`LinkEnvironment` proved to be the recorded
(dev, inode)), mounts a fresh sysfs over ``/sys`` and runs the function there. The sysfs
instance is tagged with that namespace (the kernel takes the mounter's current network
namespace) and pins it; when the thread ends, its private mount namespace and the sysfs
instance die with it — also when the agent is SIGKILLed mid-call, so nothing is left mounted
and no namespace is kept alive. No shell, no helper process.

:class:`RecordedNetnsSysfs` (tests): a sysfs tree per namespace identity, for hardware no
kernel here has (the InfiniBand link layer); the namespaces themselves are real.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

from dmn.host.errors import HostError
from dmn.host.netns import LinkEnvironment, NamespaceRef
from dmn.vocabulary.handles import NamespaceIdentity

T = TypeVar("T")

CLONE_FS = 0x00000200
CLONE_NEWNS = 0x00020000
CLONE_NEWNET = 0x40000000
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
VIEW_ROOT = Path("/sys")


class NetnsSysfs(Protocol):
    def run(self, env: LinkEnvironment, ref: NamespaceRef, fn: Callable[[Path], T]) -> T:
        """``fn(root)`` where ``root`` is a sysfs showing the netdevs of ``ref``; raises the
        namespace's own HostError (``E_NETNS_GONE``, ...) when ``ref`` cannot be opened,
        ``E_SYSFS_VIEW`` when no view can be made."""
        ...


_libc: ctypes.CDLL | None = None


def _call(name: str, *args: object) -> None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if getattr(_libc, name)(*args) != 0:
        err = ctypes.get_errno()
        raise HostError("E_SYSFS_VIEW", f"{name}: {os.strerror(err)}")


@dataclass(frozen=True)
class MountedNetnsSysfs:
    """A fresh sysfs of the namespace, mounted in a private mount namespace of one thread."""

    def run(self, env: LinkEnvironment, ref: NamespaceRef, fn: Callable[[Path], T]) -> T:
        env.reader(ref)  # proves boot and path -> recorded identity (E_NETNS_GONE, ...)
        ns_fd = env.fd(ref)  # ... and that the fd opened is that namespace
        result: list[T] = []
        failure: list[BaseException] = []

        def body() -> None:
            try:
                _call("unshare", CLONE_FS | CLONE_NEWNS)
                _call("mount", None, b"/", None, MS_REC | MS_PRIVATE, None)
                _call("setns", ns_fd, CLONE_NEWNET)
                flags = MS_NOSUID | MS_NODEV | MS_NOEXEC
                _call("mount", b"sysfs", bytes(VIEW_ROOT), b"sysfs", flags, None)
                result.append(fn(VIEW_ROOT))
            except BaseException as exc:  # handed to the calling thread
                failure.append(exc)

        thread = threading.Thread(target=body, name="netns-sysfs", daemon=True)
        thread.start()
        thread.join()
        if failure:
            raise failure[0]
        return result[0]


@dataclass(frozen=True)
class RecordedNetnsSysfs:
    """Recorded sysfs trees keyed by namespace (dev, inode): the view of a namespace with no
    tree is refused (``E_SYSFS_VIEW``), as a node refuses one it cannot mount."""

    trees: Mapping[tuple[int, int], Path] = field(default_factory=dict)

    @classmethod
    def of(cls, trees: Mapping[NamespaceIdentity, Path]) -> RecordedNetnsSysfs:
        return cls({(i.dev, i.inode): p for i, p in trees.items()})

    def run(self, env: LinkEnvironment, ref: NamespaceRef, fn: Callable[[Path], T]) -> T:
        env.reader(ref)
        env.fd(ref)
        root = self.trees.get((ref.identity.dev, ref.identity.inode))
        if root is None:
            raise HostError("E_SYSFS_VIEW", f"no sysfs view of {ref.path}")
        return fn(root)
