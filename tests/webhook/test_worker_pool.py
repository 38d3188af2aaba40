"""The webhook serves connections on a bounded worker pool (issue 13, deliverable 8) that
idle or trickling clients cannot hold (issue 39).

Before issue 13: one thread per connection (ThreadingHTTPServer), so stalled clients that
never finished their TLS handshake each pinned a thread, without bound. Before issue 39:
``workers`` threads, each reading its own connection's handshake and request under a 30-s
per-read timeout, so eight idle TCP connections stopped every review and ``/healthz``, and a
client trickling a byte now and then held a worker for ever. Now one reception thread reads
every connection to a whole request under deadlines, workers only answer, and a bounded
number of connections is kept (the longest-open one that completed no request is closed
for a new one). Tests use real TLS sockets against the real server.
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
    """A TCP connection that never starts its TLS handshake."""
    host, port = url.removeprefix("https://").split(":")
    return socket.create_connection((host, int(port)), timeout=30)


def _tls(url: str, ca_file: Path) -> ssl.SSLSocket:
    """A TLS connection, handshake done, no request sent."""
    ctx = ssl.create_default_context(cafile=str(ca_file))
    return ctx.wrap_socket(_stalled(url), server_hostname="127.0.0.1")


def _workers(url: str) -> int:
    """This server's worker threads (by the port in their names): a stopped server's
    workers of an earlier test may still be exiting, so a process-wide count is racy."""
    prefix = f"webhook-worker-{url.rsplit(':', 1)[1]}_"
    return sum(1 for t in threading.enumerate() if t.name.startswith(prefix))


def _review_body() -> tuple[str, str]:
    request = req("NetworkTopology", G, "CREATE", example("vfio"))
    body = json.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    )
    return str(request["uid"]), body


class _Trickler:
    """Clients that each send a request head one byte at a time, a byte every ``pause``
    seconds, for ever (slowloris); ``ended`` counts those the server closed."""

    def __init__(self, socks: list[ssl.SSLSocket], pause: float = 0.2) -> None:
        self.socks, self.pause = socks, pause
        self.ended = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        head = b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\nX-Pad: " + b"a" * 10**6
        alive = list(self.socks)
        i = 0
        while alive and not self._stop.wait(self.pause):
            for s in list(alive):
                try:
                    s.sendall(head[i : i + 1])
                except OSError:
                    alive.remove(s)
                    self.ended += 1
            i += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        for s in self.socks:
            s.close()


def test_idle_and_trickling_connections_hold_no_worker(tmp_path: Path) -> None:
    """Eight TCP connections that never start TLS, and eight TLS connections trickling a
    request head, against two workers: reviews and ``/healthz`` on new connections are
    answered meanwhile, and the worker threads stay two. Before, the first two of them held
    both workers (30-s read timeouts, renewed by every trickled byte) and the review timed
    out."""
    server = _server(tmp_path, workers=2)
    url = server.start()
    ca = tmp_path / "ca.crt"
    idle = [_stalled(url) for _ in range(8)]
    trickler = _Trickler([_tls(url, ca) for _ in range(8)])
    try:
        for _ in range(3):
            uid, body = _review_body()
            resp, _ = post(server, ca, json.loads(body)["request"])
            assert resp["uid"] == uid and "allowed" in resp
            conn = _https(url, ca)
            assert _healthz(conn) == 200
            conn.close()
        assert _workers(url) <= 2
        assert trickler.ended == 0  # the slow clients were only outlasted, within deadlines
    finally:
        trickler.stop()
        for s in idle:
            s.close()
        server.stop()


def test_a_trickling_client_is_closed_at_the_header_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deadline, not a per-read timeout: a client sending a byte every 0.1 s never lets a
    read time out, and is closed anyway once its head is not complete in time."""
    monkeypatch.setattr(server_module, "HEADER_TIMEOUT", 1.0)
    server = _server(tmp_path)
    url = server.start()
    trickler = _Trickler([_tls(url, tmp_path / "ca.crt")], pause=0.1)
    try:
        wait_for(lambda: trickler.ended == 1, timeout=30, interval=0.05)
    finally:
        trickler.stop()
        server.stop()


