"""The namespace environment ``linux/*`` executors receive through ``EffectContext.env``.

An executor never opens a namespace by a name or path taken from configuration. It gets one
:class:`LinkEnvironment` from the agent (or a test) naming three things:

* the **host** namespace (on a node the agent's own; in tests a scratch namespace standing in
  for it, so that nothing touches the machine's real host namespace);
* the call's verified **sandbox**, as a :class:`NamespaceRef` (identity + persistent pin path),
  or None for calls that have no sandbox (prepare);
* a ``pins`` callable listing every pinned namespace the journal still knows about, which
  cleanup and recovery search for a link that is absent from where it was expected (a moved
  interface missing from the host may be in a live sandbox, design §8.5).

A namespace is opened only after its path is proved to be the recorded (dev, inode) of this
boot; a stale or reused pin is refused. Netlink sockets are cached per namespace identity —
per environment, or across environments in a :class:`WarmNamespaces` (issue 15: the agent
keeps each pinned sandbox's fd and sockets open until the pin is released; per thread, see
:class:`WarmNamespaces`). Either way every
environment proves each path→identity again on first use, so a released or replaced pin is
refused exactly as before; a cached socket itself can only ever talk to the namespace it was
created in (it holds that namespace alive, so its identity cannot be reused).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyroute2 import IPRoute

from dmn.host.errors import HostError
from dmn.host.rtnetlink.link_reader import LinkReader
from dmn.vocabulary.handles import NamespaceIdentity, Scope
from dmn.vocabulary.terms import ScopeKind

_log = logging.getLogger(__name__)

BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")
SELF_NETNS = "/proc/self/ns/net"
THREAD_NETNS = "/proc/thread-self/ns/net"
CLONE_NEWNET = 0x40000000
NETLINK_ROUTE = 0
_setns_lock = threading.Lock()
_libc: ctypes.CDLL | None = None


def _setns(fd: int) -> None:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise HostError("E_NETNS_ENTER", f"setns: {os.strerror(err)}")


def netlink_socket_in(ns_fd: int) -> int:
    """A NETLINK_ROUTE socket created inside the namespace ``ns_fd``; returns its fd."""
    return netlink_sockets_in(ns_fd, 1)[0]


def netlink_sockets_in(ns_fd: int, count: int, protocol: int = NETLINK_ROUTE) -> list[int]:
    """``count`` netlink sockets (NETLINK_ROUTE unless ``protocol`` says otherwise) created
    inside the namespace ``ns_fd``; their fds.

    The calling thread enters the namespace only for the ``socket()`` calls and returns at
    once (a socket stays bound to the namespace it was created in). This costs microseconds
    where forking a helper process, as pyroute2's ``netns=`` does, costs milliseconds.
    """
    socks: list[socket.socket] = []
    with _setns_lock:
        own = os.open(THREAD_NETNS, os.O_RDONLY | os.O_CLOEXEC)
        try:
            _setns(ns_fd)
            try:
                for _ in range(count):
                    socks.append(socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, protocol))
            finally:
                _setns(own)
        except BaseException:
            for sock in socks:
                sock.close()
            raise
        finally:
            os.close(own)
    return [sock.detach() for sock in socks]


_boot_id: str | None = None


def current_boot_id() -> str:
    """The running kernel's boot id, read once per process: it cannot change while the
    process lives (a reboot ends it), and every namespace identity check asks for it."""
    global _boot_id
    if _boot_id is None:
        _boot_id = BOOT_ID_PATH.read_text().strip()
    return _boot_id


def identity_of(path: str | Path) -> NamespaceIdentity:
    """The (dev, inode) of the network namespace behind ``path`` (nsfs file or bind mount)."""
    st = os.stat(path)
    return NamespaceIdentity(dev=st.st_dev, inode=st.st_ino, boot_id=current_boot_id())


@dataclass(frozen=True, slots=True)
class NamespaceRef:
    """A namespace by identity plus the path that opens it (a pin, or the host's ns file)."""

    identity: NamespaceIdentity
    path: str

    def to_json(self) -> dict[str, Any]:
        return {"identity": self.identity.to_json(), "path": self.path}

    @classmethod
    def from_json(cls, data: Any) -> NamespaceRef:
        return cls(NamespaceIdentity.from_json(data["identity"]), str(data["path"]))

    @classmethod
    def at(cls, path: str | Path) -> NamespaceRef:
        return cls(identity_of(path), str(path))


class NamespaceRtnl(IPRoute):  # type: ignore[misc]
    """pyroute2's IPRoute for writes, plus a :class:`LinkReader` on a second socket of the
    same namespace for the many link reads executors make (see ``link_reader.py``)."""

    link_reader: LinkReader | None = None

    def close(self, *args: Any, **kwargs: Any) -> None:
        if self.link_reader is not None:
            self.link_reader.close()
            self.link_reader = None
        super().close(*args, **kwargs)


class LazyRtnl:
    """A namespace's rtnetlink handle: its :class:`LinkReader` open now, the pyroute2 socket
    (:class:`NamespaceRtnl`) only when something the lean reader and writer do not cover
    is asked of it (any other attribute).

    Why: the executors' reads and hot writes go out on the reader (``links.py``), but every
    new namespace still paid for a pyroute2 ``IPRoute`` — an asyncio event loop and a
    second socket opened by setns — that RunPodSandbox's macvlan attach never used (4.6 %
    of the agent's RunPodSandbox samples in ``benchmarks/pod_storm.py``)."""

    def __init__(self, link_reader: LinkReader, ns_fd: int) -> None:
        """``ns_fd`` is duplicated: the socket opened later is in exactly this namespace,
        whatever becomes of the caller's fd (a socket holds its namespace as long)."""
        self.link_reader: LinkReader | None = link_reader
        self._ns_fd: int | None = os.dup(ns_fd)
        self._ipr: NamespaceRtnl | None = None

    @property
    def opened(self) -> bool:
        """Whether the pyroute2 socket was needed (tests)."""
        return self._ipr is not None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_ns_fd", "_ipr", "link_reader"):
            raise AttributeError(name)
        if self._ipr is None:
            if self._ns_fd is None:
                raise RuntimeError("rtnetlink handle used after close")  # a bug, not input
            self._ipr = NamespaceRtnl(fileno=netlink_sockets_in(self._ns_fd, 1)[0])
        return getattr(self._ipr, name)

    def close(self) -> None:
        if self.link_reader is not None:
            self.link_reader.close()
            self.link_reader = None
        if self._ipr is not None:
            self._ipr.close()
            self._ipr = None
        if self._ns_fd is not None:
            os.close(self._ns_fd)
            self._ns_fd = None


def _close_quietly(sock: Any) -> None:
    try:
        sock.close()
    except Exception:  # a socket of another (or a dead) thread: its fd is closed anyway
        _log.debug("event=warm-socket-close-failed", exc_info=True)


@dataclass
class _ThreadWarm:
    """One thread's warm entries by namespace identity, how many of its environments are
    open (``depth``), and the namespaces :meth:`WarmNamespaces.forget` retired while it was
    inside one (still usable by it; closed when it leaves its last)."""

    sockets: dict[tuple[int, int], Any] = field(default_factory=dict)
    readers: dict[tuple[int, int], LinkReader] = field(default_factory=dict)
    fds: dict[tuple[int, int], int] = field(default_factory=dict)
    depth: int = 0
    retired: set[tuple[int, int]] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.sockets or self.readers or self.fds)

    def take(self, key: tuple[int, int]) -> list[Any]:
        """Remove and return what is open for one namespace (sockets, readers, fds)."""
        out: list[Any] = []
        for table in (self.sockets, self.readers, self.fds):
            if key in table:
                out.append(table.pop(key))
        return out

    def take_all(self) -> list[Any]:
        out = [*self.sockets.values(), *self.readers.values(), *self.fds.values()]
        self.sockets.clear()
        self.readers.clear()
        self.fds.clear()
        return out


