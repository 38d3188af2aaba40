"""NRI connection multiplexer framing (pure; no I/O).

Facts (containerd/nri pkg/net/multiplex/mux.go and ttrpc.go):

* Every frame on the trunk socket is an 8-byte header — connection id (uint32, big
  endian) then payload length (uint32, big endian) — followed by the payload.
* Connection id 0 is reserved; ``PluginServiceConn = 1`` carries the Plugin service (the
  plugin is the ttrpc server), ``RuntimeServiceConn = 2`` the Runtime service (the plugin
  is the ttrpc client).
* The Go mux writes one frame per ``Write`` and caps a payload at ``ttrpcMessageHeaderLength +
  ttrpcMessageLengthMax`` (10 + 4 MiB). Its reader hands each payload whole to the
  connection's ``Read``, which fails with ENOMEM when the caller's buffer is smaller; ttrpc
  reads through a ``bufio.Reader`` of 4096 bytes, so we never send payloads larger than
  4096 bytes. A logical connection is a byte stream: receivers must reassemble.
* The Go reader queues at most 256 undelivered payloads per connection (readQueueLen) and
  closes the whole trunk on overflow, so a single message should stay far below
  256 x 4 KiB; ours (registration, configure and hook replies) are a few hundred bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

HEADER = struct.Struct(">II")
HEADER_LEN = HEADER.size  # 8
PLUGIN_SERVICE_CONN = 1
RUNTIME_SERVICE_CONN = 2
MAX_SEND_PAYLOAD = 4096
MAX_RECV_PAYLOAD = 10 + (4 << 20)


class MuxProtocolError(ValueError):
    """The trunk carried a frame no correct peer would send."""


def encode(conn_id: int, data: bytes, chunk: int = MAX_SEND_PAYLOAD) -> bytes:
    """Frame ``data`` for ``conn_id`` as consecutive frames of at most ``chunk`` bytes."""
    if conn_id <= 0 or conn_id > 0xFFFFFFFF:
        raise MuxProtocolError(f"connection id {conn_id} is reserved or out of range")
    if not 0 < chunk <= MAX_SEND_PAYLOAD:
        raise ValueError(f"chunk must be 1..{MAX_SEND_PAYLOAD}, got {chunk}")
    parts: list[bytes] = []
    view = memoryview(data)
    for start in range(0, len(view), chunk):
        piece = view[start : start + chunk]
        parts.append(HEADER.pack(conn_id, len(piece)))
        parts.append(bytes(piece))
    return b"".join(parts)


@dataclass
class Demultiplexer:
    """Incremental trunk parser: feed raw bytes, get ``(conn_id, payload)`` frames back."""

    _buf: bytearray = field(default_factory=bytearray)

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        self._buf += data
        frames: list[tuple[int, bytes]] = []
        while len(self._buf) >= HEADER_LEN:
            conn_id, length = HEADER.unpack_from(self._buf)
            if conn_id == 0:
                raise MuxProtocolError("frame on reserved connection id 0")
            if length > MAX_RECV_PAYLOAD:
                raise MuxProtocolError(f"frame payload {length} exceeds {MAX_RECV_PAYLOAD}")
            if len(self._buf) < HEADER_LEN + length:
                break
            frames.append((conn_id, bytes(self._buf[HEADER_LEN : HEADER_LEN + length])))
            del self._buf[: HEADER_LEN + length]
        return frames

    @property
    def pending(self) -> int:
        """Bytes buffered towards an incomplete frame."""
        return len(self._buf)
