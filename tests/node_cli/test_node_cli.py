"""``dmn node`` as a real process: the NodeAgent it runs, its signals and its refusals.

The process is ``python -m dmn node`` against a lab API server (with this node's ``Node``
object), with private kubelet plugin dirs, NRI socket and state dir under a short /tmp path
(unix socket paths must fit sockaddr_un). A lab NRI runtime listens on that socket and must
see the plugin register and synchronize; SIGTERM must exit 0 and remove both kubelet sockets.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from dmn.agent.protos import pluginregistration_v1_pb2, pluginregistration_v1_pb2_grpc
from dmn.api.cluster import Cluster, connect
from dmn.api.identity import DRIVER
from dmn.lab.apiserver import LabApiServer
from dmn.lab.runtime.nri_runtime import LabNriRuntime
from tests.waiting import wait_for

NODE = "n1-node"
WAIT = 30.0


@pytest.fixture
def root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="dmn-n1-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def server() -> Iterator[LabApiServer]:
    with LabApiServer() as srv, Cluster(connect(url=srv.url)) as cluster:
        cluster.apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
        yield srv


def _node(argv: list[str]) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "NRI_PLUGIN_SOCKET"}
    return subprocess.Popen(
        [sys.executable, "-m", "dmn", "node", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "dmn", "node", *argv]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def _kubelet(root: Path, suffix: str) -> list[str]:
    reg, plugins = str(root / f"r{suffix}"), str(root / f"p{suffix}")
    return ["--kubelet-registry-dir", reg, "--kubelet-plugins-dir", plugins]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _http(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_node_runs_agent_and_stops_on_sigterm(root: Path, server: LabApiServer) -> None:
    nri = root / "nri.sock"
    runtime = LabNriRuntime(str(nri), request_timeout=30.0, registration_timeout=20.0).start()
    reg_sock = root / "reg" / f"{DRIVER}-reg.sock"
    dra_sock = root / "plugins" / DRIVER / "dra.sock"
    port = _free_port()
    proc = _node(
        [
            "--url",
            server.url,
            "--node-name",
            NODE,
            "--state-dir",
            str(root / "state"),
            "--kubelet-registry-dir",
            str(root / "reg"),
            "--kubelet-plugins-dir",
            str(root / "plugins"),
            "--nri-socket",
            str(nri),
            "--health-address",
            "127.0.0.1",
            "--health-port",
            str(port),
        ]
    )
    try:
        wait_for(
            lambda: reg_sock.is_socket() and dra_sock.is_socket(),
            timeout=WAIT,
            what="the registration and DRA sockets",
        )
        assert runtime.wait_ready(1, WAIT), "the NRI plugin did not register and synchronize"
        assert (root / "state").is_dir()
        # readiness is honest: no kubelet has confirmed the registration yet
        code, ready = _http(port, "/readyz")
        assert code == 503, ready
        assert "[+]journal-writable ok" in ready and "[+]nri-connected ok" in ready
        assert "[+]api-reachable ok" in ready and "[-]kubelet-registered" in ready
        assert _http(port, "/livez") == (200, "[+]journal-writable ok\nok\n")
        # the kubelet's side of plugin registration, over the real registration socket
        with grpc.insecure_channel(f"unix://{reg_sock}") as channel:
            stub = pluginregistration_v1_pb2_grpc.RegistrationStub(channel)  # type: ignore[no-untyped-call]
            stub.GetInfo(pluginregistration_v1_pb2.InfoRequest())
            status = pluginregistration_v1_pb2.RegistrationStatus(plugin_registered=True)
            stub.NotifyRegistrationStatus(status)
        assert _http(port, "/readyz")[0] == 200
        metrics = _http(port, "/metrics")[1]
        assert "dmn_nri_connections_total 1.0" in metrics
        assert "dmn_published_devices " in metrics
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=WAIT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        runtime.stop()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    assert not reg_sock.exists() and not dra_sock.exists()


def test_sigint_before_nri_runtime_exists_exits_zero(root: Path, server: LabApiServer) -> None:
    """No NRI runtime yet (the plugin keeps retrying): SIGINT still stops it cleanly."""
    reg_sock = root / "reg" / f"{DRIVER}-reg.sock"
    proc = _node(
        [
            "--url",
            server.url,
            "--node-name",
            NODE,
            "--state-dir",
            str(root / "state"),
            "--kubelet-registry-dir",
            str(root / "reg"),
            "--kubelet-plugins-dir",
            str(root / "plugins"),
            "--nri-socket",
            str(root / "absent.sock"),
        ]
    )
    try:
        wait_for(reg_sock.is_socket, timeout=WAIT, what="the registration socket")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=WAIT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert not reg_sock.exists()


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["--no-such-flag"], "E_USAGE"),
        (["--url", "http://127.0.0.1:1", "--kubeconfig", "/x"], "E_USAGE"),
        (["--kubeconfig", "/nonexistent/kubeconfig"], "E_KUBECONFIG"),
        (["--url", "http://127.0.0.1:1", "--sysfs", "/nonexistent/sys"], "E_USAGE"),
        (["--url", "http://127.0.0.1:1", "--node-name", ""], "E_USAGE"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(argv: list[str], code: str) -> None:
    proc = _run(argv)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"dmn node: error[{code}]: "), proc.stderr


def test_unreachable_api_server_exits_1(root: Path) -> None:
    proc = _run(["--url", "http://127.0.0.1:1", "--node-name", NODE, "--state-dir", str(root)])
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("dmn node: error[E_API_UNREACHABLE]: ")


def test_unknown_node_exits_1(root: Path, server: LabApiServer) -> None:
    proc = _run(["--url", server.url, "--node-name", "no-such-node", "--state-dir", str(root)])
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].startswith("dmn node: error[E_NODE_NOT_FOUND]: ")


def test_second_agent_on_a_held_journal_exits_1(root: Path, server: LabApiServer) -> None:
    """The journal is single-writer: a second agent on the same state dir is refused."""
    common = ["--url", server.url, "--node-name", NODE, "--state-dir", str(root / "state")]
    common += ["--nri-socket", str(root / "absent.sock")]
    first = _node([*common, *_kubelet(root, "1")])
    try:
        wait_for(
            (root / "r1" / f"{DRIVER}-reg.sock").is_socket,
            timeout=WAIT,
            what="the first agent's registration socket",
        )
        second = _run([*common, *_kubelet(root, "2")])
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=WAIT)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert second.returncode == 1, second.stderr
    assert "Traceback" not in second.stderr
    last = second.stderr.strip().splitlines()[-1]
    assert last.startswith("dmn node: error[E_JOURNAL_HELD]: "), last
    assert first.returncode == 0


def _ready(state: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "dmn", "node-ready", "--state-dir", str(state), "--max-age", "10"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60)


def _notify_registration(reg_sock: Path, registered: bool) -> None:
    """What kubelet's plugin watcher does after GetInfo: report the registration outcome."""
    import grpc

    from dmn.agent.protos import pluginregistration_v1_pb2 as pb
    from dmn.agent.protos import pluginregistration_v1_pb2_grpc as pb_grpc

    with grpc.insecure_channel(f"unix://{reg_sock}") as ch:
        stub = pb_grpc.RegistrationStub(ch)
        stub.GetInfo(pb.InfoRequest(), timeout=WAIT)
        error = "" if registered else "rejected by the test kubelet"
        status = pb.RegistrationStatus(plugin_registered=registered, error=error)
        stub.NotifyRegistrationStatus(status, timeout=WAIT)


