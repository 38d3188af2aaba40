"""Hostile local clients against the kubelet plugin's real gRPC servers on real unix sockets
(issue 39): many idle connections, requests stopped half way, announced or sent messages
over the bound, and peers that never read may not starve the kubelet's own calls, which
must still succeed within their deadline. Bounds: :mod:`dmn.agent.kubelet.bounds`."""

from __future__ import annotations

import shutil
import socket
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack
from pathlib import Path

import grpc
import pytest

from dmn.agent.kubelet.bounds import ServerBounds
from dmn.agent.kubelet.handler import (
    ClaimRef,
    DeviceHealth,
    Health,
    PreparedDevice,
    PrepareResult,
    UnprepareResult,
)
from dmn.agent.kubelet.server import KubeletPluginServer
from dmn.agent.protos import (
    dra_health_v1_pb2,
    dra_health_v1_pb2_grpc,
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    grpc_health_v1_pb2,
    grpc_health_v1_pb2_grpc,
    pluginregistration_v1_pb2,
    pluginregistration_v1_pb2_grpc,
)
from tests.protocols.raw_h2 import RawH2, grpc_message_prefix
from tests.waiting import wait_for

pytestmark = pytest.mark.adversarial

DRIVER = "dra-multi-network.schseba.github.io"
PREPARE = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources"
WATCH = "/v1.DRAResourceHealth/NodeWatchResources"
GET_INFO = "/pluginregistration.Registration/GetInfo"
# The kubelet's own deadline for a call; generous because the CI machine is shared.
DEADLINE = 30.0


