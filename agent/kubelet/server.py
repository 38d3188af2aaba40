"""The kubelet-facing plugin: registration socket plus DRA socket, started and stopped in
the order the kubelet needs.

Sockets (kubelet conventions; roots configurable for the lab and tests):
``<registry_dir>/<driver>-reg.sock`` (registry_dir default /var/lib/kubelet/plugins_registry)
and ``<plugins_dir>/<driver>/dra.sock`` (plugins_dir default /var/lib/kubelet/plugins).

Start: remove a stale *socket* at either path (anything else there is not ours and is an
error), serve DRA first, then registration — the kubelet may call the DRA service as soon
as GetInfo returns. Stop: withdraw the registration socket first so the kubelet
deregisters, refuse new prepares, wait for in-flight calls, then stop the DRA server.

Both servers are ``grpc.aio`` servers on one event loop in a thread of their own, with the
bounds of :mod:`dmn.agent.kubelet.bounds`: a call holds no thread until its request has
fully arrived (synchronous handlers then run in a bounded pool), so slow, idle,
half-sending or never-reading clients cannot take the threads the kubelet's calls need.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import re
import stat
import threading
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

import grpc

from dmn.agent.kubelet.bounds import DRA_BOUNDS, REGISTRATION_BOUNDS, ServerBounds
from dmn.agent.kubelet.dra_service import DraCore, DraV1beta1Servicer, DraV1Servicer
from dmn.agent.kubelet.handler import DeviceHealth, DraHandler
from dmn.agent.kubelet.health import (
    HEALTH_SERVICES,
    RESEND_SECONDS,
    HealthBoard,
    HealthServicer,
    ResourceHealthV1alpha1Servicer,
    ResourceHealthV1Servicer,
)
from dmn.agent.kubelet.registration import RegistrationServicer
from dmn.agent.protos import (
    dra_health_v1_pb2_grpc,
    dra_health_v1alpha1_pb2_grpc,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2_grpc,
    grpc_health_v1_pb2_grpc,
    pluginregistration_v1_pb2_grpc,
)

log = logging.getLogger(__name__)

DEFAULT_REGISTRY_DIR = "/var/lib/kubelet/plugins_registry"
DEFAULT_PLUGINS_DIR = "/var/lib/kubelet/plugins"
MAX_SOCKET_PATH = 107  # sockaddr_un.sun_path is 108 bytes including the terminating NUL
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


T = TypeVar("T")


class SocketPathError(RuntimeError):
    """A socket path is occupied by something that is not a (stale) socket."""


def remove_stale_socket(path: Path) -> bool:
    """Unlink a leftover unix socket at ``path``; refuse to touch anything else."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return False
    if not stat.S_ISSOCK(st.st_mode):
        raise SocketPathError(f"{path} exists and is not a socket; refusing to remove it")
    path.unlink()
    log.info("removed stale socket path=%s", path)
    return True


