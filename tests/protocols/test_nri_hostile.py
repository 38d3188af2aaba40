"""A hostile or broken runtime on the NRI trunk (issue 39): a frame stopped half way, a
frame announced over the size bound, a flood of requests left unanswered, a peer that
never reads. Each costs the plugin one session — it drops the trunk for the named reason,
never hangs or buffers without bound — and the next runtime on the socket is served.
Real sockets, the real plugin; the hostile runtime writes raw frames."""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from dmn.agent.nri import mux
from dmn.agent.nri import ttrpc_frame as t
from dmn.agent.nri.plugin import PLUGIN_SERVICE, NriPlugin, PluginConfig, PluginThread
from dmn.agent.nri.transport import TrunkBounds
from dmn.agent.protos import nri_api_pb2 as api
from dmn.lab.runtime.nri_runtime import LabNriRuntime, LabPod
from tests.protocols.nri_fixtures import RELAXED, RELAXED_DEADLINE, WAIT, RecordingHandler, release
from tests.waiting import wait_for

pytestmark = pytest.mark.adversarial

# Short trunk bounds so each case ends promptly; registration waits long, so a session can
# end only by the bound under test, never by the registration deadline.
TIGHT = TrunkBounds(frame_timeout=0.3, write_timeout=0.3, max_in_flight=8)


def _request(stream: int, method: str, payload: bytes = b"") -> bytes:
    frame = t.encode_frame(
        stream, t.TYPE_REQUEST, t.encode_request(PLUGIN_SERVICE, method, payload)
    )
    return mux.encode(mux.PLUGIN_SERVICE_CONN, frame)


def _half_mux_frame(conn: socket.socket) -> None:
    conn.sendall(mux.HEADER.pack(mux.RUNTIME_SERVICE_CONN, 100) + b"x" * 10)


def _half_ttrpc_frame(conn: socket.socket) -> None:
    header = t.FRAME_HEADER.pack(1000, 1, t.TYPE_RESPONSE, 0)
    conn.sendall(mux.encode(mux.RUNTIME_SERVICE_CONN, header + b"x" * 10))


def _oversized_mux_frame(conn: socket.socket) -> None:
    conn.sendall(mux.HEADER.pack(mux.RUNTIME_SERVICE_CONN, mux.MAX_RECV_PAYLOAD + 1))


def _oversized_ttrpc_frame(conn: socket.socket) -> None:
    header = t.FRAME_HEADER.pack(t.MESSAGE_LENGTH_MAX + 1, 1, t.TYPE_RESPONSE, 0)
    conn.sendall(mux.encode(mux.RUNTIME_SERVICE_CONN, header))


def _flood_of_blocked_hooks(conn: socket.socket) -> None:
    pod = api.RunPodSandboxRequest(pod=api.PodSandbox(id="sb", uid="uid-flood", name="p"))
    payload = pod.SerializeToString()
    conn.sendall(b"".join(_request(2 * i, "RunPodSandbox", payload) for i in range(1, 21)))


def _never_reads(conn: socket.socket) -> None:
    """Unknown methods are answered at once; the answers pile up unread."""
    out = b"".join(_request(2 * i, "Nope") for i in range(1, 20001))
    with contextlib.suppress(OSError):  # the plugin drops us before taking it all
        conn.sendall(out)


CASES: dict[str, tuple[Callable[[socket.socket], None], str, TrunkBounds]] = {
    "half-sent mux frame": (_half_mux_frame, "unfinished", TIGHT),
    "half-sent ttrpc frame": (_half_ttrpc_frame, "unfinished", TIGHT),
    "oversized mux frame": (_oversized_mux_frame, "exceeds", TIGHT),
    "oversized ttrpc frame": (_oversized_ttrpc_frame, "exceeds maximum message size", TIGHT),
    "flood of requests": (_flood_of_blocked_hooks, "unanswered", TIGHT),
    "peer never reads": (
        _never_reads,
        "did not read",
        TrunkBounds(frame_timeout=WAIT, write_timeout=0.3, max_in_flight=1 << 20),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_hostile_runtime_costs_one_session_and_the_next_is_served(
    tmp_path: Path, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    act, reason, bounds = CASES[case]
    caplog.set_level(logging.WARNING, logger="dmn.agent.nri.transport")
    sock = str(tmp_path / "nri.sock")
    hostile = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    hostile.bind(sock)
    hostile.listen(1)
    handler = RecordingHandler(block={"RunPodSandbox": threading.Event()})
    config = PluginConfig(
        socket_path=sock,
        backoff_initial=0.02,
        backoff_max=0.2,
        hook_deadline=RELAXED_DEADLINE,
        registration_timeout=WAIT,
        trunk=bounds,
    )
    thread = PluginThread(NriPlugin(handler, config)).start()
    runtime: LabNriRuntime | None = None
    try:
        hostile.settimeout(WAIT)
        conn, _ = hostile.accept()
        conn.settimeout(WAIT)
        assert conn.recv(65536)  # the RegisterPlugin request; never answered
        act(conn)
        wait_for(lambda: thread.plugin.stats.disconnects >= 1, timeout=WAIT, what="dropped")
        failures = [r.getMessage() for r in caplog.records if "nri trunk failed" in r.getMessage()]
        assert any(reason in m for m in failures), failures
        release(handler)
        conn.close()
        hostile.close()
        runtime = LabNriRuntime(sock, **RELAXED).start()  # a real runtime takes the path over
        assert runtime.wait_ready(1, WAIT)
        runtime.run_pod_sandbox(LabPod("sb1", "uid-1", "web", "ns1", "/var/run/netns/cni-1"))
        assert ("RunPodSandbox", "uid-1", "/var/run/netns/cni-1") in handler.calls
    finally:
        release(handler)
        thread.stop()
        if runtime is not None:
            runtime.stop()
        hostile.close()


def test_frame_header_alone_is_not_a_partial_frame() -> None:
    """The frame deadline runs only while bytes of a frame are buffered: an idle trunk may
    stay idle (the runtime sends only when it has events)."""
    reader = t.FrameReader()
    assert reader.feed(t.encode_frame(1, t.TYPE_RESPONSE, b"ok"))[0].data == b"ok"
    assert reader.pending == 0
    reader.feed(struct.pack(">I", 5)[:3])
    assert reader.pending == 3
