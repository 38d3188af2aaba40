"""A TLS reverse proxy that can hold back one client's watch events of chosen resources.

Why: thick Multus (``multus-daemon``) answers ADD from informer caches, so what it does
with a Pod patched just before its sandbox depends on whether the patch's watch event
arrived first. On an idle lab it almost always does; to show what a late event does,
deterministically, the lab puts this proxy between the daemon and the API server and a
test holds the Pods' watch streams while it patches. Lab tooling only.

Contract:

* serves TLS on 127.0.0.1 with ``cert``/``key`` and offers only HTTP/1.1 (ALPN), so every
  request of the client is a request of its own here (no HTTP/2 multiplexing); each is
  forwarded with ``Connection: close`` and without ``Accept-Encoding`` (see
  :func:`forwarded_head`) over a new TLS connection to the API server,
  verified against ``upstream_ca``, and the answer relayed byte for byte; requests and
  authentication (the client's bearer token) pass unchanged;
* a watch request (``watch=true``/``watch=1`` in the query, or ``/watch/`` in the path) of
  a resource whose plural :meth:`hold` named relays nothing more while held: bytes the API
  server sends meanwhile wait in the proxy (and the kernel) until :meth:`release`; bytes
  already relayed before :meth:`hold` returned are never held back. Nothing else is held;
* :meth:`delivered` says whether bytes relayed to the client on a resource's watches
  contain a marker (for Pods, a protobuf stream: names and annotation values appear as
  they are), so a caller can wait until the client has been sent an event.
"""

from __future__ import annotations

import contextlib
import re
import socket
import socketserver
import ssl
import threading
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

_HEAD_END = b"\r\n\r\n"
_MAX_HEAD = 64 * 1024
_KEEP = 4 * 1024 * 1024
_WATCH_PATH = re.compile(r"/watch/")


def watched_resource(target: str) -> str | None:
    """The resource plural a request target watches, or None when it is not a watch."""
    parts = urlsplit(target)
    query = parse_qs(parts.query)
    watching = query.get("watch", [""])[0] in ("true", "1") or bool(_WATCH_PATH.search(parts.path))
    if not watching:
        return None
    segments = [s for s in parts.path.split("/") if s and s != "watch"]
    return segments[-1] if segments else None


_DROPPED_HEADERS = (b"connection:", b"accept-encoding:")


def forwarded_head(head: bytes) -> bytes:
    """The request head as the gate sends it upstream: ``Connection: close`` instead of
    the client's, and no ``Accept-Encoding`` — kube-apiserver v1.37.2 gzips a watch-list
    stream (``sendInitialEvents=true``) for a client that accepts it, and on the lab an event
    after the initial ones did not reach such a client for as long as it was watched (45 s
    with curl, both over HTTP/2 directly and through this gate), where the same request
    without ``Accept-Encoding`` got it at once. Go's transport decodes only what it asked
    to be compressed, so the client reads the plain stream unchanged."""
    lines = head.split(b"\r\n")
    kept = [lines[0]] + [
        line for line in lines[1:] if line and not line.lower().startswith(_DROPPED_HEADERS)
    ]
    return b"\r\n".join([*kept, b"Connection: close", b"", b""])


class WatchGate:
    """See the module docstring. ``start`` returns the port; ``close`` stops serving."""

    def __init__(self, upstream: tuple[str, int], upstream_ca: Path, cert: Path, key: Path) -> None:
        self.upstream = upstream
        self._server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._server_tls.load_cert_chain(cert, key)
        self._server_tls.set_alpn_protocols(["http/1.1"])
        self._client_tls = ssl.create_default_context(cafile=str(upstream_ca))
        self._cond = threading.Condition()
        self._held: set[str] = set()
        self._relayed: dict[str, bytearray] = {}
        #: every watch request seen, in order, with the bytes relayed on it (diagnostics)
        self.watches: list[list[object]] = []
        self._server: socketserver.ThreadingTCPServer | None = None
        self.port = 0

    # --- control -----------------------------------------------------------------------

    def hold(self, resource: str) -> None:
        with self._cond:
            self._held.add(resource)

    def release(self, resource: str) -> None:
        with self._cond:
            self._held.discard(resource)
            self._cond.notify_all()

    def delivered(self, resource: str, marker: bytes) -> bool:
        with self._cond:
            return marker in self._relayed.get(resource, b"")

    # --- serving -----------------------------------------------------------------------

    def start(self) -> int:
        gate = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                with contextlib.suppress(OSError, ssl.SSLError):
                    gate._serve(self.request)

        server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        self._server = server
        threading.Thread(target=server.serve_forever, name="watch-gate", daemon=True).start()
        self.port = int(server.server_address[1])
        return self.port

    def close(self) -> None:
        with self._cond:
            self._held.clear()
            self._cond.notify_all()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def _serve(self, raw: socket.socket) -> None:
        with self._server_tls.wrap_socket(raw, server_side=True) as client:
            head, body = _read_request(client)
            if head is None:
                return
            target = head.split(b"\r\n", 1)[0].split(b" ")[1].decode("latin-1")
            resource = watched_resource(target)
            seen: list[object] = [target, 0]
            if resource is not None:
                with self._cond:
                    self.watches.append(seen)
            with (
                socket.create_connection(self.upstream, timeout=None) as plain,
                self._client_tls.wrap_socket(plain, server_hostname=self.upstream[0]) as up,
            ):
                up.sendall(forwarded_head(head) + body)
                while True:
                    data = up.recv(65536)
                    if not data:
                        return
                    if resource is not None:
                        self._wait_open(resource)
                    client.sendall(data)
                    if resource is not None:
                        self._record(resource, data)
                        seen[1] = int(str(seen[1])) + len(data)

    def _wait_open(self, resource: str) -> None:
        with self._cond:
            self._cond.wait_for(lambda: resource not in self._held)

    def _record(self, resource: str, data: bytes) -> None:
        with self._cond:
            kept = self._relayed.setdefault(resource, bytearray())
            kept += data
            if len(kept) > _KEEP:
                del kept[: len(kept) - _KEEP]


def _read_request(client: ssl.SSLSocket) -> tuple[bytes | None, bytes]:
    """One request's head (through the blank line) and its body (``Content-Length``)."""
    data = b""
    while _HEAD_END not in data:
        chunk = client.recv(65536)
        if not chunk or len(data) > _MAX_HEAD:
            return None, b""
        data += chunk
    head, _, body = data.partition(_HEAD_END)
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = client.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + _HEAD_END, body
