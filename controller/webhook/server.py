"""The admission webhook: HTTPS server for AdmissionReview v1 (``POST /validate``).

Certificates come from files (see :mod:`.tls` for rotation). Connections are served by a
bounded pool of worker threads (``workers``) with at most ``backlog`` more new connections
waiting for one; a connection beyond that is closed at once and counted, so a flood of
connections cannot start a thread each (the server used to) or queue without bound.

A worker handles one request at a time. Between requests a kept-alive connection is
*parked*: watched by one selector thread, holding no worker, and handed back to the pool
when its next request arrives. kube-apiserver keeps many webhook connections open and idle;
when each idle one held a worker blocked on its next request line, ``workers`` of them left
a new connection (a review, or kubelet's readiness probe) waiting for a 30-s read timeout,
and the API server failed that review at its own 10-s timeout. A parked connection is
closed after ``IDLE_TIMEOUT`` (longer than the API server's own 90-s idle limit, so the
client normally retires it first and never races our close), and beyond ``MAX_PARKED`` the
longest-parked one is closed. A pipelined request (one sent before the previous response)
is not served until more bytes arrive: HTTP clients of a webhook do not pipeline.

The server answers ``GET /healthz`` for readiness, and never returns a traceback: malformed
requests get 400, and validation problems are denials with reason-coded causes. Plugins
are read from the API server for every topology review (fail closed if it is unreachable).
"""

from __future__ import annotations

import contextlib
import json
import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

from dmn.api.cluster import Cluster
from dmn.api.cluster import resources as r
from dmn.controller.compile.plugin_sources import plugins_from_objects
from dmn.controller.webhook.review import ReviewContext, review
from dmn.controller.webhook.review_shape import nesting_depth
from dmn.controller.webhook.tls import ReloadingTLS
from dmn.interpreter.loader import Plugin
from dmn.interpreter.source import MAX_DEPTH
from dmn.opcodes.spec import OpcodeRegistry

log = logging.getLogger(__name__)

MAX_BODY = 3 * 1024 * 1024
#: Seconds a connection in a worker may stay silent (TLS handshake and the rest of a
#: request included) before it is dropped, so stalled clients cannot pin workers.
IO_TIMEOUT = 30.0
#: Seconds a parked (idle, kept-alive) connection is kept; kube-apiserver closes its idle
#: connections after 90 s.
IDLE_TIMEOUT = 120.0
#: Parked connections kept at most; each costs a descriptor, not a thread.
MAX_PARKED = 256
#: Worker threads serving connections, and new connections that may wait for a free worker.
DEFAULT_WORKERS = 8
DEFAULT_BACKLOG = 32
#: Seconds a stopping server keeps serving its kept-alive connections (each answered with
#: ``Connection: close``) before it ends those that stayed idle (see ``_Server.server_close``).
DRAIN_GRACE = 2.0


