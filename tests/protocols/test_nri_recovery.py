"""Recovery and deadlines between lab/runtime and the agent's NRI plugin."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from dmn.agent.nri import mux
from dmn.agent.nri import ttrpc_frame as t
from dmn.agent.nri.plugin import RUNTIME_SERVICE, NriPlugin, PluginConfig, PluginThread
from dmn.agent.nri.ttrpc_frame import TYPE_REQUEST, encode_frame, encode_request
from dmn.agent.protos import nri_api_pb2 as api
from dmn.lab.runtime.nri_runtime import HookFailed, LabNriRuntime, LabPod
from tests.protocols.nri_fixtures import (
    RELAXED,
    RELAXED_DEADLINE,
    WAIT,
    RecordingHandler,
    release,
)
from tests.waiting import wait_for

# Fast reconnects; a hook deadline that only the deadline tests lower.
FAST = {"backoff_initial": 0.02, "backoff_max": 0.2, "hook_deadline": RELAXED_DEADLINE}


def _plugin(sock: str, handler: RecordingHandler, **kw: object) -> PluginThread:
    cfg = PluginConfig(socket_path=sock, **{**FAST, **kw})  # type: ignore[arg-type]
    return PluginThread(NriPlugin(handler, cfg)).start()


def test_runtime_restart_reconnects_reregisters_resynchronizes(tmp_path: Path) -> None:
    sock = str(tmp_path / "nri.sock")
    runtime = LabNriRuntime(sock, **RELAXED).start()
    handler = RecordingHandler()
    thread = _plugin(sock, handler)
    try:
        assert runtime.wait_ready(1, WAIT)
        runtime.run_pod_sandbox(LabPod("a", "uid-a", "a", "ns", "/run/netns/a"))
        runtime.stop()  # runtime goes away, socket removed
        wait_for(lambda: not thread.ready.is_set(), timeout=WAIT, interval=0.01)

        runtime = LabNriRuntime(sock, **RELAXED)
        runtime.pods["a"] = LabPod("a", "uid-a", "a", "ns", "/run/netns/a")
        runtime.pods["b"] = LabPod("b", "uid-b", "b", "ns", "/run/netns/b")
        runtime.start()
        assert runtime.wait_ready(1, WAIT)
        wait_for(lambda: len(handler.synced) == 2, timeout=WAIT, interval=0.01)
        assert handler.synced[-1] == (["uid-a", "uid-b"], [])
        assert thread.plugin.stats.registrations == 2
        runtime.run_pod_sandbox(LabPod("c", "uid-c", "c", "ns", "/run/netns/c"))
        assert handler.events() == ["RunPodSandbox", "RunPodSandbox"]
    finally:
        thread.stop()
        runtime.stop()


def test_plugin_restart_is_accepted_and_resynchronized(tmp_path: Path) -> None:
    sock = str(tmp_path / "nri.sock")
    runtime = LabNriRuntime(sock, **RELAXED).start()
    runtime.pods["a"] = LabPod("a", "uid-a", "a", "ns", "/run/netns/a")
    first = _plugin(sock, RecordingHandler())
    try:
        assert runtime.wait_ready(1, WAIT)
        first.stop()
        wait_for(lambda: runtime.ready_plugins == [], timeout=WAIT, interval=0.01)
        handler = RecordingHandler()
        second = _plugin(sock, handler)
        try:
            assert runtime.wait_ready(1, WAIT)
            assert handler.synced == [(["uid-a"], [])]
            runtime.stop_pod_sandbox("a")
            assert handler.events() == ["StopPodSandbox"]
        finally:
            second.stop()
    finally:
        runtime.stop()


def test_hook_deadline_stays_below_the_runtime_timeout() -> None:
    """Pure: the deadline is a fraction of the runtime's timeout (or the caller's), capped."""
    plugin = NriPlugin(RecordingHandler(), PluginConfig(hook_deadline=1.5))
    plugin.stats.request_timeout = 0.8  # what ConfigureRequest.request_timeout told us
    assert plugin.hook_deadline() == pytest.approx(0.6)  # 0.75 x 0.8 s
    assert plugin.hook_deadline(timeout_nano=400_000_000) == pytest.approx(0.3)
    plugin.stats.request_timeout = 10.0
    assert plugin.hook_deadline() == pytest.approx(1.5)  # the cap


def test_configure_tells_the_plugin_the_runtime_timeout(tmp_path: Path) -> None:
    sock = str(tmp_path / "nri.sock")
    runtime = LabNriRuntime(sock, request_timeout=12.0, registration_timeout=20.0).start()
    thread = _plugin(sock, RecordingHandler(), hook_deadline=1.5)
    try:
        assert runtime.wait_ready(1, WAIT)
        assert thread.plugin.stats.request_timeout == pytest.approx(12.0)
        assert thread.plugin.hook_deadline() == pytest.approx(1.5)
        thread.plugin.stats.request_timeout = 0.8
        assert thread.plugin.hook_deadline() == pytest.approx(0.6)
    finally:
        thread.stop()
        runtime.stop()


def test_hook_exceeding_deadline_is_reported_not_hung(tmp_path: Path) -> None:
    """The hook never returns until released; the plugin answers DEADLINE_EXCEEDED at its
    own (short) deadline, long before the runtime's generous timeout: deterministic."""
    sock = str(tmp_path / "nri.sock")
    runtime = LabNriRuntime(sock, **RELAXED).start()
    handler = RecordingHandler(block={"RunPodSandbox": threading.Event()})
    thread = _plugin(sock, handler, hook_deadline=0.3)
    try:
        assert runtime.wait_ready(1, WAIT)
        assert thread.plugin.hook_deadline() == pytest.approx(0.3)
        with pytest.raises(HookFailed, match=r"exceeded its 0\.300s deadline"):
            runtime.run_pod_sandbox(LabPod("slow", "uid-slow", "slow", "ns", "/run/netns/s"))
        wait_for(lambda: len(handler.timeouts) == 1, timeout=WAIT, interval=0.01)
        report = handler.timeouts[0]
        assert (report.event, report.pod_uid) == ("RunPodSandbox", "uid-slow")
        assert thread.plugin.stats.hook_timeouts == 1
        # the plugin answered before the runtime's own timeout: it was not dropped
        assert runtime.ready_plugins == ["10-dra-multi-network"]
        assert "dropped" not in [e.kind for e in runtime.events]
    finally:
        release(handler)
        thread.stop()
        runtime.stop()


