"""Byte-level NRI trunk and ttrpc framing for the lab runtime — deliberately independent
of ``dmn.agent.nri`` so a shared misunderstanding cannot hide behind shared code.

Facts: containerd/nri pkg/net/multiplex/mux.go (8-byte frame header: conn id, payload
length, both uint32 big endian; conn 1 = Plugin service, conn 2 = Runtime service);
containerd/ttrpc channel.go (10-byte message header: length uint32 BE, stream id uint32
BE, type byte, flags byte; max length 4 MiB; 1 request, 2 response, 3 data);
containerd/ttrpc request.pb.go (Request fields 1 service, 2 method, 3 payload,
4 timeout_nano, 5 metadata; Response fields 1 status, 2 payload; Status 1 code, 2 message).
The envelopes are encoded here by hand in protobuf wire format rather than through the
generated classes, which cross-checks the field numbers in ``ttrpc_request.proto``.
"""

from __future__ import annotations

from dataclasses import dataclass

CONN_PLUGIN = 1
CONN_RUNTIME = 2
TRUNK_CHUNK = 4096
TTRPC_MAX = 4 * 1024 * 1024
KIND_REQUEST, KIND_RESPONSE, KIND_DATA = 1, 2, 3


def _u32(value: int) -> bytes:
    return value.to_bytes(4, "big")


def trunk_frames(conn: int, data: bytes) -> bytes:
    """All mux frames for ``data`` on ``conn``, each payload at most 4096 bytes."""
    out = bytearray()
    for i in range(0, len(data), TRUNK_CHUNK):
        part = data[i : i + TRUNK_CHUNK]
        out += _u32(conn) + _u32(len(part)) + part
    return bytes(out)


class TrunkReader:
    """Splits a byte stream into (conn, payload) frames and keeps one byte stream per conn."""

    def __init__(self) -> None:
        self.buf = b""
        self.streams: dict[int, bytes] = {}

    def push(self, data: bytes) -> list[int]:
        """Absorb trunk bytes; return the conn ids that received data."""
        self.buf += data
        touched: list[int] = []
        while len(self.buf) >= 8:
            conn = int.from_bytes(self.buf[0:4], "big")
            size = int.from_bytes(self.buf[4:8], "big")
            if len(self.buf) < 8 + size:
                break
            self.streams[conn] = self.streams.get(conn, b"") + self.buf[8 : 8 + size]
            self.buf = self.buf[8 + size :]
            touched.append(conn)
        return touched

    def messages(self, conn: int) -> list[tuple[int, int, int, bytes]]:
        """Complete ttrpc messages (stream, kind, flags, body) buffered for ``conn``."""
        data = self.streams.get(conn, b"")
        out = []
        while len(data) >= 10:
            size = int.from_bytes(data[0:4], "big")
            if size > TTRPC_MAX:
                raise ValueError(f"ttrpc message of {size} bytes exceeds {TTRPC_MAX}")
            if len(data) < 10 + size:
                break
            stream = int.from_bytes(data[4:8], "big")
            out.append((stream, data[8], data[9], data[10 : 10 + size]))
            data = data[10 + size :]
        self.streams[conn] = data
        return out


def ttrpc_message(stream: int, kind: int, body: bytes, flags: int = 0) -> bytes:
    if len(body) > TTRPC_MAX:
        raise ValueError(f"ttrpc message of {len(body)} bytes exceeds {TTRPC_MAX}")
    return _u32(len(body)) + _u32(stream) + bytes([kind, flags]) + body


# -- protobuf wire format, just enough for the ttrpc envelopes -------------------------


def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field_bytes(number: int, data: bytes) -> bytes:
    return _varint((number << 3) | 2) + _varint(len(data)) + data


def _field_varint(number: int, value: int) -> bytes:
    return _varint(number << 3) + _varint(value)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def parse_fields(data: bytes) -> dict[int, list[int | bytes]]:
    """Decode one protobuf message into {field number: [values]} (varint and bytes only)."""
    fields: dict[int, list[int | bytes]] = {}
    pos = 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, pos = _read_varint(data, pos)
        elif wire == 2:
            size, pos = _read_varint(data, pos)
            value, pos = data[pos : pos + size], pos + size
        elif wire == 1:
            value, pos = int.from_bytes(data[pos : pos + 8], "little"), pos + 8
        elif wire == 5:
            value, pos = int.from_bytes(data[pos : pos + 4], "little"), pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        fields.setdefault(number, []).append(value)
    return fields


def request_body(service: str, method: str, payload: bytes, timeout_nano: int) -> bytes:
    body = _field_bytes(1, service.encode()) + _field_bytes(2, method.encode())
    if payload:
        body += _field_bytes(3, payload)
    if timeout_nano:
        body += _field_varint(4, timeout_nano)
    return body


@dataclass(frozen=True)
class Request:
    service: str
    method: str
    payload: bytes
    timeout_nano: int


def parse_request(body: bytes) -> Request:
    f = parse_fields(body)

    def text(n: int) -> str:
        v = f.get(n, [b""])[-1]
        return v.decode() if isinstance(v, bytes) else ""

    payload = f.get(3, [b""])[-1]
    timeout = f.get(4, [0])[-1]
    return Request(
        text(1),
        text(2),
        payload if isinstance(payload, bytes) else b"",
        timeout if isinstance(timeout, int) else 0,
    )


def response_body(payload: bytes = b"", code: int = 0, message: str = "") -> bytes:
    # The status is always present (empty for OK), as the Go ttrpc server sends it.
    status = (_field_varint(1, code) if code else b"") + (
        _field_bytes(2, message.encode()) if message else b""
    )
    body = _field_bytes(1, status)
    if payload:
        body += _field_bytes(2, payload)
    return body


def parse_response(body: bytes) -> tuple[int, str, bytes]:
    """(status code, status message, payload)."""
    f = parse_fields(body)
    code, message = 0, ""
    status = f.get(1, [b""])[-1]
    if isinstance(status, bytes) and status:
        sf = parse_fields(status)
        c = sf.get(1, [0])[-1]
        m = sf.get(2, [b""])[-1]
        code = c if isinstance(c, int) else 0
        message = m.decode() if isinstance(m, bytes) else ""
    payload = f.get(2, [b""])[-1]
    return code, message, payload if isinstance(payload, bytes) else b""
