"""Full sandbox lifecycle between lab/runtime and the agent's NRI plugin over a real socket."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from dmn.agent.nri.plugin import NriPlugin, PluginConfig, PluginThread
from dmn.agent.protos import nri_api_pb2 as api
from dmn.lab.runtime.nri_runtime import LabContainer, LabNriRuntime, LabPod
from tests.protocols.nri_fixtures import RELAXED, RELAXED_DEADLINE, WAIT, RecordingHandler


def _start(
    tmp_path: Path, **runtime_kw: object
) -> tuple[LabNriRuntime, PluginThread, RecordingHandler]:
    sock = str(tmp_path / "nri.sock")
    runtime = LabNriRuntime(sock, **RELAXED, **runtime_kw)  # type: ignore[arg-type]
    runtime.pods["pre"] = LabPod("pre", "uid-pre", "pre", "default", "/run/netns/pre")
    runtime.containers["c-pre"] = LabContainer("c-pre", "pre", "app", api.CONTAINER_RUNNING)
    runtime.pods["pre2"] = LabPod("pre2", "uid-pre2", "pre2", "default", "/run/netns/pre2")
    runtime.start()
    handler = RecordingHandler()
    cfg = PluginConfig(
        socket_path=sock, backoff_initial=0.02, backoff_max=0.2, hook_deadline=RELAXED_DEADLINE
    )
    thread = PluginThread(NriPlugin(handler, cfg)).start()
    assert runtime.wait_ready(1, WAIT)
    assert thread.wait_ready(WAIT)
    return runtime, thread, handler


@pytest.mark.parametrize("state_change_only", [False, True], ids=["dedicated", "statechange"])
def test_full_sandbox_lifecycle(tmp_path: Path, state_change_only: bool) -> None:
    runtime, thread, handler = _start(tmp_path, sync_chunk=1, state_change_only=state_change_only)
    try:
        # split synchronisation: 3 objects in chunks of 1, delivered once, whole
        assert handler.synced == [(["uid-pre", "uid-pre2"], ["c-pre"])]
        assert thread.plugin.stats.sync_chunks == 3
        assert runtime.ready_plugins == ["10-dra-multi-network"]
        # RUN(1) STOP(2) REMOVE(3) CREATE(4) START(6): bits 0,1,2,3,5
        configured = [e for e in runtime.events if e.kind == "configured"]
        assert [e.detail for e in configured] == ["0x2f"]

        pod = LabPod("sb1", "uid-1", "web", "ns1", "/var/run/netns/cni-1234")
        runtime.run_pod_sandbox(pod)
        ctr = runtime.create_container("sb1", LabContainer("c1", "sb1", "app"))
        assert [(d.path, d.type, d.major, d.minor, d.file_mode.value) for d in ctr.devices] == [
            ("/dev/infiniband/uverbs0", "c", 231, 192, 0o666)
        ]
        runtime.start_container("c1")
        runtime.stop_pod_sandbox("sb1", with_netns=False)
        runtime.remove_pod_sandbox("sb1")

        assert handler.calls == [
            ("RunPodSandbox", "uid-1", "/var/run/netns/cni-1234"),
            ("CreateContainer", "uid-1", "c1"),
            ("StartContainer", "uid-1", "c1"),
            ("StopPodSandbox", "uid-1", None),  # no netns path at StopPodSandbox
            ("RemovePodSandbox", "uid-1", None),
        ]
        kinds = [e.kind for e in runtime.events]
        assert "dropped" not in kinds and "hook-error" not in kinds
        # a StateChange-only runtime never calls the dedicated RPCs; a current one never
        # needs the fallback
        assert "fallback" not in kinds
        assert thread.plugin.stats.state_changes == (4 if state_change_only else 0)
    finally:
        thread.stop()
        runtime.stop()


def test_large_synchronize_crosses_many_mux_frames(tmp_path: Path) -> None:
    sock = str(tmp_path / "nri.sock")
    runtime = LabNriRuntime(sock, **RELAXED)
    for i in range(300):
        pod = LabPod(f"p{i}", f"uid-{i}", f"pod-{i}", "bulk", f"/run/netns/p{i}")
        pod.annotations["note"] = "x" * 200
        runtime.pods[pod.id] = pod
    runtime.start()
    handler = RecordingHandler()
    cfg = PluginConfig(socket_path=sock, hook_deadline=RELAXED_DEADLINE)
    thread = PluginThread(NriPlugin(handler, cfg)).start()
    try:
        assert runtime.wait_ready(1, WAIT)
        ((pods, _),) = handler.synced
        assert pods == [f"uid-{i}" for i in range(300)]  # one ~100 KB request, unsplit
        assert thread.plugin.stats.sync_chunks == 1
    finally:
        thread.stop()
        runtime.stop()


def test_preconnected_socket_from_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = LabNriRuntime(str(tmp_path / "nri.sock"), **RELAXED).start()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    monkeypatch.setenv("NRI_PLUGIN_SOCKET", str(theirs.detach()))
    runtime.adopt(ours)
    handler = RecordingHandler()
    cfg = PluginConfig(
        socket_path=str(tmp_path / "nri.sock"),
        backoff_initial=0.02,
        hook_deadline=RELAXED_DEADLINE,
    )
    thread = PluginThread(NriPlugin(handler, cfg)).start()
    try:
        assert runtime.wait_ready(1, WAIT)
        assert thread.plugin.stats.connects == 1
        runtime.run_pod_sandbox(LabPod("a", "uid-a", "a", "ns", "/run/netns/a"))
        assert handler.events() == ["RunPodSandbox"]
    finally:
        thread.stop()
        runtime.stop()
