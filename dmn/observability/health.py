"""The HTTP endpoint of a process: ``/metrics``, ``/livez``, ``/readyz``.

``/metrics`` is the ``prometheus-client`` exposition of the default registry. ``/livez`` and
``/readyz`` evaluate named conditions (callables returning ``(ok, detail)``) on every request
and answer 200 when all hold, else 503, with one line per condition (``[+]name ok`` /
``[-]name detail``, the shape kube-apiserver's ``?verbose`` uses) so a failing probe says
why. A condition that raises counts as failing. ``/healthz`` is an alias of ``/livez``.

The server runs in a daemon thread; ``stop()`` shuts it down. Tests bind it to 127.0.0.1.
It is a :class:`~dmn.observability.bounded_http.BoundedHTTPServer` (two workers, 64
connections, small requests): the port is often reachable from the Pod network, and a
thread per connection with no read deadline (the stdlib ``ThreadingHTTPServer`` it was)
let idle clients pile up threads without bound.
"""

from __future__ import annotations

import argparse
import logging
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest

from dmn.observability.bounded_http import BoundedHTTPServer, BufferedRequestHandler, Limits

log = logging.getLogger(__name__)

#: What clients of the probe and metrics port may hold: requests are bodiless GETs.
LIMITS = Limits(
    workers=2,
    max_connections=64,
    header_timeout=10.0,
    request_timeout=10.0,
    idle_timeout=60.0,
    max_head=16 * 1024,
    max_body=16 * 1024,
    max_buffered=1024 * 1024,
)

Condition = Callable[[], tuple[bool, str]]


def evaluate(conditions: Mapping[str, Condition]) -> tuple[bool, list[str]]:
    """All conditions' verdicts; a condition that raises fails with its error as detail."""
    ok = True
    lines: list[str] = []
    for name, check in conditions.items():
        try:
            passed, detail = check()
        except Exception as exc:  # a probe must answer, whatever a condition does
            passed, detail = False, f"{type(exc).__name__}: {exc}"
        ok = ok and passed
        lines.append(f"[+]{name} ok" if passed else f"[-]{name} {detail}")
    return ok, lines


class HealthServer:
    """Serves metrics and probes for one process."""

    def __init__(
        self,
        host: str,
        port: int,
        *,
        liveness: Mapping[str, Condition] | None = None,
        readiness: Mapping[str, Condition] | None = None,
        registry: CollectorRegistry = REGISTRY,
    ) -> None:
        self.liveness: dict[str, Condition] = dict(liveness or {})
        self.readiness: dict[str, Condition] = dict(readiness or {})
        self.registry = registry
        server = self

        class Handler(BufferedRequestHandler):
            def do_GET(self) -> None:
                server._answer(self)

        self._httpd = BoundedHTTPServer((host, port), Handler, LIMITS, name="health")
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def start(self) -> HealthServer:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="health-server", daemon=True
        )
        self._thread.start()
        log.info(
            "event=health-serving address=%s port=%d", self._httpd.server_address[0], self.port
        )
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(5)

    def _answer(self, request: BaseHTTPRequestHandler) -> None:
        path = request.path.split("?", 1)[0]
        if path == "/metrics":
            body = generate_latest(self.registry)
            self._send(request, 200, CONTENT_TYPE_LATEST, body)
            return
        conditions = {"/livez": self.liveness, "/healthz": self.liveness}.get(path)
        if conditions is None and path == "/readyz":
            conditions = self.readiness
        if conditions is None:
            self._send(request, 404, "text/plain; charset=utf-8", b"not found\n")
            return
        ok, lines = evaluate(conditions)
        text = "\n".join([*lines, "ok" if ok else "failed"]) + "\n"
        self._send(request, 200 if ok else 503, "text/plain; charset=utf-8", text.encode())

    @staticmethod
    def _send(request: BaseHTTPRequestHandler, code: int, ctype: str, body: bytes) -> None:
        request.send_response(code)
        request.send_header("Content-Type", ctype)
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        request.wfile.write(body)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The logging and health flags ``dmn node`` and ``dmn controller`` share."""
    parser.add_argument("--log-format", choices=("text", "json"), default="text")
    parser.add_argument(
        "--health-address", default="0.0.0.0", help="address of /metrics, /livez, /readyz"
    )
    parser.add_argument(
        "--health-port",
        type=int,
        default=None,
        help="serve /metrics, /livez, /readyz on this port (0: any free port; default: off)",
    )