def test_readiness_follows_kubelet_registration_nri_and_stop(
    root: Path, server: LabApiServer
) -> None:
    """``dmn node-ready`` (the DaemonSet's probe) is ready only while kubelet has registered
    the plugin AND the NRI runtime is connected AND the journal is open; a stopped agent
    withdraws its readiness."""
    nri = root / "nri.sock"
    state = root / "state"
    runtime = LabNriRuntime(str(nri), request_timeout=30.0, registration_timeout=20.0).start()
    reg_sock = root / "reg" / f"{DRIVER}-reg.sock"
    argv = ["--url", server.url, "--node-name", NODE, "--state-dir", str(state)]
    argv += ["--kubelet-registry-dir", str(root / "reg")]
    argv += ["--kubelet-plugins-dir", str(root / "plugins"), "--nri-socket", str(nri)]
    proc = _node([*argv, "--readiness-interval", "0.2"])
    try:
        wait_for(reg_sock.is_socket, timeout=WAIT, what="the registration socket")
        assert runtime.wait_ready(1, WAIT)
        # the agent rewrites its readiness every 0.2 s: wait for the write that follows the
        # NRI connection (an earlier one still lists nriConnected as missing)
        first = wait_for(
            lambda: (
                (r := _ready(state)).returncode == 1
                and "kubeletRegistered" in r.stderr
                and "nriConnected" not in r.stderr
                and r
            ),
            timeout=WAIT,
            what="not ready only for want of kubelet registration",
        )
        assert first.returncode == 1 and "nriConnected" not in first.stderr, first.stderr
        _notify_registration(reg_sock, registered=True)
        wait_for(lambda: _ready(state).returncode == 0, timeout=WAIT)
        _notify_registration(reg_sock, registered=False)  # kubelet withdrew it
        wait_for(lambda: _ready(state).returncode == 1, timeout=WAIT)
        _notify_registration(reg_sock, registered=True)
        wait_for(lambda: _ready(state).returncode == 0, timeout=WAIT)
        runtime.stop()  # the runtime connection drops
        wait_for(lambda: "nriConnected" in _ready(state).stderr, timeout=WAIT)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=WAIT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        runtime.stop()
    assert proc.returncode == 0, err
    gone = _ready(state)
    assert gone.returncode == 1 and "does not exist" in gone.stderr, gone.stderr


