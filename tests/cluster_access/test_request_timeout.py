"""A request's timeout bounds it: a request that timed out is not sent again.

Before: urllib3's default retries sent a timed-out GET three more times, so a stalled API
server held the agent for four request timeouts. Those waits sat behind the deadlines of
kubelet's NodePrepare and the NRI hooks. Now a timed-out request fails at once, as
``Unavailable``, after one attempt. A kept-alive connection the server closed is still
replaced and the request still answered. Both servers are real sockets on loopback.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from dmn.api.cluster import Cluster, connect
from dmn.api.cluster import resources as r
from dmn.api.cluster.errors import Unavailable

pytestmark = pytest.mark.adversarial


class _SilentServer:
    """Accepts connections and reads requests, and never answers; counts the requests."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._held: list[socket.socket] = []
        self.requests = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name="silent-server", daemon=True).start()

    @property
    def url(self) -> str:
        host, port = self._listener.getsockname()[:2]
        return f"http://{host}:{port}"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self._held.append(conn)
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        seen = b""
        while True:
            try:
                chunk = conn.recv(65536)
            except OSError:
                return
            if not chunk:
                return
            seen += chunk
            with self._lock:
                self.requests += seen.count(b"\r\n\r\n")
            seen = seen.rsplit(b"\r\n\r\n", 1)[-1]

    def close(self) -> None:
        self._listener.close()
        for conn in self._held:
            conn.close()


class _OneShotHandler(BaseHTTPRequestHandler):
    """Answers with a Pod and keep-alive headers, then closes the connection anyway."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = json.dumps(
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"}}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True

    def log_message(self, format: str, *args: object) -> None:
        return


@contextmanager
def _one_shot_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _OneShotHandler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="one-shot", daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        yield f"http://{host!s}:{port}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_timed_out_request_fails_after_one_attempt() -> None:
    server = _SilentServer()
    try:
        with (
            Cluster(connect(url=server.url), request_timeout=0.5) as cluster,
            pytest.raises(Unavailable),
        ):
            cluster.get(r.PODS, "p", "default")
        assert server.requests == 1  # before: 4 (three retries, each timing out)
    finally:
        server.close()


def test_a_connection_the_server_closed_is_replaced() -> None:
    with _one_shot_server() as url, Cluster(connect(url=url), request_timeout=10) as cluster:
        for _ in range(3):
            assert cluster.get(r.PODS, "p", "default")["metadata"]["name"] == "p"
