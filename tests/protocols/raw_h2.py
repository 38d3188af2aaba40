"""A hostile HTTP/2 peer for the kubelet gRPC sockets, written frame by frame on a raw unix
socket (RFC 9113 framing, RFC 7541 literal header fields), so a test can do what no
well-behaved grpc client does: stop half way through a request, announce a message far
larger than it sends, or never read a byte of the answer."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, SETTINGS, PING = 0x0, 0x1, 0x4, 0x6
END_STREAM, END_HEADERS, ACK = 0x1, 0x4, 0x1
SETTINGS_INITIAL_WINDOW_SIZE = 0x4


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return struct.pack(">I", len(payload))[1:] + struct.pack(">BBI", kind, flags, stream) + payload


def _string(value: str) -> bytes:
    raw = value.encode()
    assert len(raw) < 127, "one-byte length prefix only"
    return bytes([len(raw)]) + raw


def grpc_headers(path: str) -> bytes:
    """A HEADERS block of literal fields without indexing (no HPACK state needed)."""
    fields = {
        ":method": "POST",
        ":scheme": "http",
        ":path": path,
        ":authority": "localhost",
        "content-type": "application/grpc",
        "te": "trailers",
    }
    return b"".join(b"\x00" + _string(k) + _string(v) for k, v in fields.items())


def grpc_message_prefix(length: int) -> bytes:
    """The 5-byte gRPC length-prefixed-message header (uncompressed)."""
    return b"\x00" + struct.pack(">I", length)


class RawH2:
    """One raw connection. ``reading`` drains whatever the server sends on a thread of its
    own; without it the peer never reads a byte."""

    def __init__(self, path: str, *, reading: bool = True, window: int | None = None) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.next_stream = 1
        self.received = bytearray()
        self.pongs = 0
        self._pong = threading.Condition()
        settings = (
            b"" if window is None else struct.pack(">HI", SETTINGS_INITIAL_WINDOW_SIZE, window)
        )
        self.sock.sendall(PREFACE + frame(SETTINGS, 0, 0, settings))
        if reading:
            threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        try:
            while chunk := self.sock.recv(65536):
                self.received += chunk
                with self._pong:
                    self.pongs = self.received.count(frame(PING, ACK, 0, b"syncsync"))
                    self._pong.notify_all()
        except OSError:
            pass

    def open_stream(self, path: str, body: bytes = b"", end: bool = False) -> int:
        """Send a request's headers and ``body`` (no END_STREAM unless ``end``)."""
        stream = self.next_stream
        self.next_stream += 2
        out = frame(HEADERS, END_HEADERS, stream, grpc_headers(path))
        if body or end:
            out += frame(DATA, END_STREAM if end else 0, stream, body)
        self.sock.sendall(out)
        return stream

    def sync(self, timeout: float) -> bool:
        """PING and wait for its ACK: the server has read every frame sent before it."""
        with self._pong:
            seen = self.pongs
            self.sock.sendall(frame(PING, 0, 0, b"syncsync"))
            return self._pong.wait_for(lambda: self.pongs > seen, timeout)

    def close(self) -> None:
        """Shut down first: a close() alone leaves the connection open while the draining
        thread is still blocked in recv() on it."""
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
