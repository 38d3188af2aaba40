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

The handlers are coroutines served by the ``grpc.aio`` server (see
:mod:`dmn.agent.kubelet.bounds`): a stream waits on the board without holding a thread,
and at most ``max_streams`` streams are open at once (more are refused with
RESOURCE_EXHAUSTED), so idle or never-reading watchers cannot starve other calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Sequence
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
    so republishing an equal list wakes no stream. Streams wait on an asyncio event of
    their own (:meth:`subscribe`), set from whichever thread changes the board."""

    def __init__(self, services: Sequence[str], timeout_seconds: int = HEALTH_TIMEOUT_SECONDS):
        self.services = set(services) | {""}
        self.timeout_seconds = timeout_seconds
        self.serving = True
        self.closed = False
        self.devices: tuple[DeviceHealth, ...] = ()
        self.version = 0
        self.cond = threading.Condition()
        self._waiters: dict[asyncio.Event, asyncio.AbstractEventLoop] = {}
        #: open health streams of every version (changed only on the serving loop)
        self.streams = 0

    def subscribe(self) -> asyncio.Event:
        """An event set on every change; call from the event loop that awaits it."""
        event = asyncio.Event()
        with self.cond:
            self._waiters[event] = asyncio.get_running_loop()
        return event

    def unsubscribe(self, event: asyncio.Event) -> None:
        with self.cond:
            self._waiters.pop(event, None)

    def _notify(self) -> None:
        self.cond.notify_all()
        for event, loop in self._waiters.items():
            with contextlib.suppress(RuntimeError):  # that loop is already closed
                loop.call_soon_threadsafe(event.set)

    def snapshot(self) -> tuple[bool, int, tuple[DeviceHealth, ...]]:
        """(closed, version, devices), read together."""
        with self.cond:
            return self.closed, self.version, self.devices

    def publish(self, devices: Sequence[DeviceHealth]) -> None:
        with self.cond:
            if tuple(devices) == self.devices and self.version:
                return
            self.devices = tuple(devices)
            self.version += 1
            self._notify()

    def set_serving(self, serving: bool) -> None:
        with self.cond:
            self.serving = serving
            self._notify()

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self._notify()


class HealthServicer(gh_grpc.HealthServicer):
    def __init__(self, board: HealthBoard) -> None:
        self.board = board

    async def Check(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        if request.service not in self.board.services:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"unknown service {request.service}")
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

    def __init__(
        self, board: HealthBoard, resend: float = RESEND_SECONDS, max_streams: int = 16
    ) -> None:
        self.board = board
        self.resend = resend
        self.max_streams = max_streams

    async def NodeWatchResources(
        self, request: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Any]:
        if self.board.streams >= self.max_streams:
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"at most {self.max_streams} health streams may be open at once",
            )
        self.board.streams += 1
        changed = self.board.subscribe()
        try:
            seen = -1
            while True:
                changed.clear()
                closed, version, devices = self.board.snapshot()
                if not closed and version == seen:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(changed.wait(), self.resend)
                    closed, version, devices = self.board.snapshot()
                if closed:
                    return
                seen = version
                # on a change and, without one, every ``resend`` seconds (see the module doc)
                yield _snapshot(self.pb, devices, self.board.timeout_seconds)
        finally:
            self.board.unsubscribe(changed)
            self.board.streams -= 1


class ResourceHealthV1Servicer(_HealthStream, dra_health_v1_pb2_grpc.DRAResourceHealthServicer):
    pb = dra_health_v1_pb2


class ResourceHealthV1alpha1Servicer(
    _HealthStream, dra_health_v1alpha1_pb2_grpc.DRAResourceHealthServicer
):
    pb = dra_health_v1alpha1_pb2