@pytest.mark.adversarial
def test_failed_journal_commit_stops_the_agent_and_exits_1_then_restart_recovers(
    root: Path, server: LabApiServer
) -> None:
    """Issue 13 (deliverable 6) with a real ``dmn node``: its state dir is on a disk whose
    fdatasync fails for real once the test says so (tests/journal/failing_disk.py). Before:
    the failed commit was logged, the agent kept running, serving errors. Now: the first
    failed commit stops mutation, the agent stops and exits 1 with E_JOURNAL_WRITE; after
    the disk is repaired, the restarted agent opens (recovers) the journal and serves."""
    from dmn.lab.runtime.nri_runtime import LabPod
    from tests.journal.failing_disk import failing_disk

    nri = root / "nri.sock"
    runtime = LabNriRuntime(str(nri), request_timeout=30.0, registration_timeout=20.0).start()
    procs: list[subprocess.Popen[str]] = []
    try:
        with failing_disk(root) as disk:
            try:
                state = disk.mount / "state"
                port = _free_port()
                argv = ["--url", server.url, "--node-name", NODE, "--state-dir", str(state)]
                argv += [*_kubelet(root, "1"), "--nri-socket", str(nri)]
                argv += ["--health-address", "127.0.0.1", "--health-port", str(port)]
                procs.append(_node(argv))
                assert runtime.wait_ready(1, WAIT)
                wait_for(
                    lambda: _http(port, "/livez")[0] == 200,
                    timeout=WAIT,
                    what="/livez",
                    tolerate=(urllib.error.URLError,),
                )
                # a Pod without claims of ours: RunPodSandbox writes nothing
                runtime.run_pod_sandbox(LabPod("sb-1", "uid-1", "plain", "default"))
                disk.fill()
                runtime.stop_pod_sandbox("sb-1")  # its tombstone is the first failing commit
                _, err = procs[0].communicate(timeout=WAIT)
                assert procs[0].returncode == 1, err
                wait_for(lambda: not runtime.ready_plugins, timeout=WAIT, what="the plugin gone")
                assert "Traceback" not in err
                last = err.strip().splitlines()[-1]
                assert last.startswith("dmn node: error[E_JOURNAL_WRITE]: "), last
                assert "runs recovery" in last
                assert "event=journal-failed" in err
                disk.repair()
                port = _free_port()
                argv[-1] = str(port)
                procs.append(_node(argv))
                wait_for(
                    lambda: runtime.wait_ready(1, 0.5) or procs[1].poll() is not None,
                    timeout=WAIT,
                    what="the restarted agent's NRI connection",
                )
                assert procs[1].poll() is None, procs[1].communicate()[1]
                wait_for(
                    lambda: _http(port, "/livez") == (200, "[+]journal-writable ok\nok\n"),
                    timeout=WAIT,
                    what="the restarted agent's journal writable",
                    tolerate=(urllib.error.URLError,),
                )
                procs[1].send_signal(signal.SIGTERM)
                _, err = procs[1].communicate(timeout=WAIT)
                assert procs[1].returncode == 0, err
            finally:  # before the disk goes: an agent left running would keep it busy
                for proc in procs:
                    if proc.poll() is None:
                        proc.kill()
                        proc.wait()
    finally:
        runtime.stop()