def _close_entries(entries: Sequence[Any]) -> None:
    for entry in entries:
        if isinstance(entry, int):
            try:
                os.close(entry)
            except OSError:
                _log.debug("event=warm-fd-close-failed", exc_info=True)
        else:
            _close_quietly(entry)


class WarmNamespaces:
    """Namespace fds and netlink sockets kept open across calls, by namespace identity.

    Owned by whoever owns the pins (the agent's :class:`NamespacePins`): :meth:`forget` closes
    one namespace's entries when its pin is released, :meth:`close` all of them.

    Per thread, all of it (issue 13: the node lock is per claim and sandbox, so calls of
    different Pods run in different threads at once): a netlink socket is not safe for
    concurrent requests (replies of one would be read by the other), pyroute2's socket
    objects are bound to the thread that made them, and a namespace fd shared between threads
    could be closed by :meth:`forget` under a thread about to use it — and its number reused
    by an unrelated file. So each thread has its own fds, readers and sockets, and uses only
    its own; :meth:`forget` closes a thread's entries at once when that thread is inside no
    :class:`LinkEnvironment`, else they stay usable for the rest of that call (as if the call
    had run before the release) and that thread closes them when it leaves its last
    environment (until then they keep only that namespace alive). A dead thread's entries
    are closed.
    """

    def __init__(self) -> None:
        self.by_thread: dict[threading.Thread, _ThreadWarm] = {}
        self._lock = threading.Lock()

    def _own(self) -> tuple[_ThreadWarm, list[Any]]:
        """The calling thread's entries, and what dead threads left (to close); under the
        lock."""
        dead = [t for t in self.by_thread if not t.is_alive()]
        stale = [e for t in dead for e in self.by_thread.pop(t).take_all()]
        own = self.by_thread.setdefault(threading.current_thread(), _ThreadWarm())
        return own, stale

    def enter(self) -> _ThreadWarm:
        """An environment of the calling thread opens: its entries (used by that thread
        only) until :meth:`leave`."""
        with self._lock:
            own, stale = self._own()
            own.depth += 1
        _close_entries(stale)
        return own

    def leave(self, own: _ThreadWarm) -> None:
        """The environment :meth:`enter` returned ``own`` for is closed; at depth 0 what was
        retired meanwhile is closed."""
        closing: list[Any] = []
        with self._lock:
            own.depth -= 1
            if own.depth == 0:
                for key in own.retired:
                    closing.extend(own.take(key))
                own.retired.clear()
        _close_entries(closing)

    def _mine(self) -> _ThreadWarm:
        with self._lock:
            own, stale = self._own()
        _close_entries(stale)
        return own

    @property
    def sockets(self) -> dict[tuple[int, int], Any]:
        """The calling thread's pyroute2 sockets by namespace identity."""
        return self._mine().sockets

    @property
    def readers(self) -> dict[tuple[int, int], LinkReader]:
        """The calling thread's link readers by namespace identity."""
        return self._mine().readers

    @property
    def fds(self) -> dict[tuple[int, int], int]:
        """The calling thread's namespace fds by namespace identity."""
        return self._mine().fds

    def forget(self, identity: NamespaceIdentity) -> None:
        """Close what is open for one namespace (its pin is being released): now for every
        thread inside no environment, at the end of its last one for the others."""
        key = (identity.dev, identity.inode)
        now: list[Any] = []
        with self._lock:
            for warm in self.by_thread.values():
                if warm.depth:
                    warm.retired.add(key)  # in use: its thread closes it when it leaves
                else:
                    now.extend(warm.take(key))
        _close_entries(now)

    def close(self) -> None:
        """Close everything (the owner is done: no environment is open any more; a thread
        still inside one closes its entries when it leaves)."""
        now: list[Any] = []
        with self._lock:
            for warm in self.by_thread.values():
                if warm.depth:
                    warm.retired.update({*warm.sockets, *warm.readers, *warm.fds})
                else:
                    now.extend(warm.take_all())
        _close_entries(now)


