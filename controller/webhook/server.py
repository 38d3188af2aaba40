"""The admission webhook: HTTPS server for AdmissionReview v1 (``POST /validate``).

Certificates come from files (see :mod:`.tls` for rotation). Connections are served by a
bounded pool of worker threads (``workers``) with at most ``backlog`` more waiting for one;
a connection beyond that is closed at once and counted, so a flood of connections cannot
start a thread each (the server used to) or queue without bound. The server answers
``GET /healthz`` for readiness, and never returns a traceback: malformed
requests get 400, and validation problems are denials with reason-coded causes.
Plugins are read from the API server for every topology review (fail closed if it is
unreachable).
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

from dmn.api.cluster import Cluster
from dmn.api.cluster import resources as r
from dmn.controller.compile.plugin_sources import plugins_from_objects
from dmn.controller.webhook.review import ReviewContext, review
from dmn.controller.webhook.tls import ReloadingTLS
from dmn.interpreter.loader import Plugin
from dmn.opcodes.spec import OpcodeRegistry

log = logging.getLogger(__name__)

MAX_BODY = 3 * 1024 * 1024
#: Seconds a connection may stay silent (TLS handshake included) before it is dropped, so
#: idle or stalled clients cannot pin handler threads.
IO_TIMEOUT = 30.0
#: Worker threads serving connections, and connections that may wait for a free worker.
DEFAULT_WORKERS = 8
DEFAULT_BACKLOG = 32
#: Seconds a stopping server keeps serving its kept-alive connections (each answered with
#: ``Connection: close``) before it ends those that stayed idle (see ``_Server.server_close``).
DRAIN_GRACE = 2.0


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    timeout = IO_TIMEOUT

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("webhook %s", format % args)

    def _send(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if self.server.waiting > 0 or self.server.draining:
            # a kept-alive idle connection must not hold a worker others wait for, nor keep
            # a stopping server alive. Said in the response (this header also sets
            # close_connection): a client that is not told keeps the connection for its next
            # request and may write it just as we close — kube-apiserver then fails that
            # admission call with "http: server closed idle connection" (a POST is not
            # retried), seen in the e2e suite
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)
        self.server.mark(self.connection, busy=False)

    def parse_request(self) -> bool:
        self.server.mark(self.connection, busy=True)  # a request line came in
        return super().parse_request()

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
            request = body["request"]
            if body.get("apiVersion") != "admission.k8s.io/v1" or not isinstance(request, dict):
                raise ValueError("not an admission.k8s.io/v1 AdmissionReview")
        except (ValueError, KeyError, TypeError) as exc:
            self._send(400, {"message": f"bad AdmissionReview: {exc}"})
            return
        response = review(request, self.server.context)
        self._send(
            200,
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response},
        )


class _Server(HTTPServer):
    """An HTTPServer whose connections run on a bounded worker pool (see the module doc)."""

    allow_reuse_address = True
    context: ReviewContext
    tls: ReloadingTLS

    def __init__(self, address: tuple[str, int], workers: int, backlog: int) -> None:
        super().__init__(address, _Handler)
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="webhook-worker")
        self._slots = threading.BoundedSemaphore(workers + backlog)
        self._count = threading.Lock()
        self.rejected = 0
        #: accepted connections not yet picked up by a worker
        self.waiting = 0
        #: connections a worker is serving -> whether a request of it is being handled
        self._serving: dict[socket.socket, bool] = {}
        #: the server is stopping: responses close their connection (see server_close)
        self.draining = False

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
            self.pool.submit(self._serve_one, request, client_address)
        except RuntimeError:  # the pool is shut down: the server is closing
            with self._count:
                self.waiting -= 1
            self._slots.release()
            self.shutdown_request(request)

    def _serve_one(self, request: Any, client_address: Any) -> None:
        with self._count:
            self.waiting -= 1
            self._serving[request] = False
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            with self._count:
                self._serving.pop(request, None)
            self.shutdown_request(request)
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.info("webhook connection error client=%s", client_address)

    def mark(self, conn: socket.socket, *, busy: bool) -> None:
        with self._count:
            if conn in self._serving:
                self._serving[conn] = busy

    def server_close(self, grace: float = DRAIN_GRACE) -> None:
        """Stop accepting, drain, then end what stayed idle.

        kube-apiserver keeps its webhook connections open and sends later reviews over them,
        also to a replica that is shutting down (its endpoint view lags). For ``grace``
        seconds every request on them is still answered, with ``Connection: close``, which
        retires that connection cleanly; then the connections with no request in hand get
        their read side shut, so their workers see end-of-stream at once, and one that is
        answering a request finishes it. Why: interpreter exit joins the pool's threads, and
        a worker waiting on an idle connection used to sit out its 30-s read timeout — the
        controller took that long to exit on SIGTERM (the lab's ``down`` killed it after
        20 s) — while closing at once lost reviews already on their way (the e2e rollout
        probe saw them time out)."""
        super().server_close()
        self.draining = True
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            with self._count:
                if not self._serving:
                    break
            time.sleep(0.05)
        with self._count:
            idle = [conn for conn, busy in self._serving.items() if not busy]
        for conn in idle:
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
            registry=registry, plugins=self._plugins, controller_users=controller_users
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
