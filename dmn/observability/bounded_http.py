"""HTTP/1.1 serving in which a worker thread only ever sees a whole request.

Why: a server whose workers read their own requests can be starved by clients that connect
and say nothing, or send a byte now and then (slowloris). The webhook once had eight
workers, each blocked up to 30 s on a connection's TLS handshake or request line: eight idle
TCP connections stopped every review and ``/healthz``, and a client trickling one byte every
29 s held a worker for ever, since each read met its timeout afresh.

Here one *reception* thread owns every connection that is not being answered: it does the
TLS handshake and reads the request head and body without blocking, and hands a connection
to the worker pool only once a whole request is buffered. So a worker never waits for a
client, and a client can hold only what the limits give it:

- ``header_timeout``: from accepting a connection (TLS handshake included), or from the first
  byte of a later request on a kept-alive one, to the end of the request head;
  ``request_timeout``: from the same moment to the end of the body. These are deadlines, not
  per-read timeouts, so trickling does not extend them.
- ``idle_timeout``: a kept-alive connection with no request in hand.
- ``max_head`` and ``max_body`` bytes per request, ``max_buffered`` bytes over all connections.
- ``max_connections`` connections in all (being read or being answered). A new connection
  beyond that closes the longest-open connection that has not yet completed a request (a
  client that has proved nothing), else the longest-idle one; if every connection is being
  answered, the new one is closed. The closed ones are counted (``rejected``).
- ``write_timeout``: a worker writing a response to a client that does not read gives up.

A request with a body too large or without a length (``Transfer-Encoding``) is handed over
with its head only and the connection is closed after the answer, since its body was not read.
The reception thread never parses more than the head's ``Content-Length``; the handler (a
:class:`BufferedRequestHandler`, the stdlib handler reading from the buffered bytes) does the
rest, so its error answers (400, 414, 431) are the stdlib's.
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

log = logging.getLogger(__name__)

_CONTENT_LENGTH = re.compile(rb"^content-length[ \t]*:[ \t]*(\S*)[ \t]*\r?$", re.I | re.M)
_TRANSFER_ENCODING = re.compile(rb"^transfer-encoding[ \t]*:", re.I | re.M)


@dataclass(frozen=True)
class Limits:
    """What one client may hold (see the module doc); seconds and bytes."""

    workers: int = 8
    max_connections: int = 256
    header_timeout: float = 10.0
    request_timeout: float = 30.0
    idle_timeout: float = 120.0
    write_timeout: float = 10.0
    max_head: int = 64 * 1024
    max_body: int = 3 * 1024 * 1024
    max_buffered: int = 32 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.workers < 1 or self.max_connections < 1:
            raise ValueError("a server needs at least one worker and one connection")


@dataclass(frozen=True)
class Extent:
    """Where a buffered request ends, and whether its connection must close after the
    answer (its body was not read)."""

    end: int
    close: bool


def request_extent(buffer: bytes | bytearray, max_head: int, max_body: int) -> Extent | None:
    """The extent of the first whole request in ``buffer``; ``None`` while more is needed.

    Raises ``ValueError`` for a head longer than ``max_head`` (the connection is dropped)."""
    crlf = buffer.find(b"\r\n\r\n")
    lf = buffer.find(b"\n\n")
    ends = [i + 4 for i in (crlf,) if i >= 0] + [i + 2 for i in (lf,) if i >= 0]
    if not ends:
        if len(buffer) > max_head:
            raise ValueError("request head too long")
        return None
    head_end = min(ends)
    if head_end > max_head:
        raise ValueError("request head too long")
    head = bytes(buffer[:head_end])
    if _TRANSFER_ENCODING.search(head):
        return Extent(head_end, close=True)
    lengths = {m.group(1) for m in _CONTENT_LENGTH.finditer(head)}
    if not lengths:
        return Extent(head_end, close=False)
    if len(lengths) > 1:
        return Extent(head_end, close=True)
    raw = lengths.pop()
    if not raw.isdigit() or len(raw) > 12 or int(raw) > max_body:
        return Extent(head_end, close=True)
    end = head_end + int(raw)
    return Extent(end, close=False) if len(buffer) >= end else None


@dataclass(eq=False)
class Connection:
    """One client connection and what has been read of its next request."""

    sock: socket.socket
    address: Any
    since: float
    handshaken: bool
    buffer: bytearray = field(default_factory=bytearray)
    #: when the request being read began (accept for a new connection, else its first byte)
    request_start: float | None = None
    #: the head of the request being read is complete (its body is not)
    head_done: bool = False
    #: the TLS layer waits to write before it can read on
    writing: bool = False
    served: int = 0

    def deadline(self, limits: Limits) -> float:
        if self.request_start is None:
            return self.since + limits.idle_timeout
        budget = limits.request_timeout if self.head_done else limits.header_timeout
        return self.request_start + budget


class Reception:
    """The thread that reads connections until each has a whole request (module doc).

    ``deliver(connection, request, close)`` is called on this thread with the connection
    already unwatched; ``drop(connection)`` for one given up on. ``add`` may be called from
    any thread."""

    def __init__(
        self,
        limits: Limits,
        deliver: Callable[[Connection, bytes, bool], None],
        drop: Callable[[Connection], None],
        *,
        busy: Callable[[], int],
        name: str,
    ) -> None:
        self.limits = limits
        self._deliver, self._drop, self._busy = deliver, drop, busy
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._lock = threading.Lock()
        self._incoming: list[Connection] = []
        #: watched connections, oldest first
        self._watched: dict[Connection, None] = {}
        self._stopped = False
        self.rejected = 0
        self._thread = threading.Thread(target=self._run, name=f"{name}-reception", daemon=True)
        self._thread.start()

    def add(self, conn: Connection) -> None:
        with self._lock:
            stopped = self._stopped
            if not stopped:
                self._incoming.append(conn)
        if stopped:
            self._drop(conn)
        else:
            self._wake()

    def __len__(self) -> int:
        with self._lock:
            return len(self._watched) + len(self._incoming)

    def stop(self) -> list[Connection]:
        """Stop reading; the connections still held, for the caller to close."""
        with self._lock:
            self._stopped = True
            left = [*self._watched, *self._incoming]
            self._watched.clear()
            self._incoming.clear()
        self._wake()
        self._thread.join(timeout=5)
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()
        return left

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\0")

    def _run(self) -> None:
        while True:
            with self._lock:
                if self._stopped:
                    return
                incoming, self._incoming = self._incoming, []
            for conn in incoming:
                self._admit(conn)
            now = time.monotonic()
            deadlines = [c.deadline(self.limits) for c in self._watched]
            wait = max(0.0, min(deadlines) - now) if deadlines else None
            try:
                events = self._selector.select(timeout=wait)
            except (OSError, ValueError):
                events = []
            for key, _ in events:
                if key.data is None:
                    with contextlib.suppress(OSError):
                        self._wake_r.recv(4096)
                elif key.data in self._watched:
                    self._progress(key.data)
            now = time.monotonic()
            for conn in [c for c in self._watched if c.deadline(self.limits) <= now]:
                log.info("http connection timed out client=%s", conn.address)
                self._forget(conn)
                self._drop(conn)

    def _admit(self, conn: Connection) -> None:
        if conn.served == 0 and len(self._watched) + self._busy() >= self.limits.max_connections:
            victim = next((c for c in self._watched if c.served == 0), None)
            if victim is None:
                victim = next(iter(self._watched), None)
            self.rejected += 1
            if victim is None:
                log.warning("http server full: connection refused client=%s", conn.address)
                self._drop(conn)
                return
            log.warning("http server full: closed the oldest unproven client=%s", victim.address)
            self._forget(victim)
            self._drop(victim)
        with self._lock:
            self._watched[conn] = None
        try:
            self._selector.register(conn.sock, selectors.EVENT_READ, conn)
        except (OSError, ValueError):
            self._forget(conn)
            self._drop(conn)
            return
        if conn.handshaken and conn.buffer:
            self._take_request(conn)  # pipelined bytes may already hold a whole request

    def _forget(self, conn: Connection) -> None:
        with self._lock:
            self._watched.pop(conn, None)
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._selector.unregister(conn.sock)

    def _want(self, conn: Connection, events: int) -> None:
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._selector.modify(conn.sock, events, conn)

    def _progress(self, conn: Connection) -> None:
        if not conn.handshaken:
            assert isinstance(conn.sock, ssl.SSLSocket)
            try:
                conn.sock.do_handshake()
            except ssl.SSLWantReadError:
                self._want(conn, selectors.EVENT_READ)
                return
            except ssl.SSLWantWriteError:
                self._want(conn, selectors.EVENT_WRITE)
                return
            except (OSError, ValueError):
                self._forget(conn)
                self._drop(conn)
                return
            conn.handshaken = True
            self._want(conn, selectors.EVENT_READ)
        elif conn.writing:
            conn.writing = False
            self._want(conn, selectors.EVENT_READ)
        if not self._read(conn):
            self._forget(conn)
            self._drop(conn)
            return
        self._take_request(conn)

    def _read(self, conn: Connection) -> bool:
        """Read what the socket has; whether the connection is still worth keeping."""
        limit = self.limits.max_head + self.limits.max_body
        while len(conn.buffer) <= limit:
            try:
                data = conn.sock.recv(65536)
            except (ssl.SSLWantReadError, BlockingIOError):
                break
            except ssl.SSLWantWriteError:
                conn.writing = True
                self._want(conn, selectors.EVENT_WRITE)
                break
            except (OSError, ValueError):
                return False
            if not data:
                return False
            if conn.request_start is None:
                conn.request_start = time.monotonic()
            conn.buffer += data
        buffered = sum(len(c.buffer) for c in self._watched)
        if buffered > self.limits.max_buffered:
            log.warning("http server buffers full: closed client=%s", conn.address)
            return False
        return True

    def _take_request(self, conn: Connection) -> None:
        try:
            extent = request_extent(conn.buffer, self.limits.max_head, self.limits.max_body)
        except ValueError:
            log.info("http request head too long client=%s", conn.address)
            self._forget(conn)
            self._drop(conn)
            return
        if extent is None:
            conn.head_done = conn.buffer.find(b"\r\n\r\n") >= 0 or conn.buffer.find(b"\n\n") >= 0
            return
        conn.head_done = False
        self._forget(conn)
        request = bytes(conn.buffer[: extent.end])
        del conn.buffer[: extent.end]
        self._deliver(conn, request, extent.close)


class _SocketWriter(io.BufferedIOBase):
    """A write-only file over a socket: ``sendall`` under the socket's own timeout."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        self._sock.sendall(b)
        with memoryview(b) as view:
            return view.nbytes


