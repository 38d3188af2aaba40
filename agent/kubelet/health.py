"""Health endpoints on the DRA socket.

* ``grpc.health.v1.Health/Check`` (grpc/grpc-proto grpc/health/v1/health.proto) for probes:
  SERVING while the plugin accepts prepares, NOT_SERVING once it drains.
* ``DRAResourceHealth/NodeWatchResources`` in both versions kubelet v1.37 calls (kubernetes
  v1.37.2 staging/src/k8s.io/kubelet/pkg/apis/dra-health/{v1,v1alpha1}/api.proto; the
  kubelet picks v1 when the registration advertises "v1.DRAResourceHealth", else
  "v1alpha1.DRAResourceHealth", and dials the DRA socket for it): a server stream of the
  driver's *complete* device health list, sent on connect, on every change published to
  the :class:`HealthBoard`, and again every ``resend`` seconds.

Why resend: the kubelet stamps each reported device with the time it received the report
and reads it as Unknown once ``health_check_timeout_seconds`` (we send
:data:`HEALTH_TIMEOUT_SECONDS`) have passed without a new one
(pkg/kubelet/cm/dra/healthinfo.go), so a quiet stream would turn every device Unknown. A
hung agent therefore shows as Unknown within the timeout; a dead one ends the stream and
the kubelet drops the driver's health at once.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from functools import partial
from types import ModuleType
from typing import Any

import grpc

from dmn.agent.kubelet.handler import DeviceHealth
from dmn.agent.protos import (
    dra_health_v1_pb2,
    dra_health_v1_pb2_grpc,
    dra_health_v1alpha1_pb2,
    dra_health_v1alpha1_pb2_grpc,
)
from dmn.agent.protos import grpc_health_v1_pb2 as gh_pb
from dmn.agent.protos import grpc_health_v1_pb2_grpc as gh_grpc

#: The registration's supported-version strings of the health service (types.go
#: DRAResourceHealthService in each version), most recent first.
HEALTH_SERVICES = ("v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth")
#: What we ask the kubelet to wait before it reads a device as Unknown; we resend well
#: within it.
HEALTH_TIMEOUT_SECONDS = 30
RESEND_SECONDS = HEALTH_TIMEOUT_SECONDS / 3


class HealthBoard:
    """Serving state plus the latest device health list, with change notification.

    ``version`` moves only when the list's content (health, message, timestamps) changes,
    so republishing an equal list wakes no stream."""

    def __init__(self, services: Sequence[str], timeout_seconds: int = HEALTH_TIMEOUT_SECONDS):
        self.services = set(services) | {""}
        self.timeout_seconds = timeout_seconds
        self.serving = True
        self.closed = False
        self.devices: tuple[DeviceHealth, ...] = ()
        self.version = 0
        self.cond = threading.Condition()

    def publish(self, devices: Sequence[DeviceHealth]) -> None:
        with self.cond:
            if tuple(devices) == self.devices and self.version:
                return
            self.devices = tuple(devices)
            self.version += 1
            self.cond.notify_all()

    def set_serving(self, serving: bool) -> None:
        with self.cond:
            self.serving = serving
            self.cond.notify_all()

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()


class HealthServicer(gh_grpc.HealthServicer):
    def __init__(self, board: HealthBoard) -> None:
        self.board = board

    def Check(self, request: Any, context: grpc.ServicerContext) -> Any:
        if request.service not in self.board.services:
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service}")
        status = (
            gh_pb.HealthCheckResponse.SERVING
            if self.board.serving
            else gh_pb.HealthCheckResponse.NOT_SERVING
        )
        return gh_pb.HealthCheckResponse(status=status)


def _snapshot(pb: ModuleType, devices: tuple[DeviceHealth, ...], timeout: int) -> Any:
    resp = pb.NodeWatchResourcesResponse()
    for d in devices:
        resp.devices.add(
            device=pb.DeviceIdentifier(pool_name=d.pool_name, device_name=d.device_name),
            health=pb.HealthStatus.Value(d.health.name),
            last_updated_time=d.last_updated,
            health_check_timeout_seconds=timeout,
            message=d.message,
        )
    return resp


class _HealthStream:
    """NodeWatchResources over the board for one generated message module."""

    pb: ModuleType

    def __init__(self, board: HealthBoard, resend: float = RESEND_SECONDS) -> None:
        self.board = board
        self.resend = resend

    def _changed_since(self, seen: int) -> bool:
        return self.board.version != seen or self.board.closed

    def NodeWatchResources(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        seen = -1
        while context.is_active():
            with self.board.cond:
                self.board.cond.wait_for(partial(self._changed_since, seen), self.resend)
                if self.board.closed:
                    return
                seen, devices = self.board.version, self.board.devices
            # on a change and, without one, every ``resend`` seconds (see the module doc)
            yield _snapshot(self.pb, devices, self.board.timeout_seconds)


class ResourceHealthV1Servicer(_HealthStream, dra_health_v1_pb2_grpc.DRAResourceHealthServicer):
    pb = dra_health_v1_pb2


class ResourceHealthV1alpha1Servicer(
    _HealthStream, dra_health_v1alpha1_pb2_grpc.DRAResourceHealthServicer
):
    pb = dra_health_v1alpha1_pb2
