"""ttrpc message framing and envelopes (pure; no I/O).

Facts (containerd/ttrpc channel.go, PROTOCOL.md, request.pb.go):

* Frame header, 10 bytes: data length (uint32 BE), stream id (uint32 BE), message type
  (uint8), flags (uint8). Maximum data length ``4 << 20``; longer frames are rejected with
  RESOURCE_EXHAUSTED.
* Types: 1 request, 2 response, 3 data. Client-initiated streams use odd ids, and the
  server answers a request whose stream id does not increase with INVALID_ARGUMENT
  (server.go: "StreamID cannot be re-used and must increment").
* Request payload is ``ttrpc.Request{service, method, payload, timeout_nano, metadata}``;
  the response is ``ttrpc.Response{status, payload}`` with gRPC status codes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import IntEnum

from dmn.agent.protos import ttrpc_request_pb2, ttrpc_status_pb2

FRAME_HEADER = struct.Struct(">IIBB")
FRAME_HEADER_LEN = FRAME_HEADER.size  # 10
MESSAGE_LENGTH_MAX = 4 << 20

TYPE_REQUEST = 1
TYPE_RESPONSE = 2
TYPE_DATA = 3

FLAG_REMOTE_CLOSED = 0x1
FLAG_REMOTE_OPEN = 0x2
FLAG_NO_DATA = 0x4


class Code(IntEnum):
    """gRPC status codes as carried in ttrpc responses."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


class TtrpcProtocolError(ValueError):
    """The peer sent bytes that are not a valid ttrpc frame."""


class TtrpcError(Exception):
    """A call ended with a non-OK status (from the peer, or locally for a lost connection)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(
            f"{Code(code).name if code in Code._value2member_map_ else code}: {message}"
        )
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Frame:
    stream_id: int
    type: int
    flags: int
    data: bytes


def encode_frame(stream_id: int, msg_type: int, data: bytes, flags: int = 0) -> bytes:
    if len(data) > MESSAGE_LENGTH_MAX:
        raise TtrpcError(
            Code.RESOURCE_EXHAUSTED,
            f"message length {len(data)} exceeds maximum message size of {MESSAGE_LENGTH_MAX}",
        )
    return FRAME_HEADER.pack(len(data), stream_id, msg_type, flags) + data


@dataclass
class FrameReader:
    """Incremental ttrpc stream parser: feed bytes of one logical connection, get Frames."""

    _buf: bytearray = field(default_factory=bytearray)

    def feed(self, data: bytes) -> list[Frame]:
        self._buf += data
        frames: list[Frame] = []
        while len(self._buf) >= FRAME_HEADER_LEN:
            length, stream_id, msg_type, flags = FRAME_HEADER.unpack_from(self._buf)
            if length > MESSAGE_LENGTH_MAX:
                raise TtrpcProtocolError(
                    f"message length {length} exceeds maximum message size {MESSAGE_LENGTH_MAX}"
                )
            end = FRAME_HEADER_LEN + length
            if len(self._buf) < end:
                break
            frames.append(Frame(stream_id, msg_type, flags, bytes(self._buf[FRAME_HEADER_LEN:end])))
            del self._buf[:end]
        return frames

    @property
    def pending(self) -> int:
        """Bytes buffered towards an unfinished frame."""
        return len(self._buf)


def encode_request(service: str, method: str, payload: bytes, timeout_nano: int = 0) -> bytes:
    return ttrpc_request_pb2.Request(
        service=service, method=method, payload=payload, timeout_nano=timeout_nano
    ).SerializeToString()


def decode_request(data: bytes) -> ttrpc_request_pb2.Request:
    req = ttrpc_request_pb2.Request()
    req.ParseFromString(data)
    return req


def encode_response(payload: bytes = b"", code: int = Code.OK, message: str = "") -> bytes:
    # Like the Go server (containerd/ttrpc server.go marshals Response{Status:
    # status.Proto(), ...}), the status is always present, empty for OK.
    resp = ttrpc_request_pb2.Response(payload=payload)
    resp.status.CopyFrom(ttrpc_status_pb2.Status(code=int(code), message=message))
    return resp.SerializeToString()


def decode_response(data: bytes) -> bytes:
    """Return the payload of an OK response or raise :class:`TtrpcError` (also for bytes
    that are not a Response: the peer broke the protocol, the call failed)."""
    resp = ttrpc_request_pb2.Response()
    try:
        resp.ParseFromString(data)
    except Exception as exc:  # google.protobuf DecodeError
        raise TtrpcError(Code.INTERNAL, f"malformed ttrpc response: {exc}") from None
    if resp.HasField("status") and resp.status.code != Code.OK:
        raise TtrpcError(resp.status.code, resp.status.message)
    return resp.payload