class BufferedRequestHandler(BaseHTTPRequestHandler):
    """The stdlib request handler over one request already read in full: its ``rfile`` is
    those bytes, so parsing and ``rfile.read`` never wait for the client."""

    protocol_version = "HTTP/1.1"

    def __init__(self, conn: Connection, request: bytes, server: BoundedHTTPServer) -> None:
        self.request = self.connection = conn.sock
        self.client_address, self.server = conn.address, server
        self.rfile = io.BytesIO(request)
        self.wfile = _SocketWriter(conn.sock)

    def serve(self) -> bool:
        """Answer the request; whether the connection may carry another."""
        self.close_connection = True
        self.handle_one_request()
        return not self.close_connection

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http %s", format % args)


class BoundedHTTPServer(HTTPServer):
    """An HTTPServer serving :class:`BufferedRequestHandler` s on ``limits.workers``
    threads, fed by a :class:`Reception` (module doc). Subclasses may wrap accepted sockets
    (TLS) in :meth:`wrap`."""

    allow_reuse_address = True

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[BufferedRequestHandler],
        limits: Limits,
        *,
        name: str,
    ) -> None:
        super().__init__(address, handler)
        self._handler = handler
        self.limits = limits
        port = self.server_address[1]
        self.pool = ThreadPoolExecutor(
            max_workers=limits.workers, thread_name_prefix=f"{name}-worker-{port}"
        )
        self._lock = threading.Lock()
        #: connections in a worker, their request in hand
        self.busy: set[Connection] = set()
        #: the server is stopping: handlers should close their connection after answering
        self.draining = False
        self.reception = Reception(
            limits, self._deliver, self._close, busy=self._busy_count, name=f"{name}-{port}"
        )

    @property
    def rejected(self) -> int:
        """Connections closed because the server held ``max_connections``."""
        return self.reception.rejected

    def wrap(self, sock: socket.socket) -> socket.socket:
        return sock

    def process_request(self, request: Any, client_address: Any) -> None:
        try:
            request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, True)
            sock = self.wrap(request)
            sock.setblocking(False)
        except (OSError, ValueError):
            self.shutdown_request(request)
            return
        now = time.monotonic()
        conn = Connection(
            sock, client_address, since=now, handshaken=not isinstance(sock, ssl.SSLSocket)
        )
        conn.request_start = now  # a new connection owes its first request head at once
        self.reception.add(conn)

    def _busy_count(self) -> int:
        with self._lock:
            return len(self.busy)

    def _deliver(self, conn: Connection, request: bytes, close: bool) -> None:
        with self._lock:
            self.busy.add(conn)
        try:
            self.pool.submit(self._serve, conn, request, close)
        except RuntimeError:  # the pool is shut down: the server is closing
            self._close(conn)

    def _serve(self, conn: Connection, request: bytes, close: bool) -> None:
        keep = False
        try:
            conn.sock.settimeout(self.limits.write_timeout)
            handler = self._handler(conn, request, self)
            keep = handler.serve() and not close
            conn.sock.setblocking(False)
        except Exception:
            log.info("http connection error client=%s", conn.address)
            keep = False
        if not keep:
            self._close(conn)
            return
        with self._lock:
            self.busy.discard(conn)
        now = time.monotonic()
        conn.since, conn.served = now, conn.served + 1
        conn.request_start = now if conn.buffer else None
        self.reception.add(conn)

    def _close(self, conn: Connection) -> None:
        with self._lock:
            self.busy.discard(conn)
        self.shutdown_request(conn.sock)

    def shutdown_request(self, request: Any) -> None:
        with contextlib.suppress(OSError, ValueError):
            socket.socket.shutdown(request, socket.SHUT_RDWR)  # the TCP socket under TLS
        with contextlib.suppress(OSError, ValueError):
            request.close()

    def server_close(self, grace: float = 0.0) -> None:
        """Stop accepting; for ``grace`` seconds keep answering (handlers see ``draining``)
        until no connection is held; then close every connection not being answered, and
        let the workers finish the answers in hand."""
        super().server_close()
        self.draining = True
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and (self._busy_count() or len(self.reception)):
            time.sleep(0.05)
        for conn in self.reception.stop():
            self._close(conn)
        self.pool.shutdown(wait=False, cancel_futures=True)