class Handler:
    def prepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, PrepareResult]:
        return {
            c.uid: PrepareResult(devices=(PreparedDevice("node-a", f"vf-{c.uid}", ("net",)),))
            for c in claims
        }

    def unprepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, UnprepareResult]:
        return {c.uid: UnprepareResult() for c in claims}


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    """Short paths: a unix socket path must fit sockaddr_un (107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="dmn-h-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _server(sock_dir: Path, bounds: ServerBounds | None = None) -> KubeletPluginServer:
    extra = {} if bounds is None else {"bounds": bounds}
    return KubeletPluginServer(
        DRIVER,
        Handler(),
        registry_dir=sock_dir / "registry",
        plugins_dir=sock_dir / "plugins",
        **extra,  # type: ignore[arg-type]
    ).start()


@pytest.fixture
def server(sock_dir: Path) -> Iterator[KubeletPluginServer]:
    srv = _server(sock_dir)
    yield srv
    srv.stop(grace=1.0)


def _kubelet_calls_succeed(srv: KubeletPluginServer) -> None:
    """What the kubelet does: GetInfo on the registration socket, then a prepare and a
    health check on the DRA socket, each with its deadline; every one must succeed."""
    with grpc.insecure_channel(f"unix://{srv.registration_socket}") as ch:
        info = pluginregistration_v1_pb2_grpc.RegistrationStub(ch).GetInfo(
            pluginregistration_v1_pb2.InfoRequest(), timeout=DEADLINE
        )
        assert info.name == DRIVER
    with grpc.insecure_channel(f"unix://{srv.dra_socket}") as ch:
        got = dra_v1_pb2_grpc.DRAPluginStub(ch).NodePrepareResources(
            dra_v1_pb2.NodePrepareResourcesRequest(
                claims=[dra_v1_pb2.Claim(namespace="ns", uid="real", name="claim-real")]
            ),
            timeout=DEADLINE,
        )
        assert got.claims["real"].error == ""
        assert got.claims["real"].devices[0].device_name == "vf-real"
        health = grpc_health_v1_pb2_grpc.HealthStub(ch).Check(
            grpc_health_v1_pb2.HealthCheckRequest(), timeout=DEADLINE
        )
        assert health.status == grpc_health_v1_pb2.HealthCheckResponse.SERVING


def _half_sent(path: Path, method: str, connections: int, streams: int) -> list[RawH2]:
    """Requests whose message announces 100 bytes and delivers 3, then nothing more."""
    peers = [RawH2(str(path)) for _ in range(connections)]
    for peer in peers:
        for _ in range(streams):
            peer.open_stream(method, grpc_message_prefix(100) + b"\x0a\x01x")
        assert peer.sync(DEADLINE), "the server read every frame sent before the PING"
    return peers


def test_half_sent_requests_do_not_starve_the_kubelet(server: KubeletPluginServer) -> None:
    """More stalled requests than the agent has handler threads (8 DRA, 2 registration),
    spread over connections as a local attacker would."""
    with ExitStack() as stack:
        for peer in _half_sent(server.dra_socket, PREPARE, connections=8, streams=8):
            stack.callback(peer.close)
        for peer in _half_sent(server.registration_socket, GET_INFO, connections=4, streams=4):
            stack.callback(peer.close)
        _kubelet_calls_succeed(server)


def test_idle_connections_do_not_starve_the_kubelet(server: KubeletPluginServer) -> None:
    """Connections that send nothing, and connections that send only the preface."""
    with ExitStack() as stack:
        for path in (server.dra_socket, server.registration_socket):
            for _ in range(100):
                sock = stack.enter_context(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
                sock.connect(str(path))
            for _ in range(50):
                peer = RawH2(str(path))
                stack.callback(peer.close)
        _kubelet_calls_succeed(server)


def test_never_reading_watchers_do_not_starve_the_kubelet(server: KubeletPluginServer) -> None:
    """Health streams whose peer grants no flow-control window and never reads a byte,
    while the board changes (so every stream has a snapshot it cannot deliver)."""
    with ExitStack() as stack:
        for _ in range(4):
            peer = RawH2(str(server.dra_socket), reading=False, window=0)
            stack.callback(peer.close)
            for _ in range(4):
                peer.open_stream(WATCH, grpc_message_prefix(0), end=True)
        for n in range(20):
            server.publish_health(
                [DeviceHealth("node-a", f"vf-{i}", Health.HEALTHY, n, "x" * 200) for i in range(50)]
            )
        _kubelet_calls_succeed(server)


def test_watch_streams_beyond_the_bound_are_refused(sock_dir: Path) -> None:
    srv = _server(sock_dir, ServerBounds(max_watch_streams=2))
    try:
        with grpc.insecure_channel(f"unix://{srv.dra_socket}") as ch:
            watch = dra_health_v1_pb2_grpc.DRAResourceHealthStub(ch)
            request = dra_health_v1_pb2.NodeWatchResourcesRequest()
            held = [watch.NodeWatchResources(request, timeout=DEADLINE) for _ in range(2)]
            for stream in held:
                next(stream)
            with pytest.raises(grpc.RpcError) as refused:
                next(watch.NodeWatchResources(request, timeout=DEADLINE))
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            for stream in held:
                stream.cancel()
        _kubelet_calls_succeed(srv)
    finally:
        srv.stop(grace=1.0)


def test_oversized_messages_are_refused_and_the_kubelet_still_served(
    server: KubeletPluginServer,
) -> None:
    big = dra_v1_pb2.NodePrepareResourcesRequest(
        claims=[
            dra_v1_pb2.Claim(namespace="ns" * 100, uid=f"uid-{i}", name="n" * 200)
            for i in range(2000)
        ]
    )
    assert big.ByteSize() > server.bounds.max_receive_message_length
    with grpc.insecure_channel(f"unix://{server.dra_socket}") as ch:
        with pytest.raises(grpc.RpcError) as refused:
            dra_v1_pb2_grpc.DRAPluginStub(ch).NodePrepareResources(big, timeout=DEADLINE)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    with ExitStack() as stack:
        # announced as 1 GiB and never sent: refused on the announcement, nothing buffered
        for _ in range(8):
            peer = RawH2(str(server.dra_socket))
            stack.callback(peer.close)
            peer.open_stream(PREPARE, grpc_message_prefix(1 << 30) + b"\x0a" * 1000)
            assert peer.sync(DEADLINE)
        _kubelet_calls_succeed(server)


def test_calls_beyond_the_bound_are_refused_not_queued(sock_dir: Path) -> None:
    """At the call bound a new call is refused at once (RESOURCE_EXHAUSTED), never queued
    behind the stalled ones; when the stalled peers go away the slots come back."""
    bounds = ServerBounds(maximum_concurrent_rpcs=8, max_concurrent_streams=4)
    srv = _server(sock_dir, bounds)
    try:
        peers = _half_sent(srv.dra_socket, PREPARE, connections=2, streams=4)
        with grpc.insecure_channel(f"unix://{srv.dra_socket}") as ch:
            stub = dra_v1_pb2_grpc.DRAPluginStub(ch)
            request = dra_v1_pb2.NodePrepareResourcesRequest(
                claims=[dra_v1_pb2.Claim(namespace="ns", uid="real", name="claim-real")]
            )
            with pytest.raises(grpc.RpcError) as refused:
                stub.NodePrepareResources(request, timeout=DEADLINE)
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            for peer in peers:
                peer.close()

            def served() -> object:
                try:
                    return stub.NodePrepareResources(request, timeout=DEADLINE)
                except grpc.RpcError as exc:
                    if exc.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                        raise
                    return None

            got = wait_for(served, timeout=DEADLINE, what="a slot freed by the closed peers")
            assert got.claims["real"].error == ""  # type: ignore[attr-defined]
    finally:
        srv.stop(grace=1.0)