def test_refused_hook_fails_the_operation(tmp_path: Path) -> None:
    sock = str(tmp_path / "nri.sock")
    runtime = LabNriRuntime(sock, **RELAXED).start()
    handler = RecordingHandler(refuse={"CreateContainer"})
    thread = _plugin(sock, handler)
    try:
        assert runtime.wait_ready(1, WAIT)
        runtime.run_pod_sandbox(LabPod("p", "uid-p", "p", "ns", "/run/netns/p"))
        from dmn.lab.runtime.nri_runtime import LabContainer

        with pytest.raises(HookFailed, match="refused by test"):
            runtime.create_container("p", LabContainer("c", "p", "app"))
        assert "c" not in runtime.containers
    finally:
        thread.stop()
        runtime.stop()


def _raw_register(sock_path: str, name: str, idx: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sock_path)
    req = api.RegisterPluginRequest(plugin_name=name, plugin_idx=idx).SerializeToString()
    frame = encode_frame(1, TYPE_REQUEST, encode_request(RUNTIME_SERVICE, "RegisterPlugin", req))
    s.sendall(mux.encode(mux.RUNTIME_SERVICE_CONN, frame))
    return s


def test_runtime_drops_plugin_that_never_answers(tmp_path: Path) -> None:
    """Each peer here never answers, so every drop is certain; the short timeouts apply only
    to what must time out (a slow machine cannot turn one reason into another)."""
    sock = str(tmp_path / "nri.sock")
    runtime = LabNriRuntime(sock, request_timeout=0.3, registration_timeout=WAIT).start()

    def dropped() -> list[str]:
        return sorted(e.detail for e in runtime.events if e.kind == "dropped")

    try:
        mute = _raw_register(sock, "mute", "05")  # registers, never answers Configure
        bad = _raw_register(sock, "bad name!", "5")
        wait_for(lambda: len(dropped()) == 2, timeout=WAIT, interval=0.01)
        runtime.registration_timeout = 0.3  # read when the next connection is accepted
        silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        silent.connect(sock)  # never registers
        wait_for(lambda: len(dropped()) == 3, timeout=WAIT, interval=0.01)
        reasons = dropped()
        assert any("registration timed out" in r for r in reasons)
        assert any("invalid plugin name" in r for r in reasons)
        assert any("Configure" in r and "exceeded" in r for r in reasons)
        assert runtime.ready_plugins == []
        for s in (mute, silent, bad):
            s.close()
    finally:
        runtime.stop()


def test_plugin_identity_is_validated_before_connecting() -> None:
    with pytest.raises(ValueError, match="two digits"):
        PluginConfig(index="7")
    with pytest.raises(ValueError, match="plugin name"):
        PluginConfig(name="dra multi")


