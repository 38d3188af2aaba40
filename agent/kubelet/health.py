"""Health endpoints on the DRA socket.

* ``grpc.health.v1.Health/Check`` (grpc/grpc-proto grpc/health/v1/health.proto) for probes:
  SERVING while the plugin accepts prepares, NOT_SERVING once it drains.
* ``v1alpha1.DRAResourceHealth/NodeWatchResources`` (kubernetes staging/src/k8s.io/kubelet/
  pkg/apis/dra-health/v1alpha1/api.proto): a server stream of the driver's full device
  health list, sent on connect and on every :meth:`HealthBoard.publish`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from functools import partial
from typing import Any

import grpc

from dmn.agent.kubelet.handler import DeviceHealth
from dmn.agent.protos import dra_health_v1alpha1_pb2 as dh_pb
from dmn.agent.protos import dra_health_v1alpha1_pb2_grpc as dh_grpc
from dmn.agent.protos import grpc_health_v1_pb2 as gh_pb
from dmn.agent.protos import grpc_health_v1_pb2_grpc as gh_grpc


class HealthBoard:
    """Serving state plus the latest device health list, with change notification."""

    def __init__(self, services: Sequence[str]) -> None:
        self.services = set(services) | {""}
        self.serving = True
        self.closed = False
        self.devices: tuple[DeviceHealth, ...] = ()
        self.version = 0
        self.cond = threading.Condition()

    def publish(self, devices: Sequence[DeviceHealth]) -> None:
        with self.cond:
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


def _snapshot(devices: tuple[DeviceHealth, ...]) -> Any:
    resp = dh_pb.NodeWatchResourcesResponse()
    for d in devices:
        health = (
            dh_pb.UNKNOWN
            if d.healthy is None
            else (dh_pb.HEALTHY if d.healthy else dh_pb.UNHEALTHY)
        )
        resp.devices.add(
            device=dh_pb.DeviceIdentifier(pool_name=d.pool_name, device_name=d.device_name),
            health=health,
            last_updated_time=d.last_updated,
        )
    return resp


class ResourceHealthServicer(dh_grpc.DRAResourceHealthServicer):
    def __init__(self, board: HealthBoard, poll: float = 1.0) -> None:
        self.board = board
        self.poll = poll

    def _changed_since(self, seen: int) -> bool:
        return self.board.version != seen or self.board.closed

    def NodeWatchResources(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        seen = -1
        while context.is_active():
            with self.board.cond:
                self.board.cond.wait_for(partial(self._changed_since, seen), self.poll)
                if self.board.closed:
                    return
                if self.board.version == seen:
                    continue
                seen, devices = self.board.version, self.board.devices
            yield _snapshot(devices)