def test_a_connection_that_says_nothing_is_closed_at_the_header_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server_module, "HEADER_TIMEOUT", 0.5)
    server = _server(tmp_path)
    url = server.start()
    silent = _stalled(url)
    handshaken = _tls(url, tmp_path / "ca.crt")
    try:
        silent.settimeout(30)
        assert _ended(silent)
        handshaken.settimeout(30)
        assert _ended(handshaken)
    finally:
        silent.close()
        handshaken.close()
        server.stop()


def test_a_body_slower_than_the_request_deadline_is_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server_module, "REQUEST_TIMEOUT", 1.0)
    server = _server(tmp_path)
    url = server.start()
    sock = _tls(url, tmp_path / "ca.crt")
    try:
        sock.sendall(b"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        sock.settimeout(30)
        assert _ended(sock)
    finally:
        sock.close()
        server.stop()


def test_a_body_over_the_limit_is_refused_unread_and_the_connection_closed(
    tmp_path: Path,
) -> None:
    server = _server(tmp_path)
    url = server.start()
    sock = _tls(url, tmp_path / "ca.crt")
    try:
        length = server_module.MAX_BODY + 1
        sock.sendall(
            f"POST /validate HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n".encode()
        )
        sock.settimeout(30)
        answer = b""
        while chunk := _recv(sock):
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 400 ")
        assert b"too large" in answer
    finally:
        sock.close()
        server.stop()


def test_pipelined_requests_are_each_answered(tmp_path: Path) -> None:
    server = _server(tmp_path)
    url = server.start()
    sock = _tls(url, tmp_path / "ca.crt")
    try:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" * 3)
        sock.settimeout(30)
        answer = b""
        while answer.count(b"HTTP/1.1 200 ") < 3:
            chunk = _recv(sock)
            assert chunk, answer
            answer += chunk
    finally:
        sock.close()
        server.stop()


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except (ssl.SSLError, ConnectionError):
        return b""


def test_beyond_the_connection_limit_the_oldest_unproven_connection_is_closed(
    tmp_path: Path,
) -> None:
    """With the server full, a new connection closes the longest-open one that has not
    completed a request — not the kept-alive client that has — and is served."""
    server = _server(tmp_path, max_connections=3)
    url = server.start()
    ca = tmp_path / "ca.crt"
    kept = _kept_alive(url, ca)
    first, second = _stalled(url), _stalled(url)
    try:
        httpd = server._httpd
        assert httpd is not None
        wait_for(lambda: len(httpd.reception) == 3, timeout=30, interval=0.02)
        resp = wait_for(lambda: _post_or_none(server, ca), timeout=30, interval=0.1)
        assert "allowed" in resp
        first.settimeout(30)
        assert _ended(first)
        assert server.rejected >= 1
        assert _healthz(kept) == 200
    finally:
        kept.close()
        first.close()
        second.close()
        server.stop()


def _https(url: str, ca_file: Path) -> http.client.HTTPSConnection:
    host, port = url.removeprefix("https://").split(":")
    ctx = ssl.create_default_context(cafile=str(ca_file))
    return http.client.HTTPSConnection(host, int(port), context=ctx, timeout=30)


def _post_or_none(server: WebhookServer, ca_file: Path) -> dict[str, object] | None:
    try:
        resp, _ = post(server, ca_file, req("NetworkTopology", G, "CREATE", example("vfio")))
    except (ssl.SSLError, ConnectionError):
        return None
    return dict(resp)


def test_pool_size_is_checked() -> None:
    with pytest.raises(ValueError):
        WebhookServer(None, default_registry(), cert_file="x", key_file="y", workers=0)
    with pytest.raises(ValueError):
        WebhookServer(None, default_registry(), cert_file="x", key_file="y", max_connections=0)


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
    server = _server(tmp_path, workers=2)
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
        wait_for(lambda: len(httpd.reception) == 0, timeout=30, interval=0.02)
    finally:
        conn.close()
        server.stop()
