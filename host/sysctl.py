"""Per-interface network sysctls (``/proc/sys/net/{ipv4,ipv6}/conf/<link>/<key>``) of one
recorded network namespace.

Why a thread enters the namespace: the kernel resolves ``/proc/sys/net`` by the network
namespace of the task that looks the path up, not by a mount, so the agent's own view shows
only the host's links. :func:`read_values` and :func:`write_values` open each file in a
short-lived thread that ``setns``-es into the namespace the :class:`LinkEnvironment` proved
(the fd it opened is that recorded (dev, inode)); the thread ends there (nothing to switch
back, so a failed return can never leave another thread in a foreign namespace). An open
file stays bound to that namespace's table of that link, so reading and writing happen on
the fds afterwards, in the caller's thread. No shell, no helper process, no mount.

Why a path can never come from configuration: the path is built only from an
:class:`InterfaceSysctl` (``ipv4``/``ipv6`` and a key of lower-case letters, digits and
``_``; the opcode's allowlist decides which keys exist) and the name the kernel reports for
the link at the caller's verified ifindex — never ``all`` or ``default`` (namespace-wide),
``.``/``..``, or anything with a ``/``.

Why a tenant's rename cannot redirect a write: the kernel re-registers a link's conf table
when the link is renamed (and drops it when the link leaves the namespace or dies), and a
file opened on a dropped table answers ``ENOENT``. So after opening, the link at the ifindex
is read again and must still carry the name the files were opened under: then each file
belongs to that link (names are unique in a namespace; a file opened on another link of
that name was dropped by the rename that freed the name, and its write fails ``ENOENT``,
refused as ``E_LINK_CHANGED``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from dmn.host.errors import HostError
from dmn.host.netns import CLONE_NEWNET, LinkEnvironment, NamespaceRef
from dmn.host.rtnetlink.links import by_index

PROC_SYS_NET = PurePosixPath("/proc/sys/net")
FAMILIES = frozenset({"ipv4", "ipv6"})
_KEY = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
_NAMESPACE_WIDE = frozenset({"all", "default"})
_VALUE = re.compile(rb"^-?[0-9]{1,10}$")
_libc: ctypes.CDLL | None = None


@dataclass(frozen=True, slots=True)
class InterfaceSysctl:
    """One per-interface key: ``family`` (``ipv4``/``ipv6``) and the file name under
    ``conf/<link>/``; anything else is refused (``E_SYSCTL_KEY``) when it is made."""

    family: str
    key: str

    def __post_init__(self) -> None:
        if self.family not in FAMILIES or not _KEY.fullmatch(self.key):
            raise HostError(
                "E_SYSCTL_KEY",
                f"{self.family!r}/{self.key!r} is not a per-interface sysctl key "
                "(ipv4 or ipv6 and [a-z][a-z0-9_]*)",
            )

    @property
    def text(self) -> str:
        """``ipv4/rp_filter``: how a before-image records the key."""
        return f"{self.family}/{self.key}"

    @classmethod
    def parse(cls, text: str) -> InterfaceSysctl:
        family, _, key = text.partition("/")
        return cls(family, key)

    def path(self, link_name: str) -> PurePosixPath:
        """The file of this key for the link ``link_name`` (a kernel-reported name)."""
        problem = _link_name_problem(link_name)
        if problem:
            raise HostError("E_SYSCTL_KEY", problem)
        return PROC_SYS_NET / self.family / "conf" / link_name / self.key


def _link_name_problem(name: str) -> str:
    if not name or len(name.encode()) > 15:
        return f"link name {name!r} is not a kernel interface name"
    if name in (".", "..") or "/" in name or "\0" in name:
        return f"link name {name!r} would leave the interface's directory"
    if name in _NAMESPACE_WIDE:
        return f"link name {name!r} names a namespace-wide table, not an interface"
    return ""


def _setns(fd: int) -> None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        raise HostError("E_NETNS_ENTER", f"setns: {os.strerror(ctypes.get_errno())}")


def _open_in(ns_fd: int, paths: Sequence[PurePosixPath], flags: int) -> list[int]:
    """Open ``paths`` inside the namespace ``ns_fd`` from a thread of its own; their fds.
    An ``OSError`` of an open is raised as it is (the caller decides what it means)."""
    opened: list[int] = []
    failure: list[BaseException] = []

    def body() -> None:
        try:
            _setns(ns_fd)
            for path in paths:
                opened.append(os.open(path, flags | os.O_CLOEXEC))
        except BaseException as exc:  # handed to the calling thread
            failure.append(exc)

    thread = threading.Thread(target=body, name="netns-sysctl", daemon=True)
    thread.start()
    thread.join()
    if failure:
        for fd in opened:
            os.close(fd)
        raise failure[0]
    return opened


def _opened(
    env: LinkEnvironment,
    ref: NamespaceRef,
    index: int,
    name: str,
    keys: Sequence[InterfaceSysctl],
    flags: int,
) -> list[int]:
    """The keys' files of the link ``name`` at ``index`` in ``ref``, opened and then proven
    to belong to that link (the link at ``index`` still has that name)."""
    paths = [key.path(name) for key in keys]
    ipr = env.rtnl(ref)  # proves boot and path -> recorded identity first
    try:
        fds = _open_in(env.fd(ref), paths, flags)
    except OSError as exc:
        link = by_index(ipr, index)
        if link is None or link.name != name:
            raise HostError("E_LINK_CHANGED", f"ifindex {index} is no longer {name!r}") from exc
        if exc.errno == errno.ENOENT:
            raise HostError(
                "E_SYSCTL_UNAVAILABLE",
                f"{exc.filename}: the kernel has no such setting for {name!r} "
                "(its protocol may be disabled)",
            ) from exc
        hint = (
            " (/proc/sys is read-only in this process's mount namespace, as container "
            "runtimes mount it for unprivileged containers)"
            if exc.errno == errno.EROFS
            else ""
        )
        raise HostError("E_SYSCTL", f"{exc.filename}: {exc.strerror}{hint}") from exc
    link = by_index(ipr, index)
    if link is None or link.name != name:
        for fd in fds:
            os.close(fd)
        raise HostError("E_LINK_CHANGED", f"ifindex {index} was renamed from {name!r}")
    return fds


def _failed(exc: OSError, key: InterfaceSysctl, name: str) -> HostError:
    if exc.errno == errno.ENOENT:
        return HostError(
            "E_LINK_CHANGED", f"{name!r} was renamed or left while {key.text} was open"
        )
    return HostError("E_SYSCTL", f"{key.text} of {name!r}: {os.strerror(exc.errno or 0)}")


def read_values(
    env: LinkEnvironment,
    ref: NamespaceRef,
    index: int,
    name: str,
    keys: Sequence[InterfaceSysctl],
) -> dict[InterfaceSysctl, int]:
    """The integer value of each key of the link ``name`` at ``index`` in ``ref``."""
    fds = _opened(env, ref, index, name, keys, os.O_RDONLY)
    out: dict[InterfaceSysctl, int] = {}
    try:
        for key, fd in zip(keys, fds, strict=True):
            try:
                raw = os.read(fd, 64).strip()
            except OSError as exc:
                raise _failed(exc, key, name) from exc
            if not _VALUE.fullmatch(raw):
                raise HostError("E_SYSCTL", f"{key.text} of {name!r} reads {raw[:20]!r}")
            out[key] = int(raw)
    finally:
        for fd in fds:
            os.close(fd)
    return out


def write_values(
    env: LinkEnvironment,
    ref: NamespaceRef,
    index: int,
    name: str,
    values: Mapping[InterfaceSysctl, int],
) -> None:
    """Write each value to its key of the link ``name`` at ``index`` in ``ref``, in order.
    The kernel's refusal of a value (``EINVAL``, ``ERANGE``) is ``E_SYSCTL``."""
    keys = list(values)
    fds = _opened(env, ref, index, name, keys, os.O_WRONLY)
    try:
        for key, fd in zip(keys, fds, strict=True):
            try:
                os.write(fd, b"%d\n" % int(values[key]))
            except OSError as exc:
                raise _failed(exc, key, name) from exc
    finally:
        for fd in fds:
            os.close(fd)