class _Handler(BaseHTTPRequestHandler):
    """One connection. Unlike the stdlib handler it does not loop over requests in its
    constructor: :meth:`serve_next` handles one, and the server decides where the
    connection waits for the next (see the module doc)."""

    server: _Server
    protocol_version = "HTTP/1.1"
    timeout = IO_TIMEOUT
    # a response is two writes (head, body); with Nagle's algorithm the body waited for the
    # client's delayed ACK of the head: 40 ms added to every review, measured on loopback
    disable_nagle_algorithm = True

    def __init__(self, request: Any, client_address: Any, server: _Server) -> None:
        self.request, self.client_address, self.server = request, client_address, server
        self.setup()

    def serve_next(self) -> bool:
        """Handle one request; whether the connection stays open for another."""
        self.close_connection = True
        self.handle_one_request()
        return not self.close_connection

    def parse_request(self) -> bool:
        self.server.mark(self.connection, busy=True)  # a request line came in
        return super().parse_request()

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("webhook %s", format % args)

    def _send(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if self.server.draining:
            # a stopping server must not keep the connection. Said in the response (this
            # header also sets close_connection): a client that is not told keeps the
            # connection for its next request and may write it just as we close —
            # kube-apiserver then fails that admission call with "http: server closed idle
            # connection" (a POST is not retried), seen in the e2e suite
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/healthz":
            self._send(200, {"status": "ok"})
        else:
            self._send(404, {"message": "not found"})

    def do_POST(self) -> None:
        if self.path.split("?")[0] != "/validate":
            self._send(404, {"message": "not found"})
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length <= 0 or length > MAX_BODY:
            self._send(400, {"message": "body missing or too large"})
            return
        try:
            body = json.loads(self.rfile.read(length))
        except RecursionError:
            self._send(200, _denial("", "the body nests too deep"))
            return
        except ValueError:
            self._send(400, {"message": "E_ADMISSION_MALFORMED: the body is not JSON"})
            return
        if nesting_depth(body) > MAX_DEPTH:
            self._send(200, _denial("", f"the body nests deeper than {MAX_DEPTH} levels"))
            return
        request = body.get("request") if isinstance(body, dict) else None
        if not isinstance(body, dict) or body.get("apiVersion") != "admission.k8s.io/v1":
            self._send(200, _denial("", "not an admission.k8s.io/v1 AdmissionReview"))
            return
        if not isinstance(request, dict):
            self._send(200, _denial("", "request must be an object"))
            return
        try:
            response = review(request, self.server.context)
        except Exception:  # review fails closed itself; this is the last line, not a path
            log.exception("admission review raised")
            response = _denial(str(request.get("uid", ""))[:128], "internal error")["response"]
            response["status"]["message"] = "E_ADMISSION_FAILED: internal error"
            response["status"]["details"]["causes"][0]["reason"] = "E_ADMISSION_FAILED"
        self._send(
            200,
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response},
        )


def _denial(uid: str, message: str) -> dict[str, Any]:
    """An AdmissionReview denying a request the server cannot even read as one."""
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {
            "uid": uid,
            "allowed": False,
            "status": {
                "status": "Failure",
                "code": 400,
                "reason": "BadRequest",
                "message": f"E_ADMISSION_MALFORMED: {message}",
                "details": {"causes": [{"reason": "E_ADMISSION_MALFORMED", "message": message}]},
            },
        },
    }


class _Parking:
    """Idle kept-alive connections, watched by one thread: a connection that becomes
    readable (its next request, or the client's close) is handed to ``resume``; one parked
    longer than ``idle_timeout``, or the oldest beyond ``limit``, is handed to ``close``."""

    def __init__(
        self,
        resume: Callable[[_Handler], None],
        close: Callable[[_Handler], None],
        *,
        idle_timeout: float,
        limit: int,
    ) -> None:
        self._resume, self._close = resume, close
        self.idle_timeout, self.limit = idle_timeout, limit
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._lock = threading.Lock()
        #: parked handler -> when it was parked (insertion order: oldest first)
        self._parked: dict[_Handler, float] = {}
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="webhook-parking", daemon=True)
        self._thread.start()

    def park(self, handler: _Handler) -> None:
        overflow: list[_Handler] = []
        with self._lock:
            if self._stopped:
                overflow.append(handler)
            else:
                try:
                    self._selector.register(handler.connection, selectors.EVENT_READ, handler)
                except (OSError, ValueError):  # closed meanwhile
                    overflow.append(handler)
                else:
                    self._parked[handler] = time.monotonic()
                while len(self._parked) > self.limit:
                    overflow.append(self._take(next(iter(self._parked))))
        self._wake()
        for old in overflow:
            self._close(old)

    def __len__(self) -> int:
        with self._lock:
            return len(self._parked)

    def stop(self) -> list[_Handler]:
        """Stop watching; the connections still parked, for the caller to close."""
        with self._lock:
            self._stopped = True
            left = [self._take(h) for h in list(self._parked)]
        self._wake()
        self._thread.join(timeout=5)
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()
        return left

    def _take(self, handler: _Handler) -> _Handler:
        del self._parked[handler]
        with contextlib.suppress(KeyError, ValueError, OSError):
            self._selector.unregister(handler.connection)
        return handler

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\0")

    def _run(self) -> None:
        while True:
            with self._lock:
                if self._stopped:
                    return
                oldest = next(iter(self._parked.values()), None)
            wait = (
                None if oldest is None else max(0.0, oldest + self.idle_timeout - time.monotonic())
            )
            try:
                events = self._selector.select(timeout=wait)
            except (OSError, ValueError):  # a descriptor closed under us: look again
                events = []
            ready: list[_Handler] = []
            expired: list[_Handler] = []
            with self._lock:
                if self._stopped:
                    return
                for key, _ in events:
                    if key.data is None:
                        with contextlib.suppress(OSError):
                            self._wake_r.recv(4096)
                    elif key.data in self._parked:
                        ready.append(self._take(key.data))
                now = time.monotonic()
                while self._parked:
                    handler, since = next(iter(self._parked.items()))
                    if now - since < self.idle_timeout:
                        break
                    expired.append(self._take(handler))
            for handler in ready:
                self._resume(handler)
            for handler in expired:
                self._close(handler)


