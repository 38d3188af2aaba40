"""A request's timeout bounds it: a request that timed out is not sent again.

Before: urllib3's default retries sent a timed-out GET three more times, so a stalled API
server held the agent for four request timeouts. Those waits sat behind the deadlines of
kubelet's NodePrepare and the NRI hooks. Now a timed-out request fails at once, as
``Unavailable``, after one attempt. A kept-alive connection the server closed is still
replaced and the request still answered. A real HTTP server on loopback, stalled by the
tests' TCP proxy (``tests/stalling_proxy.py``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from dmn.api.cluster import Cluster, connect
from dmn.api.cluster import resources as r
from dmn.api.cluster.errors import Unavailable
from tests.stalling_proxy import stalling_proxy

pytestmark = pytest.mark.adversarial


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
    with _one_shot_server() as url, stalling_proxy(url) as proxy:
        proxy.stall()
        with (
            Cluster(connect(url=proxy.url), request_timeout=0.5) as cluster,
            pytest.raises(Unavailable),
        ):
            cluster.get(r.PODS, "p", "default")
        assert proxy.accepted == 1  # before: 4 (three retries, each timing out)
        proxy.resume()
        with Cluster(connect(url=proxy.url), request_timeout=10) as cluster:
            assert cluster.get(r.PODS, "p", "default")["metadata"]["name"] == "p"


def test_a_connection_the_server_closed_is_replaced() -> None:
    with _one_shot_server() as url, Cluster(connect(url=url), request_timeout=10) as cluster:
        for _ in range(3):
            assert cluster.get(r.PODS, "p", "default")["metadata"]["name"] == "p"