class ServingLoop:
    """An asyncio event loop running in a daemon thread of its own; synchronous callers
    hand it coroutines with :meth:`call`."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> ServingLoop:
        self._thread.start()
        return self

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            for task in asyncio.all_tasks(self.loop):
                task.cancel()
            self.loop.run_until_complete(asyncio.sleep(0))
            self.loop.close()

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()


def _bounded_server(
    bounds: ServerBounds, pool: concurrent.futures.ThreadPoolExecutor
) -> grpc.aio.Server:
    return grpc.aio.server(
        migration_thread_pool=pool,
        options=bounds.grpc_options(),
        maximum_concurrent_rpcs=bounds.maximum_concurrent_rpcs,
    )


class KubeletPluginServer:
    def __init__(
        self,
        driver_name: str,
        handler: DraHandler,
        *,
        registry_dir: str | os.PathLike[str] = DEFAULT_REGISTRY_DIR,
        plugins_dir: str | os.PathLike[str] = DEFAULT_PLUGINS_DIR,
        bounds: ServerBounds = DRA_BOUNDS,
        registration_bounds: ServerBounds = REGISTRATION_BOUNDS,
        on_registration: Callable[[bool, str], None] | None = None,
        health_resend: float = RESEND_SECONDS,
    ) -> None:
        if len(driver_name) > 253 or not _DNS_SUBDOMAIN.fullmatch(driver_name):
            raise ValueError(f"driver name {driver_name!r} is not a DNS subdomain")
        self.driver_name = driver_name
        self.registration_socket = Path(registry_dir) / f"{driver_name}-reg.sock"
        self.dra_socket = Path(plugins_dir) / driver_name / "dra.sock"
        self.core = DraCore(handler)
        self.board = HealthBoard(
            [
                "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin",
                "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin",
                *HEALTH_SERVICES,
            ]
        )
        self.registration = RegistrationServicer(
            driver_name, str(self.dra_socket), on_status=on_registration
        )
        self.bounds = bounds
        self.registration_bounds = registration_bounds
        self._health_resend = health_resend
        self._serving: ServingLoop | None = None
        self._pools: list[concurrent.futures.ThreadPoolExecutor] = []
        self._dra_server: grpc.aio.Server | None = None
        self._reg_server: grpc.aio.Server | None = None

    def _bind(self, server: grpc.aio.Server, path: Path) -> None:
        if len(os.fsencode(path)) > MAX_SOCKET_PATH:
            raise SocketPathError(f"{path} is longer than {MAX_SOCKET_PATH} bytes (sun_path)")
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o750)
        remove_stale_socket(path)
        server.add_insecure_port(f"unix://{path}")

    def _pool(self, bounds: ServerBounds, prefix: str) -> concurrent.futures.ThreadPoolExecutor:
        pool = concurrent.futures.ThreadPoolExecutor(
            bounds.handler_workers, thread_name_prefix=prefix
        )
        self._pools.append(pool)
        return pool

    async def _start_dra(self) -> grpc.aio.Server:
        dra = _bounded_server(self.bounds, self._pool(self.bounds, "dra-grpc"))
        resend, streams = self._health_resend, self.bounds.max_watch_streams
        dra_v1_pb2_grpc.add_DRAPluginServicer_to_server(DraV1Servicer(self.core), dra)  # type: ignore[no-untyped-call]
        dra_v1beta1_pb2_grpc.add_DRAPluginServicer_to_server(DraV1beta1Servicer(self.core), dra)  # type: ignore[no-untyped-call]
        grpc_health_v1_pb2_grpc.add_HealthServicer_to_server(HealthServicer(self.board), dra)  # type: ignore[no-untyped-call]
        dra_health_v1_pb2_grpc.add_DRAResourceHealthServicer_to_server(  # type: ignore[no-untyped-call]
            ResourceHealthV1Servicer(self.board, resend, streams), dra
        )
        dra_health_v1alpha1_pb2_grpc.add_DRAResourceHealthServicer_to_server(  # type: ignore[no-untyped-call]
            ResourceHealthV1alpha1Servicer(self.board, resend, streams), dra
        )
        self._bind(dra, self.dra_socket)
        await dra.start()
        return dra

    async def _start_registration(self) -> grpc.aio.Server:
        bounds = self.registration_bounds
        reg = _bounded_server(bounds, self._pool(bounds, "dra-reg"))
        pluginregistration_v1_pb2_grpc.add_RegistrationServicer_to_server(self.registration, reg)  # type: ignore[no-untyped-call]
        self._bind(reg, self.registration_socket)
        await reg.start()
        return reg

    def start(self) -> KubeletPluginServer:
        serving = self._serving = ServingLoop("dra-grpc-loop").start()
        try:
            self._dra_server = serving.call(self._start_dra())
            self._reg_server = serving.call(self._start_registration())
        except BaseException:
            self._shut_down(0)
            raise
        log.info(
            "kubelet plugin serving driver=%s registration=%s dra=%s",
            self.driver_name,
            self.registration_socket,
            self.dra_socket,
        )
        return self

    def publish_health(self, devices: Sequence[DeviceHealth]) -> None:
        """Replace the device health list every NodeWatchResources stream sends (the
        complete list of the driver's devices, as the kubelet expects)."""
        self.board.publish(devices)

    def stop(self, grace: float = 10.0) -> bool:
        """Graceful stop; returns True if every in-flight call finished within ``grace``."""
        if self._serving is None:
            return True
        if self._reg_server is not None:
            self._serving.call(self._reg_server.stop(0))
            self._reg_server = None
        self._unlink(self.registration_socket)  # the kubelet deregisters on removal
        self.board.set_serving(False)
        drained = self.core.drain(grace)
        if not drained:
            log.warning("kubelet plugin stop: calls still in flight=%d", self.core.in_flight)
        self.board.close()
        self._shut_down(1.0)
        return drained

    def _shut_down(self, grace: float) -> None:
        """Stop whatever server runs, the loop and the handler pools; unlink our sockets."""
        serving, self._serving = self._serving, None
        if serving is not None:
            for server in (self._reg_server, self._dra_server):
                if server is not None:
                    serving.call(server.stop(grace))
            self._reg_server = self._dra_server = None
            serving.close()
        for pool in self._pools:
            pool.shutdown(wait=False, cancel_futures=True)
        self._pools.clear()
        self._unlink(self.registration_socket)
        self._unlink(self.dra_socket)

    @staticmethod
    def _unlink(path: Path) -> None:
        try:
            remove_stale_socket(path)
        except SocketPathError:
            log.warning("socket path replaced by non-socket path=%s", path)