class _Server(HTTPServer):
    """An HTTPServer whose connections run on a bounded worker pool, parking idle kept-alive
    connections between requests (see the module doc)."""

    allow_reuse_address = True
    context: ReviewContext
    tls: ReloadingTLS

    def __init__(self, address: tuple[str, int], workers: int, backlog: int) -> None:
        super().__init__(address, _Handler)
        # the bound port in the thread names: the workers of one server are told apart from
        # another's (or a stopped one's, still exiting) in a thread dump
        self.pool = ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix=f"webhook-worker-{self.server_address[1]}"
        )
        self._slots = threading.BoundedSemaphore(workers + backlog)
        self._count = threading.Lock()
        self.rejected = 0
        #: accepted connections not yet picked up by a worker
        self.waiting = 0
        #: connections in a worker -> whether a request of theirs is being handled (else
        #: the worker waits for a handshake or a request line)
        self._serving: dict[Any, bool] = {}
        #: the server is stopping: responses close their connection (see server_close)
        self.draining = False
        self.parking = _Parking(
            self._resume, self._close_handler, idle_timeout=IDLE_TIMEOUT, limit=MAX_PARKED
        )

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, addr = super().get_request()
        # Handshake happens on first read, in the worker thread, with the current pair.
        wrapped = self.tls.context().wrap_socket(
            sock, server_side=True, do_handshake_on_connect=False
        )
        return wrapped, addr

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            self.rejected += 1
            log.warning("webhook busy: connection refused client=%s", client_address)
            self.shutdown_request(request)
            return
        with self._count:
            self.waiting += 1
        try:
            self.pool.submit(self._serve_new, request, client_address)
        except RuntimeError:  # the pool is shut down: the server is closing
            with self._count:
                self.waiting -= 1
            self._slots.release()
            self.shutdown_request(request)

    def _serve_new(self, request: Any, client_address: Any) -> None:
        """A new connection: its first request, in the slot it was admitted with."""
        with self._count:
            self.waiting -= 1
            self._serving[request] = False
        try:
            try:
                handler = _Handler(request, client_address, self)
            except Exception:
                self.handle_error(request, client_address)
                self._done(request, None)
                return
            self._serve(handler)
        finally:
            self._slots.release()

    def _resume(self, handler: _Handler) -> None:
        """A parked connection has its next request (or its client closed it)."""
        with self._count:
            self._serving[handler.request] = False
        try:
            self.pool.submit(self._serve, handler)
        except RuntimeError:  # the pool is shut down: the server is closing
            self._done(handler.request, handler)

    def _serve(self, handler: _Handler) -> None:
        keep = False
        try:
            keep = handler.serve_next()
        except Exception:
            self.handle_error(handler.request, handler.client_address)
        if not keep:
            self._done(handler.request, handler)
            return
        with self._count:
            self._serving.pop(handler.request, None)
        try:
            pending = handler.request.pending()
        except (OSError, ValueError):
            pending = 0
        if pending:  # already-decrypted bytes the selector cannot see
            self._resume(handler)
        else:
            self.parking.park(handler)

    def mark(self, conn: Any, *, busy: bool) -> None:
        with self._count:
            if conn in self._serving:
                self._serving[conn] = busy

    def _done(self, request: Any, handler: _Handler | None) -> None:
        with self._count:
            self._serving.pop(request, None)
        if handler is not None:
            with contextlib.suppress(Exception):
                handler.finish()
        self.shutdown_request(request)

    def _close_handler(self, handler: _Handler) -> None:
        self._done(handler.request, handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.info("webhook connection error client=%s", client_address)

    def server_close(self, grace: float = DRAIN_GRACE) -> None:
        """Stop accepting, drain, then end what stayed idle.

        kube-apiserver keeps its webhook connections open and sends later reviews over them,
        also to a replica that is shutting down (its endpoint view lags). For ``grace``
        seconds every request on them is still answered, with ``Connection: close``, which
        retires that connection cleanly; then the parked connections (no request in hand)
        are closed, and a worker answering a request finishes it. Why: interpreter exit
        joins the pool's threads, so idle connections must not keep a worker — the
        controller once took 30 s to exit on SIGTERM (the lab's ``down`` killed it after
        20 s) — while closing at once lost reviews already on their way (the e2e rollout
        probe saw them time out)."""
        super().server_close()
        self.draining = True
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            with self._count:
                if not self._serving and not len(self.parking):
                    break
            time.sleep(0.05)
        for handler in self.parking.stop():
            self._close_handler(handler)
        with self._count:
            idle = [conn for conn, busy in self._serving.items() if not busy]
        for conn in idle:  # waiting for a request line or a handshake: end its read side
            with contextlib.suppress(OSError):
                socket.socket.shutdown(conn, socket.SHUT_RD)  # the TCP socket under TLS
        self.pool.shutdown(wait=False, cancel_futures=True)


class WebhookServer:
    def __init__(
        self,
        cluster: Cluster | None,
        registry: OpcodeRegistry,
        *,
        cert_file: str,
        key_file: str,
        host: str = "127.0.0.1",
        port: int = 0,
        controller_users: frozenset[str] = frozenset(),
        workers: int = DEFAULT_WORKERS,
        backlog: int = DEFAULT_BACKLOG,
    ) -> None:
        if workers < 1 or backlog < 0:
            raise ValueError("the webhook needs at least one worker and a backlog >= 0")
        self.cluster = cluster
        self.workers, self.backlog = workers, backlog
        self.tls = ReloadingTLS(cert_file, key_file)
        self.context = ReviewContext(
            registry=registry,
            plugins=self._plugins,
            controller_users=controller_users,
            pools=self._pools if cluster is not None else None,
        )
        self.host, self.port = host, port
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    def _plugins(self) -> dict[str, Plugin]:
        if self.cluster is None:
            from dmn.interpreter.loader import load_builtin_plugins

            return load_builtin_plugins()
        plugins, _ = plugins_from_objects(self.cluster.list(r.NETWORK_PLUGINS).items)
        return plugins

    def _pools(self) -> list[dict[str, Any]]:
        """IPPools as the cluster has them now (an IPPool's subnets may overlap none)."""
        assert self.cluster is not None
        return self.cluster.list(r.IP_POOLS).items

    @property
    def rejected(self) -> int:
        """Connections closed unserved because every worker and backlog slot was taken."""
        return self._httpd.rejected if self._httpd is not None else 0

    @property
    def url(self) -> str:
        assert self._httpd is not None
        host, port = self._httpd.server_address[:2]
        return f"https://{host!s}:{port}"

    def start(self) -> str:
        httpd = _Server((self.host, self.port), self.workers, self.backlog)
        httpd.context = self.context
        httpd.tls = self.tls
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.2}, name="webhook", daemon=True
        )
        self._thread.start()
        log.info("webhook serving url=%s", self.url)
        return self.url

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None
