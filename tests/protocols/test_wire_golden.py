"""Golden bytes for the NRI mux and ttrpc frames, checked against both implementations
(agent/nri and lab/runtime/wire), which were written separately from the upstream facts."""

from __future__ import annotations

from pathlib import Path

import pytest

from dmn.agent.nri import mux
from dmn.agent.nri import ttrpc_frame as t
from dmn.lab.runtime import wire

SERVICE = "nri.pkg.api.v1alpha1.Plugin"
# ttrpc.Request{service=1:"nri.pkg.api.v1alpha1.Plugin", method=2:"Configure"}
REQUEST_BODY = bytes.fromhex("0a1b") + SERVICE.encode() + bytes.fromhex("1209") + b"Configure"
# 10-byte header: length 0x28, stream 1, type 1 (request), flags 0
REQUEST_FRAME = bytes.fromhex("00000028000000010100") + REQUEST_BODY
# 8-byte mux header: conn 1 (Plugin service), length 0x32 (= 10 + 40)
MUX_FRAME = bytes.fromhex("0000000100000032") + REQUEST_FRAME
# ttrpc.Response{status=1:{code=1:12, message=2:"method Foo"}}
UNIMPLEMENTED_BODY = bytes.fromhex("0a0e080c120a") + b"method Foo"


def test_request_envelope_and_frames() -> None:
    assert t.encode_request(SERVICE, "Configure", b"") == REQUEST_BODY
    assert wire.request_body(SERVICE, "Configure", b"", 0) == REQUEST_BODY
    assert t.encode_frame(1, t.TYPE_REQUEST, REQUEST_BODY) == REQUEST_FRAME
    assert wire.ttrpc_message(1, wire.KIND_REQUEST, REQUEST_BODY) == REQUEST_FRAME
    assert mux.encode(mux.PLUGIN_SERVICE_CONN, REQUEST_FRAME) == MUX_FRAME
    assert wire.trunk_frames(wire.CONN_PLUGIN, REQUEST_FRAME) == MUX_FRAME


def test_timeout_is_field_4_varint() -> None:
    body = t.encode_request("s", "m", b"\x01", timeout_nano=2_000_000_000)
    # 2e9 = varint 80 a8 d6 b9 07
    assert body == bytes.fromhex("0a017312016d1a01012080a8d6b907")
    assert wire.request_body("s", "m", b"\x01", 2_000_000_000) == body
    assert wire.parse_request(body).timeout_nano == 2_000_000_000


def test_ok_response_carries_empty_status() -> None:
    ok = bytes.fromhex("0a001203") + b"abc"  # Response{status={}, payload="abc"}
    assert t.encode_response(b"abc") == ok
    assert wire.response_body(b"abc") == ok
    assert t.decode_response(ok) == b"abc"
    assert wire.parse_response(ok) == (0, "", b"abc")


def test_unimplemented_response() -> None:
    assert t.encode_response(code=t.Code.UNIMPLEMENTED, message="method Foo") == UNIMPLEMENTED_BODY
    assert wire.response_body(code=12, message="method Foo") == UNIMPLEMENTED_BODY
    with pytest.raises(t.TtrpcError) as err:
        t.decode_response(UNIMPLEMENTED_BODY)
    assert err.value.code == 12
    assert wire.parse_response(UNIMPLEMENTED_BODY) == (12, "method Foo", b"")


def test_one_ttrpc_frame_split_across_mux_frames() -> None:
    body = bytes(range(256)) * 20  # 5120 bytes
    frame = t.encode_frame(3, t.TYPE_RESPONSE, body)
    assert frame[:10] == bytes.fromhex("00001400000000030200")
    trunk = mux.encode(mux.RUNTIME_SERVICE_CONN, frame)
    # 5130 bytes of ttrpc become a 4096-byte and a 1034-byte mux payload
    assert trunk[:8] == bytes.fromhex("0000000200001000")
    assert trunk[8 + 4096 : 16 + 4096] == bytes.fromhex("000000020000040a")
    assert len(trunk) == 16 + len(frame)
    assert wire.trunk_frames(wire.CONN_RUNTIME, frame) == trunk

    demux, reader = mux.Demultiplexer(), t.FrameReader()
    got: list[t.Frame] = []
    for conn, payload in demux.feed(trunk[:4000]) + demux.feed(trunk[4000:]):
        assert conn == 2
        got += reader.feed(payload)
    assert got == [t.Frame(3, t.TYPE_RESPONSE, 0, body)]

    lab = wire.TrunkReader()
    lab.push(trunk[:9])
    assert lab.messages(2) == []
    lab.push(trunk[9:])
    assert lab.messages(2) == [(3, 2, 0, body)]


def test_several_ttrpc_frames_in_one_mux_frame() -> None:
    a = t.encode_frame(1, t.TYPE_REQUEST, b"first")
    b = t.encode_frame(3, t.TYPE_REQUEST, b"")
    c = t.encode_frame(5, t.TYPE_REQUEST, b"third")
    packed = bytes.fromhex("00000001") + len(a + b + c).to_bytes(4, "big") + a + b + c
    frames = mux.Demultiplexer().feed(packed)
    assert frames == [(1, a + b + c)]
    parsed = t.FrameReader().feed(frames[0][1])
    assert [(f.stream_id, f.data) for f in parsed] == [(1, b"first"), (3, b""), (5, b"third")]
    lab = wire.TrunkReader()
    lab.push(packed)
    assert [(s, body) for s, _, _, body in lab.messages(1)] == [
        (1, b"first"),
        (3, b""),
        (5, b"third"),
    ]


def test_oversized_and_reserved_are_rejected() -> None:
    with pytest.raises(t.TtrpcError):
        t.encode_frame(1, t.TYPE_REQUEST, b"\0" * (t.MESSAGE_LENGTH_MAX + 1))
    with pytest.raises(t.TtrpcProtocolError):
        t.FrameReader().feed(bytes.fromhex("00400001000000010100"))
    with pytest.raises(mux.MuxProtocolError):
        mux.Demultiplexer().feed(bytes.fromhex("0000000000000000"))
    with pytest.raises(mux.MuxProtocolError):
        mux.encode(0, b"x")


def test_unknown_method_and_reused_stream_id(tmp_path: Path) -> None:
    from dmn.agent.nri.plugin import NriPlugin, PluginConfig, PluginThread
    from dmn.lab.runtime.nri_runtime import CallError, LabNriRuntime
    from tests.protocols.nri_fixtures import RecordingHandler

    sock = str(tmp_path / "nri.sock")
    runtime = LabNriRuntime(sock, request_timeout=1.0).start()
    thread = PluginThread(NriPlugin(RecordingHandler(), PluginConfig(socket_path=sock))).start()
    try:
        assert runtime.wait_ready(1, 5.0)
        link = runtime._ready[0]
        with pytest.raises(CallError) as err:
            link.call("UpdatePodSandbox", b"", 1.0)
        assert err.value.code == 12
        link._next_stream = 1  # re-use a stream id: the server must refuse it
        with pytest.raises(CallError) as err:
            link.call("UpdatePodSandbox", b"", 1.0)
        assert (err.value.code, err.value.message) == (
            3,
            "StreamID cannot be re-used and must increment",
        )
    finally:
        thread.stop()
        runtime.stop()
