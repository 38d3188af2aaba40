"""The webhook serves connections on a bounded worker pool (issue 13, deliverable 8).

Before: one thread per connection (ThreadingHTTPServer), so stalled clients that never
finish their TLS handshake each pinned a thread, without bound. Now: ``workers`` threads
and ``backlog`` waiting connections; a connection beyond that is closed at once and
counted, no thread is started for it, and the server serves again when the stalled
clients go away. Idle kept-alive connections are parked between requests and hold no
worker.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
from pathlib import Path

import pytest

from dmn.controller.webhook import server as server_module
from dmn.controller.webhook.server import WebhookServer
from dmn.opcodes.registry import default_registry
from tests.controller.support import example
from tests.waiting import wait_for
from tests.webhook.certs import ThrowawayCA
from tests.webhook.test_admission import G, post, req

pytestmark = pytest.mark.adversarial


def _server(tmp_path: Path, **pool: int) -> WebhookServer:
    """A webhook on a throwaway CA's certificate (``ca.crt`` in ``tmp_path``), not started."""
    ca = ThrowawayCA()
    (tmp_path / "ca.crt").write_bytes(ca.pem())
    ca.issue(tmp_path / "tls.crt", tmp_path / "tls.key")
    return WebhookServer(
        None,
        default_registry(),
        cert_file=str(tmp_path / "tls.crt"),
        key_file=str(tmp_path / "tls.key"),
        **pool,
    )


def _stalled(url: str) -> socket.socket:
    """A TCP connection that never starts its TLS handshake (holds a worker until timeout)."""
    host, port = url.removeprefix("https://").split(":")
    return socket.create_connection((host, int(port)), timeout=30)


def _workers(url: str) -> int:
    """This server's worker threads (by the port in their names): a stopped server's
    workers of an earlier test may still be exiting, so a process-wide count is racy."""
    prefix = f"webhook-worker-{url.rsplit(':', 1)[1]}_"
    return sum(1 for t in threading.enumerate() if t.name.startswith(prefix))


def test_connections_beyond_workers_and_backlog_are_closed_not_threaded(
    tmp_path: Path,
) -> None:
    server = _server(tmp_path, workers=2, backlog=1)
    url = server.start()
    held: list[socket.socket] = []
    try:
        before = _workers(url)
        held = [_stalled(url) for _ in range(3)]  # two served (stalled), one waiting
        extra = [_stalled(url) for _ in range(5)]  # nothing left: closed at once
        wait_for(lambda: server.rejected == 5, timeout=30, interval=0.02)
        for s in extra:
            s.settimeout(30)
            assert s.recv(1) == b""  # the server closed it without serving
            s.close()
        assert _workers(url) - before <= 2
        for s in held:
            s.close()  # the stalled clients go: the workers serve again
        # the workers notice the closed clients on their own time; until they do, a new
        # connection is one beyond the pool and is closed (a CI run posted too early)
        resp = wait_for(
            lambda: _post_or_none(server, tmp_path / "ca.crt"), timeout=30, interval=0.1
        )
        assert "allowed" in resp
    finally:
        for s in held:
            s.close()
        server.stop()


def test_a_served_connection_is_parked_and_a_waiting_one_takes_the_worker(
    tmp_path: Path,
) -> None:
    """With a new connection waiting for the only worker, the served keep-alive connection
    is not closed (before, it was, with ``Connection: close``, to free its worker): it is
    parked, the waiting connection gets the worker, and the parked one is served again
    once the worker is free."""
    server = _server(tmp_path, workers=1, backlog=1)
    url = server.start()
    host, port = url.removeprefix("https://").split(":")
    ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    conn = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=30)
    waiting: socket.socket | None = None
    try:
        conn.connect()  # the only worker serves this connection
        waiting = _stalled(url)  # accepted, waits for the worker
        assert _httpd_waiting(server) == 1
        request = req("NetworkTopology", G, "CREATE", example("vfio"))
        body = json.dumps(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
        )
        conn.request("POST", "/validate", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.getheader("Connection") != "close"
        assert json.loads(resp.read())["response"]["uid"] == request["uid"]
        assert conn.sock is not None
        httpd = server._httpd
        assert httpd is not None
        wait_for(lambda: httpd.waiting == 0 and len(httpd.parking) == 1, timeout=30, interval=0.02)
        waiting.close()  # the stalled client goes: its worker is free again
        assert _healthz(conn) == 200
    finally:
        conn.close()
        if waiting is not None:
            waiting.close()
        server.stop()


def _httpd_waiting(server: WebhookServer) -> int:
    httpd = server._httpd
    assert httpd is not None
    return wait_for(lambda: httpd.waiting, timeout=30, interval=0.02)


def _post_or_none(server: WebhookServer, ca_file: Path) -> dict[str, object] | None:
    try:
        resp, _ = post(server, ca_file, req("NetworkTopology", G, "CREATE", example("vfio")))
    except (ssl.SSLError, ConnectionError):
        return None
    return dict(resp)


def test_pool_size_is_checked() -> None:
    with pytest.raises(ValueError):
        WebhookServer(None, default_registry(), cert_file="x", key_file="y", workers=0)


def test_stop_ends_kept_alive_connections_so_the_workers_exit(tmp_path: Path) -> None:
    """kube-apiserver keeps its webhook connections open between reviews. Stopping the
    server ends such an idle connection (the client reads end-of-stream) and its worker
    exits: before, the worker waited out its 30-s read timeout, and because interpreter
    exit joins the pool's threads the controller took that long to exit on SIGTERM."""
    server = _server(tmp_path)
    url = server.start()
    before = _workers(url)
    host, port = url.removeprefix("https://").split(":")
    ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    conn = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=60)
    try:
        conn.request("GET", "/healthz")
        resp = conn.getresponse()
        assert resp.status == 200 and resp.getheader("Connection") != "close"
        resp.read()
        assert conn.sock is not None  # kept alive, idle: parked
        assert _workers(url) > before
        server.stop()
        conn.sock.settimeout(10)  # well inside the 30-s read timeout the worker waited out
        assert _ended(conn.sock)  # the server ended it
        wait_for(lambda: _workers(url) == before, timeout=10, interval=0.05)
    finally:
        conn.close()
        server.stop()


