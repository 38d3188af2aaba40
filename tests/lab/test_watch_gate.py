"""The watch gate's request handling without a lab: which requests are watches of which
resource, how a request is rewritten, and that a held watch relays nothing until released
(a local TLS "API server" streaming events). The lab use is in
``tests/e2e/test_upstream_multus_thick.py``."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from dmn.lab.upstream.pki import LabCA
from dmn.lab.upstream.watch_gate import WatchGate, forwarded_head, watched_resource
from tests.waiting import wait_for


def test_watches_are_recognised_by_query_or_path() -> None:
    assert watched_resource("/api/v1/pods?watch=true&resourceVersion=5") == "pods"
    assert watched_resource("/api/v1/namespaces/default/pods?watch=1") == "pods"
    assert watched_resource("/api/v1/watch/pods") == "pods"
    plural = "network-attachment-definitions"
    assert watched_resource(f"/apis/k8s.cni.cncf.io/v1/{plural}?watch=true") == plural
    assert watched_resource("/api/v1/pods?limit=500") is None
    assert watched_resource("/api/v1/namespaces/default/pods/p") is None


def test_a_request_is_forwarded_with_connection_close_and_no_compression() -> None:
    head = (
        b"GET /x HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\nAccept-Encoding: gzip\r\n"
        b"Accept: */*\r\n\r\n"
    )
    out = forwarded_head(head)
    assert b"accept-encoding" not in out.lower()
    assert out.endswith(b"\r\n\r\n")
    lines = out.split(b"\r\n")
    assert lines[0] == b"GET /x HTTP/1.1"
    assert [x for x in lines if x.lower().startswith(b"connection:")] == [b"Connection: close"]
    assert b"Accept: */*" in lines and b"Host: a" in lines


class _Streamer:
    """A TLS server answering one watch request, then sending what ``send`` is given."""

    def __init__(self, cert: Path, key: Path) -> None:
        self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.tls.load_cert_chain(cert, key)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.conn: ssl.SSLSocket | None = None
        self.ready = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        raw, _ = self.listener.accept()
        conn = self.tls.wrap_socket(raw, server_side=True)
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(4096)
        conn.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
        self.conn = conn
        self.ready.set()

    def send(self, data: bytes) -> None:
        assert self.conn is not None
        self.conn.sendall(data)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.listener.close()


@pytest.fixture
def ca(tmp_path: Path) -> LabCA:
    return LabCA(tmp_path)


@pytest.fixture
def gate_and_upstream(ca: LabCA) -> Iterator[tuple[WatchGate, _Streamer]]:
    cred = ca.issue("local", "local", server_ips=("127.0.0.1",))
    upstream = _Streamer(cred.cert, cred.key)
    gate = WatchGate(("127.0.0.1", upstream.port), ca.ca_cert, cred.cert, cred.key)
    gate.start()
    try:
        yield gate, upstream
    finally:
        gate.close()
        upstream.close()


def test_a_held_watch_relays_nothing_until_released(
    ca: LabCA, gate_and_upstream: tuple[WatchGate, _Streamer]
) -> None:
    gate, upstream = gate_and_upstream
    client_tls = ssl.create_default_context(cafile=str(ca.ca_cert))
    with (
        socket.create_connection(("127.0.0.1", gate.port)) as plain,
        client_tls.wrap_socket(plain, server_hostname="127.0.0.1") as client,
    ):
        assert client.selected_alpn_protocol() in (None, "http/1.1")
        client.sendall(b"GET /api/v1/pods?watch=true HTTP/1.1\r\nHost: x\r\n\r\n")
        assert upstream.ready.wait(10)
        received = b""
        while b"\r\n\r\n" not in received:
            received += client.recv(4096)
        upstream.send(b"event-one")
        wait_for(lambda: gate.delivered("pods", b"event-one"), timeout=10, what="event one")
        gate.hold("pods")
        upstream.send(b"event-two")
        client.settimeout(0.5)
        seen = received
        with pytest.raises(TimeoutError):
            while True:
                seen += client.recv(4096)
        assert b"event-two" not in seen
        assert not gate.delivered("pods", b"event-two")
        gate.release("pods")
        client.settimeout(10)
        while b"event-two" not in seen:
            seen += client.recv(4096)
        wait_for(lambda: gate.delivered("pods", b"event-two"), timeout=10, what="recorded")