@dataclass
class LinkEnvironment:
    """Namespace access for one call. Close it (or use ``with``) to release sockets and fds
    (those of a shared :class:`WarmNamespaces` stay open for the next call)."""

    host: NamespaceRef
    sandbox: NamespaceRef | None = None
    pins: Callable[[], Sequence[NamespaceRef]] = tuple
    state_dir: Path | None = None
    warm: WarmNamespaces | None = None
    _sockets: dict[tuple[int, int], Any] = field(default_factory=dict)
    _readers: dict[tuple[int, int], LinkReader] = field(default_factory=dict)
    _fds: dict[tuple[int, int], int] = field(default_factory=dict)
    _verified: set[tuple[int, int]] = field(default_factory=set)
    _entered: _ThreadWarm | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.warm is not None:
            # the creating thread's warm entries: an environment is used by one thread
            self._entered = self.warm.enter()
            self._sockets, self._readers, self._fds = (
                self._entered.sockets,
                self._entered.readers,
                self._entered.fds,
            )

    @classmethod
    def for_host(cls, host_path: str | Path = SELF_NETNS, **kwargs: Any) -> LinkEnvironment:
        return cls(host=NamespaceRef.at(host_path), **kwargs)

    def __enter__(self) -> LinkEnvironment:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._verified.clear()
        if self.warm is not None:
            if self._entered is not None:  # the owner of the warm namespaces closes them
                self.warm.leave(self._entered)
                self._entered = None
            return
        for sock in self._sockets.values():
            sock.close()
        for reader in self._readers.values():
            reader.close()
        self._readers.clear()
        for fd in self._fds.values():
            os.close(fd)
        self._sockets.clear()
        self._fds.clear()

    # ---------------------------------------------------------------- resolution

    def known(self) -> list[NamespaceRef]:
        """Host, the call's sandbox and every pinned namespace, each once."""
        refs = [self.host]
        if self.sandbox is not None:
            refs.append(self.sandbox)
        refs.extend(self.pins())
        seen: set[tuple[int, int]] = set()
        out = []
        for ref in refs:
            key = (ref.identity.dev, ref.identity.inode)
            if key not in seen:
                seen.add(key)
                out.append(ref)
        return out

    def ref_for(self, identity: NamespaceIdentity) -> NamespaceRef:
        """The known namespace with this identity, or E_NETNS_UNKNOWN."""
        for ref in self.known():
            if (ref.identity.dev, ref.identity.inode) == (identity.dev, identity.inode):
                return ref
        raise HostError(
            "E_NETNS_UNKNOWN", f"no pinned namespace with identity {identity.to_json()}"
        )

    def ref_for_scope(self, scope: Scope) -> NamespaceRef:
        if scope.kind is ScopeKind.HOST:
            return self.host
        if scope.netns is None:
            raise HostError("E_NETNS_UNKNOWN", "sandbox-scoped handle without a namespace")
        return self.ref_for(scope.netns)

    def require_sandbox(self) -> NamespaceRef:
        if self.sandbox is None:
            raise HostError("E_NO_SANDBOX", "this opcode needs the call's verified sandbox")
        return self.sandbox

    def is_host(self, ref: NamespaceRef) -> bool:
        return (ref.identity.dev, ref.identity.inode) == (
            self.host.identity.dev,
            self.host.identity.inode,
        )

    def _verify_once(self, ref: NamespaceRef) -> None:
        """:meth:`_verify` on this environment's first use of the namespace, also when a
        warm socket for it exists (so a released or replaced pin is refused as before)."""
        key = (ref.identity.dev, ref.identity.inode)
        if key not in self._verified:
            self._verify(ref)
            self._verified.add(key)

    def _verify(self, ref: NamespaceRef) -> None:
        if ref.identity.boot_id and ref.identity.boot_id != current_boot_id():
            raise HostError("E_NETNS_STALE", f"{ref.path} was pinned in another boot")
        try:
            live = identity_of(ref.path)
        except OSError as exc:
            raise HostError("E_NETNS_GONE", f"{ref.path}: {exc.strerror}") from exc
        if (live.dev, live.inode) != (ref.identity.dev, ref.identity.inode):
            raise HostError(
                "E_NETNS_MISMATCH", f"{ref.path} no longer holds the recorded namespace"
            )

    def rtnl(self, ref: NamespaceRef) -> Any:
        """A verified, cached rtnetlink socket inside ``ref``."""
        key = (ref.identity.dev, ref.identity.inode)
        self._verify_once(ref)
        sock = self._sockets.get(key)
        if sock is None:
            own = identity_of(THREAD_NETNS)
            if (own.dev, own.inode) == key:
                sock = NamespaceRtnl()
                sock.link_reader = LinkReader()
            else:
                fd = self.fd(ref)
                (read_fd,) = netlink_sockets_in(fd, 1)
                sock = LazyRtnl(LinkReader(read_fd), fd)
            self._sockets[key] = sock
        return sock

    def reader(self, ref: NamespaceRef) -> LinkReader:
        """A verified link reader inside ``ref`` without a pyroute2 socket: what scans of
        many namespaces (every pin) use, where only reads are needed. Reuses the reader of
        an already open :meth:`rtnl` socket."""
        key = (ref.identity.dev, ref.identity.inode)
        self._verify_once(ref)
        sock = self._sockets.get(key)
        if sock is not None and sock.link_reader is not None:
            return sock.link_reader  # type: ignore[no-any-return]
        reader = self._readers.get(key)
        if reader is None:
            own = identity_of(THREAD_NETNS)
            if (own.dev, own.inode) == key:
                reader = LinkReader()
            else:
                reader = LinkReader(netlink_socket_in(self.fd(ref)))
            self._readers[key] = reader
        return reader

    def fd(self, ref: NamespaceRef) -> int:
        """An open fd of the namespace (for ``IFLA_NET_NS_FD``), verified after opening."""
        key = (ref.identity.dev, ref.identity.inode)
        fd = self._fds.get(key)
        if fd is not None and self.warm is not None:
            self._verify_once(ref)  # a warm fd: prove the pin still holds it, once per call
        if fd is None:
            fd = os.open(ref.path, os.O_RDONLY | os.O_CLOEXEC)
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != key:
                os.close(fd)
                raise HostError(
                    "E_NETNS_MISMATCH", f"{ref.path} no longer holds the recorded namespace"
                )
            self._fds[key] = fd
        return fd

    def scope_of(self, ref: NamespaceRef) -> Scope:
        if self.is_host(ref):
            return Scope(ScopeKind.HOST)
        return Scope(ScopeKind.SANDBOX, ref.identity)
