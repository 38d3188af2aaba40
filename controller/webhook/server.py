"""The admission webhook: HTTPS server for AdmissionReview v1 (``POST /validate``, and
``POST /mutate-pods`` for the Pod mutation of :func:`.review.mutate_pod`).

Certificates come from files (see :mod:`.tls` for rotation). Connections are served by
:class:`dmn.observability.bounded_http.BoundedHTTPServer`: one reception thread does every
TLS handshake and reads every request head and body without blocking, under deadlines, and
hands a worker (``workers`` of them) only whole requests; a bounded number of connections
is kept (``max_connections``), and beyond it the longest-open one that has not completed a
request is closed. So idle or trickling clients (slowloris) hold no worker: with eight
workers, eight idle TCP connections once stopped every review and ``/healthz``.

kube-apiserver keeps many webhook connections open and idle between reviews; such a
connection is kept for ``IDLE_TIMEOUT`` (longer than the API server's own 90-s idle limit,
so the client normally retires it first and never races our close).

The server answers ``GET /healthz`` for readiness, and never returns a traceback: malformed
requests get 400, and validation problems are denials with reason-coded causes. Plugins
are read from the API server for every topology review (fail closed if it is unreachable).
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Mapping
from typing import Any

from dmn.api.cluster import Cluster
from dmn.api.cluster import resources as r
from dmn.controller.compile.plugin_sources import plugins_from_objects
from dmn.controller.webhook.pod_sources import read_world
from dmn.controller.webhook.pods import World
from dmn.controller.webhook.review import ReviewContext, mutate_pod, review
from dmn.controller.webhook.review_shape import nesting_depth
from dmn.controller.webhook.tls import ReloadingTLS
from dmn.interpreter.loader import Plugin
from dmn.interpreter.source import MAX_DEPTH
from dmn.observability.bounded_http import BoundedHTTPServer, BufferedRequestHandler, Limits
from dmn.opcodes.spec import OpcodeRegistry

log = logging.getLogger(__name__)

MAX_BODY = 3 * 1024 * 1024
#: Seconds from accepting a connection (TLS handshake included), or from the first byte of a
#: later request on it, to the end of the request head; and to the end of its body.
HEADER_TIMEOUT = 10.0
REQUEST_TIMEOUT = 30.0
#: Seconds an idle kept-alive connection is kept; kube-apiserver closes its idle
#: connections after 90 s.
IDLE_TIMEOUT = 120.0
#: Connections kept at most (being read, idle or answered); each costs a descriptor.
MAX_CONNECTIONS = 256
#: Worker threads answering whole requests.
DEFAULT_WORKERS = 8
#: Seconds a stopping server keeps serving its kept-alive connections (each answered with
#: ``Connection: close``) before it ends those that stayed idle (see ``_Server.server_close``).
DRAIN_GRACE = 2.0


class _Handler(BufferedRequestHandler):
    """One request of a connection, already read in full."""

    server: _Server

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
        path = self.path.split("?")[0]
        if path not in ("/validate", "/mutate-pods"):
            self._send(404, {"message": "not found"})
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length <= 0 or length > MAX_BODY:
            self.close_connection = True  # a body too large or unframed was not read
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
            decide = mutate_pod if path == "/mutate-pods" else review
            response = decide(request, self.server.context)
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


class _Server(BoundedHTTPServer):
    """The bounded server with TLS on every accepted connection and the review context."""

    context: ReviewContext
    tls: ReloadingTLS

    def wrap(self, sock: socket.socket) -> socket.socket:
        # the handshake happens in the reception thread, with the current pair
        return self.tls.context().wrap_socket(sock, server_side=True, do_handshake_on_connect=False)

    def server_close(self, grace: float = DRAIN_GRACE) -> None:
        """Stop accepting, drain, then end what stayed idle.

        kube-apiserver keeps its webhook connections open and sends later reviews over them,
        also to a replica that is shutting down (its endpoint view lags). For ``grace``
        seconds every request on them is still answered, with ``Connection: close``, which
        retires that connection cleanly; then the idle connections are closed, and a worker
        answering a request finishes it. Why: interpreter exit joins the pool's threads —
        the controller once took 30 s to exit on SIGTERM (the lab's ``down`` killed it after
        20 s) — while closing at once lost reviews already on their way (the e2e rollout
        probe saw them time out)."""
        super().server_close(grace)


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
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        if workers < 1 or max_connections < 1:
            raise ValueError("the webhook needs at least one worker and one connection")
        self.cluster = cluster
        self.workers, self.max_connections = workers, max_connections
        self.tls = ReloadingTLS(cert_file, key_file)
        self.context = ReviewContext(
            registry=registry,
            plugins=self._plugins,
            controller_users=controller_users,
            pools=self._pools if cluster is not None else None,
            pod_world=self._pod_world if cluster is not None else None,
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

    def _pod_world(self, namespace: str, pod: Mapping[str, Any]) -> World:
        assert self.cluster is not None
        return read_world(self.cluster, namespace, pod)

    @property
    def rejected(self) -> int:
        """Connections closed because the server held ``max_connections``."""
        return self._httpd.rejected if self._httpd is not None else 0

    @property
    def url(self) -> str:
        assert self._httpd is not None
        host, port = self._httpd.server_address[:2]
        return f"https://{host!s}:{port}"

    def start(self) -> str:
        limits = Limits(
            workers=self.workers,
            max_connections=self.max_connections,
            header_timeout=HEADER_TIMEOUT,
            request_timeout=REQUEST_TIMEOUT,
            idle_timeout=IDLE_TIMEOUT,
            max_body=MAX_BODY,
        )
        httpd = _Server((self.host, self.port), _Handler, limits, name="webhook")
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
