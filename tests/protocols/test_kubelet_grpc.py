"""A kubelet-like gRPC client against the agent's registration and DRA servers over real
unix sockets."""

from __future__ import annotations

import shutil
import socket
import tempfile
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest

from dmn.agent.kubelet.handler import (
    ClaimRef,
    DeviceHealth,
    Health,
    PreparedDevice,
    PrepareResult,
    UnprepareResult,
)
from dmn.agent.kubelet.server import KubeletPluginServer, SocketPathError
from dmn.agent.protos import (
    dra_health_v1_pb2,
    dra_health_v1_pb2_grpc,
    dra_health_v1alpha1_pb2,
    dra_health_v1alpha1_pb2_grpc,
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    grpc_health_v1_pb2,
    grpc_health_v1_pb2_grpc,
    pluginregistration_v1_pb2,
    pluginregistration_v1_pb2_grpc,
)
from tests.waiting import wait_for

DRIVER = "dra-multi-network.schseba.github.io"
# Generous: a wait returns as soon as its condition holds; the CI machine is shared.
WAIT = 60.0


class Handler:
    """Prepares every claim except uid 'bad'; can block prepares until released."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.prepared: list[str] = []
        self.unprepared: list[str] = []

    def prepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, PrepareResult]:
        self.entered.set()
        self.gate.wait(WAIT)
        out = {}
        for c in claims:
            if c.uid == "bad":
                out[c.uid] = PrepareResult(error=f"claim {c.namespace}/{c.name}: no such device")
                continue
            if c.uid == "garbled":  # a coordinator bug: a result protobuf cannot encode
                out[c.uid] = PrepareResult(devices=(PreparedDevice(7, "x"),))  # type: ignore[arg-type]
                continue
            self.prepared.append(c.uid)
            out[c.uid] = PrepareResult(
                devices=(
                    PreparedDevice(
                        pool_name="node-a",
                        device_name=f"vf-{c.uid}",
                        request_names=("net",),
                        cdi_device_ids=(f"{DRIVER}/net={c.uid}",),
                        share_id="share-1",
                    ),
                )
            )
        return out

    def unprepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, UnprepareResult]:
        if any(c.uid == "boom" for c in claims):
            raise RuntimeError("journal unavailable")
        self.unprepared += [c.uid for c in claims]
        return {c.uid: UnprepareResult() for c in claims if c.uid != "forgotten"}


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """Short paths: a unix socket path must fit sockaddr_un (107 bytes)."""
    path = Path(tempfile.mkdtemp(prefix="dmn-k-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def plugin(tmp_path: Path) -> Iterator[tuple[KubeletPluginServer, Handler]]:
    handler = Handler()
    srv = KubeletPluginServer(
        DRIVER, handler, registry_dir=tmp_path / "registry", plugins_dir=tmp_path / "plugins"
    ).start()
    yield srv, handler
    srv.stop(grace=1.0)


def _claims(pb: object, *uids: str) -> list[object]:
    return [pb.Claim(namespace="ns", uid=u, name=f"claim-{u}") for u in uids]  # type: ignore[attr-defined]


def test_registration_get_info_and_status(plugin: tuple[KubeletPluginServer, Handler]) -> None:
    srv, _ = plugin
    assert srv.registration_socket.name == f"{DRIVER}-reg.sock"
    assert srv.dra_socket.parts[-2:] == (DRIVER, "dra.sock")
    with grpc.insecure_channel(f"unix://{srv.registration_socket}") as ch:
        stub = pluginregistration_v1_pb2_grpc.RegistrationStub(ch)
        info = stub.GetInfo(pluginregistration_v1_pb2.InfoRequest(), timeout=WAIT)
        assert info.type == "DRAPlugin"
        assert info.name == DRIVER
        assert info.endpoint == str(srv.dra_socket)
        # the DRA service versions, then the health service versions kubelet v1.37 looks for
        assert list(info.supported_versions) == [
            "v1.DRAPlugin",
            "v1beta1.DRAPlugin",
            "v1.DRAResourceHealth",
            "v1alpha1.DRAResourceHealth",
        ]
        stub.NotifyRegistrationStatus(
            pluginregistration_v1_pb2.RegistrationStatus(plugin_registered=True), timeout=WAIT
        )
        assert srv.registration.registered.is_set()
        # a kubelet that rejects the plugin says why; the plugin records it
        stub.NotifyRegistrationStatus(
            pluginregistration_v1_pb2.RegistrationStatus(
                plugin_registered=False, error="version not supported"
            ),
            timeout=WAIT,
        )
    assert not srv.registration.registered.is_set()
    assert srv.registration.last_error == "version not supported"


def test_prepare_unprepare_several_claims_one_fails(
    plugin: tuple[KubeletPluginServer, Handler],
) -> None:
    srv, handler = plugin
    with grpc.insecure_channel(f"unix://{srv.dra_socket}") as ch:
        stub = dra_v1_pb2_grpc.DRAPluginStub(ch)
        resp = stub.NodePrepareResources(
            dra_v1_pb2.NodePrepareResourcesRequest(claims=_claims(dra_v1_pb2, "a", "bad", "b")),
            timeout=WAIT,
        )
        assert set(resp.claims) == {"a", "bad", "b"}
        assert resp.claims["bad"].error == "claim ns/claim-bad: no such device"
        assert not resp.claims["bad"].devices
        for uid in ("a", "b"):
            entry = resp.claims[uid]
            assert entry.error == ""
            (dev,) = entry.devices
            assert (dev.pool_name, dev.device_name, dev.share_id) == (
                "node-a",
                f"vf-{uid}",
                "share-1",
            )
            assert list(dev.request_names) == ["net"]
            assert list(dev.cdi_device_ids) == [f"{DRIVER}/net={uid}"]

        un = stub.NodeUnprepareResources(
            dra_v1_pb2.NodeUnprepareResourcesRequest(claims=_claims(dra_v1_pb2, "a", "forgotten")),
            timeout=WAIT,
        )
        assert un.claims["a"].error == ""
        assert "no result" in un.claims["forgotten"].error
        # a handler exception becomes per-claim errors, not an RPC error
        un = stub.NodeUnprepareResources(
            dra_v1_pb2.NodeUnprepareResourcesRequest(claims=_claims(dra_v1_pb2, "b", "boom")),
            timeout=WAIT,
        )
        assert set(un.claims) == {"b", "boom"}
        assert all("journal unavailable" in un.claims[u].error for u in ("b", "boom"))
    assert handler.prepared == ["a", "b"]


def test_v1beta1_service_serves_same_core(plugin: tuple[KubeletPluginServer, Handler]) -> None:
    srv, _ = plugin
    with grpc.insecure_channel(f"unix://{srv.dra_socket}") as ch:
        stub = dra_v1beta1_pb2_grpc.DRAPluginStub(ch)
        resp = stub.NodePrepareResources(
            dra_v1beta1_pb2.NodePrepareResourcesRequest(claims=_claims(dra_v1beta1_pb2, "x")),
            timeout=WAIT,
        )
        assert resp.claims["x"].devices[0].device_name == "vf-x"


def test_health_check(plugin: tuple[KubeletPluginServer, Handler]) -> None:
    srv, _ = plugin
    with grpc.insecure_channel(f"unix://{srv.dra_socket}") as ch:
        health = grpc_health_v1_pb2_grpc.HealthStub(ch)
        for service in ("", "v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"):
            got = health.Check(grpc_health_v1_pb2.HealthCheckRequest(service=service), timeout=WAIT)
            assert got.status == grpc_health_v1_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as err:
            health.Check(grpc_health_v1_pb2.HealthCheckRequest(service="nope"), timeout=WAIT)
        assert err.value.code() == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize(
    ("pb", "pb_grpc"),
    [
        (dra_health_v1_pb2, dra_health_v1_pb2_grpc),
        (dra_health_v1alpha1_pb2, dra_health_v1alpha1_pb2_grpc),
    ],
    ids=["v1", "v1alpha1"],
)
def test_device_health_stream_in_both_versions(
    plugin: tuple[KubeletPluginServer, Handler], pb: Any, pb_grpc: Any
) -> None:
    """What kubelet v1.37 reads: the complete list on connect and on every change, with
    the health timeout and message set on every device."""
    srv, _ = plugin
    with grpc.insecure_channel(f"unix://{srv.dra_socket}") as ch:
        watch = pb_grpc.DRAResourceHealthStub(ch)
        stream = watch.NodeWatchResources(pb.NodeWatchResourcesRequest(), timeout=WAIT)
        assert list(next(stream).devices) == []
        srv.publish_health(
            [
                DeviceHealth("node-a", "vf-0", Health.UNHEALTHY, 1700000000, "link x is down"),
                DeviceHealth("node-a", "vf-1", Health.HEALTHY, 1700000001, "link y is up"),
                DeviceHealth("node-a", "vf-2", Health.UNKNOWN, 1700000002),
            ]
        )
        update = next(stream)
        got = [
            (
                d.device.pool_name,
                d.device.device_name,
                d.health,
                d.last_updated_time,
                d.health_check_timeout_seconds,
                d.message,
            )
            for d in update.devices
        ]
        assert got == [
            ("node-a", "vf-0", pb.UNHEALTHY, 1700000000, 30, "link x is down"),
            ("node-a", "vf-1", pb.HEALTHY, 1700000001, 30, "link y is up"),
            ("node-a", "vf-2", pb.UNKNOWN, 1700000002, 30, ""),
        ]
        stream.cancel()


def test_device_health_is_resent_within_the_kubelet_timeout(tmp_path: Path) -> None:
    """The kubelet reads a device as Unknown once its timeout passes without a report: an
    unchanged list is sent again every ``health_resend`` seconds; an equal republish does
    not count as a change."""
    srv = KubeletPluginServer(
        DRIVER,
        Handler(),
        registry_dir=tmp_path / "r",
        plugins_dir=tmp_path / "p",
        health_resend=0.2,
    ).start()
    try:
        devices = [DeviceHealth("node-a", "vf-0", Health.HEALTHY, 1, "up")]
        srv.publish_health(devices)
        version = srv.board.version
        srv.publish_health(list(devices))
        assert srv.board.version == version
        with grpc.insecure_channel(f"unix://{srv.dra_socket}") as ch:
            watch = dra_health_v1_pb2_grpc.DRAResourceHealthStub(ch)
            stream = watch.NodeWatchResources(
                dra_health_v1_pb2.NodeWatchResourcesRequest(), timeout=WAIT
            )
            reports = [next(stream) for _ in range(3)]
            assert all([d.device.device_name for d in r.devices] == ["vf-0"] for r in reports)
            stream.cancel()
    finally:
        srv.stop(grace=1.0)


def test_stop_ends_the_health_stream(tmp_path: Path) -> None:
    srv = KubeletPluginServer(
        DRIVER, Handler(), registry_dir=tmp_path / "r", plugins_dir=tmp_path / "p"
    ).start()
    with grpc.insecure_channel(f"unix://{srv.dra_socket}") as ch:
        watch = dra_health_v1_pb2_grpc.DRAResourceHealthStub(ch)
        request = dra_health_v1_pb2.NodeWatchResourcesRequest()
        stream = watch.NodeWatchResources(request, timeout=WAIT)
        next(stream)
        srv.stop(grace=1.0)
        for _ in stream:  # a report sent before the stop may still arrive (a busy machine)
            pass  # ended by the server (EOF), not by an error: no RpcError raised


def test_graceful_stop_finishes_in_flight_and_refuses_new(tmp_path: Path) -> None:
    handler = Handler()
    srv = KubeletPluginServer(
        DRIVER, handler, registry_dir=tmp_path / "r", plugins_dir=tmp_path / "p"
    ).start()
    handler.gate.clear()
    results: dict[str, object] = {}
    with grpc.insecure_channel(f"unix://{srv.dra_socket}") as ch:
        stub = dra_v1_pb2_grpc.DRAPluginStub(ch)

        def slow() -> None:
            results["slow"] = stub.NodePrepareResources(
                dra_v1_pb2.NodePrepareResourcesRequest(claims=_claims(dra_v1_pb2, "slow")),
                timeout=WAIT,
            )

        t = threading.Thread(target=slow)
        t.start()
        assert handler.entered.wait(WAIT)
        stopper = threading.Thread(target=lambda: results.setdefault("drained", srv.stop(WAIT)))
        stopper.start()
        # registration is withdrawn at once; new prepares are refused per claim
        wait_for(lambda: srv.core.draining, timeout=WAIT, interval=0.01, what="draining")
        assert not srv.registration_socket.exists()
        late = stub.NodePrepareResources(
            dra_v1_pb2.NodePrepareResourcesRequest(claims=_claims(dra_v1_pb2, "late")), timeout=WAIT
        )
        assert "shutting down" in late.claims["late"].error
        handler.gate.set()
        t.join(WAIT)
        stopper.join(WAIT)
    assert results["drained"] is True
    assert results["slow"].claims["slow"].error == ""  # type: ignore[attr-defined]
    assert not srv.dra_socket.exists()


def test_stale_socket_removed_but_foreign_file_refused(tmp_path: Path) -> None:
    reg = tmp_path / "registry"
    reg.mkdir()
    stale = reg / f"{DRIVER}-reg.sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(stale))
    s.close()  # a socket file nobody listens on
    srv = KubeletPluginServer(DRIVER, Handler(), registry_dir=reg, plugins_dir=tmp_path / "p")
    srv.start()
    try:
        with grpc.insecure_channel(f"unix://{stale}") as ch:
            info = pluginregistration_v1_pb2_grpc.RegistrationStub(ch).GetInfo(
                pluginregistration_v1_pb2.InfoRequest(), timeout=WAIT
            )
            assert info.name == DRIVER
    finally:
        srv.stop(1.0)

    (tmp_path / "p2" / DRIVER).mkdir(parents=True)
    (tmp_path / "p2" / DRIVER / "dra.sock").write_text("not a socket")
    other = KubeletPluginServer(DRIVER, Handler(), registry_dir=reg, plugins_dir=tmp_path / "p2")
    with pytest.raises(SocketPathError):
        other.start()
    assert (tmp_path / "p2" / DRIVER / "dra.sock").read_text() == "not a socket"


def test_socket_path_too_long_is_a_clear_error(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 90)
    srv = KubeletPluginServer(DRIVER, Handler(), registry_dir=deep, plugins_dir=deep)
    with pytest.raises(SocketPathError, match="sun_path"):
        srv.start()


def test_driver_name_must_be_dns_subdomain() -> None:
    with pytest.raises(ValueError, match="DNS subdomain"):
        KubeletPluginServer("../etc", Handler())


def test_unencodable_result_fails_only_its_claim(
    plugin: tuple[KubeletPluginServer, Handler],
) -> None:
    srv, _ = plugin
    with grpc.insecure_channel(f"unix://{srv.dra_socket}") as ch:
        stub = dra_v1_pb2_grpc.DRAPluginStub(ch)
        resp = stub.NodePrepareResources(
            dra_v1_pb2.NodePrepareResourcesRequest(claims=_claims(dra_v1_pb2, "a", "garbled")),
            timeout=WAIT,
        )
    assert set(resp.claims) == {"a", "garbled"}
    assert resp.claims["a"].error == "" and len(resp.claims["a"].devices) == 1
    assert "invalid result" in resp.claims["garbled"].error
    assert not resp.claims["garbled"].devices