def test_runtime_drops_slow_plugin_pod_proceeds_plugin_recovers(tmp_path: Path) -> None:
    """A plugin that misses the runtime's timeout is dropped (containerd's behaviour), the
    pod proceeds, and the plugin reconnects and re-synchronizes on its own."""
    sock = str(tmp_path / "nri.sock")
    runtime = LabNriRuntime(sock, **RELAXED).start()
    handler = RecordingHandler(block={"RunPodSandbox": threading.Event()})
    thread = _plugin(sock, handler)
    try:
        assert runtime.wait_ready(1, WAIT)
        # misconfigure our own deadline above the runtime's timeout to provoke the drop
        thread.plugin.hook_deadline = lambda timeout_nano=0: WAIT  # type: ignore[method-assign]
        # this one hook gets a short runtime timeout; it blocks until released: exceeded
        pod = LabPod("p", "uid-p", "p", "ns", "/run/netns/p")
        runtime.run_pod_sandbox(pod, timeout=0.3)  # no raise: the pod proceeds
        assert "p" in runtime.pods
        dropped = runtime.wait_event("dropped", WAIT)
        assert dropped is not None and "RunPodSandbox" in dropped.detail
        wait_for(lambda: thread.plugin.stats.synchronizes >= 2, timeout=WAIT, interval=0.01)
        assert handler.synced[-1] == (["uid-p"], [])
        assert runtime.wait_ready(1, WAIT)
    finally:
        release(handler)
        thread.stop()
        runtime.stop()


def test_runtime_shutdown_reaches_handler_and_plugin_waits_for_return(tmp_path: Path) -> None:
    sock = str(tmp_path / "nri.sock")
    runtime = LabNriRuntime(sock, **RELAXED).start()
    handler = RecordingHandler()
    thread = _plugin(sock, handler)
    try:
        assert runtime.wait_ready(1, WAIT)
        runtime.shutdown()
        assert handler.events() == ["Shutdown"]
        wait_for(lambda: not thread.ready.is_set(), timeout=WAIT, interval=0.01)
        runtime = LabNriRuntime(sock, **RELAXED).start()
        assert runtime.wait_ready(1, WAIT)
        assert thread.plugin.stats.registrations == 2
    finally:
        thread.stop()
        runtime.stop()


def test_malformed_runtime_reply_ends_the_session_not_the_plugin(tmp_path: Path) -> None:
    """A runtime that answers RegisterPlugin with bytes that are not a ttrpc Response is a
    protocol error: the plugin drops that connection and reconnects with backoff."""
    sock = str(tmp_path / "nri.sock")
    bogus = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    bogus.bind(sock)
    bogus.listen(1)
    handler = RecordingHandler()
    thread = _plugin(sock, handler)
    runtime: LabNriRuntime | None = None
    try:
        bogus.settimeout(WAIT)
        conn, _ = bogus.accept()
        conn.settimeout(WAIT)
        assert conn.recv(65536)  # the RegisterPlugin request
        garbage = encode_frame(1, t.TYPE_RESPONSE, b"\xff\xff\xff")  # corrupt protobuf
        conn.sendall(mux.encode(mux.RUNTIME_SERVICE_CONN, garbage))
        wait_for(lambda: thread.plugin.stats.disconnects >= 1, timeout=WAIT, interval=0.01)
        conn.close()
        bogus.close()
        runtime = LabNriRuntime(sock, **RELAXED).start()  # a real runtime takes the path over
        assert runtime.wait_ready(1, WAIT)
        assert thread.plugin.stats.registrations == 1
    finally:
        thread.stop()
        if runtime is not None:
            runtime.stop()
        bogus.close()


def test_plugin_stats_stay_bounded_however_many_hooks_run() -> None:
    """Issue 13 (bounds): the stats kept every hook name ever run; now the last
    EVENT_HISTORY of them, while the counters still count all."""
    import asyncio

    from dmn.agent.nri.plugin import EVENT_HISTORY

    plugin = NriPlugin(RecordingHandler(), PluginConfig(hook_deadline=RELAXED_DEADLINE))

    async def many() -> None:
        for i in range(EVENT_HISTORY * 3):
            await plugin._hook(f"Hook{i}", "", "", 0, lambda: None)

    asyncio.run(many())
    assert plugin.stats.hooks == EVENT_HISTORY * 3
    assert len(plugin.stats.events) == EVENT_HISTORY
    assert plugin.stats.events[-1] == f"Hook{EVENT_HISTORY * 3 - 1}"