def _ended(sock: socket.socket) -> bool:
    """The peer ended the connection: end-of-stream, or the TLS layer's alert for it."""
    try:
        return sock.recv(1) == b""
    except (ssl.SSLError, ConnectionError):
        return True


def test_a_review_on_a_kept_alive_connection_while_stopping_is_answered_and_closes_it(
    tmp_path: Path,
) -> None:
    """The API server's view of the webhook's endpoints lags: it may still send a review
    over a kept-alive connection to a replica that is stopping. That review is answered,
    with ``Connection: close`` (the client retires the connection cleanly), not lost."""
    server = _server(tmp_path)
    url = server.start()
    host, port = url.removeprefix("https://").split(":")
    ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    conn = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=30)
    stopping = threading.Thread(target=server.stop)
    try:
        conn.request("GET", "/healthz")
        conn.getresponse().read()
        httpd = server._httpd
        assert httpd is not None
        stopping.start()
        wait_for(lambda: httpd.draining, timeout=10, interval=0.01)
        request = req("NetworkTopology", G, "CREATE", example("vfio"))
        body = json.dumps(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
        )
        conn.request("POST", "/validate", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200 and resp.getheader("Connection") == "close"
        assert json.loads(resp.read())["response"]["uid"] == request["uid"]
    finally:
        conn.close()
        stopping.join(30)
        server.stop()


def _kept_alive(url: str, ca_file: Path) -> http.client.HTTPSConnection:
    """A connection that made one request and stays open, idle (as kube-apiserver keeps its
    webhook connections between reviews)."""
    host, port = url.removeprefix("https://").split(":")
    ctx = ssl.create_default_context(cafile=str(ca_file))
    conn = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=30)
    conn.request("GET", "/healthz")
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Connection") != "close"
    resp.read()
    return conn


def _healthz(conn: http.client.HTTPSConnection) -> int:
    conn.request("GET", "/healthz")
    resp = conn.getresponse()
    resp.read()
    return resp.status


def test_idle_kept_alive_connections_hold_no_worker(tmp_path: Path) -> None:
    """More kept-alive idle connections than workers, then a new connection's review: it is
    answered while every idle connection stays open and usable. Before, each idle
    connection held a worker blocked on its next request line, so with ``workers`` of them
    a new connection waited for a read timeout (30 s) — kube-apiserver, which keeps many
    webhook connections open, saw a review time out at 10 s during a rollout, and
    kubelet's readiness probe could time out the same way."""
    server = _server(tmp_path, workers=2, backlog=4)
    url = server.start()
    idle: list[http.client.HTTPSConnection] = []
    try:
        idle = [_kept_alive(url, tmp_path / "ca.crt") for _ in range(4)]
        resp, _ = post(
            server, tmp_path / "ca.crt", req("NetworkTopology", G, "CREATE", example("vfio"))
        )
        assert "allowed" in resp
        for conn in idle:
            assert conn.sock is not None
            assert _healthz(conn) == 200  # the idle connection still serves
    finally:
        for conn in idle:
            conn.close()
        server.stop()


def test_a_parked_connection_is_closed_after_the_idle_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server_module, "IDLE_TIMEOUT", 0.5)
    server = _server(tmp_path)
    url = server.start()
    conn = _kept_alive(url, tmp_path / "ca.crt")
    try:
        assert conn.sock is not None
        conn.sock.settimeout(30)
        assert _ended(conn.sock)  # closed by the server once idle past the timeout
        httpd = server._httpd
        assert httpd is not None
        assert len(httpd.parking) == 0
    finally:
        conn.close()
        server.stop()


def test_beyond_the_parking_limit_the_longest_parked_connection_is_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tenant opening idle connections without end costs descriptors, not threads, and
    only up to the limit: the oldest parked connection is closed, the newer ones serve."""
    monkeypatch.setattr(server_module, "MAX_PARKED", 2)
    server = _server(tmp_path)
    url = server.start()
    conns: list[http.client.HTTPSConnection] = []
    try:
        httpd = server._httpd
        assert httpd is not None
        for parked in (1, 2, 2):
            conns.append(_kept_alive(url, tmp_path / "ca.crt"))
            wait_for(lambda n=parked: len(httpd.parking) == n, timeout=30, interval=0.02)
        oldest = conns[0].sock
        assert oldest is not None
        oldest.settimeout(30)
        assert _ended(oldest)
        for conn in conns[1:]:
            assert _healthz(conn) == 200
    finally:
        for conn in conns:
            conn.close()
        server.stop()
