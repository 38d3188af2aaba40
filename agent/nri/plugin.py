"""The NRI plugin adapter: registration, configuration, synchronisation and pod/container
hooks over mux + ttrpc, calling an :class:`~dmn.agent.nri.handler.NriHandler`.

Concurrency: asyncio on one event loop (see :mod:`dmn.agent.nri.transport` for why);
handler calls run in a small thread pool so a slow hook never stalls the socket, and each
is bounded by a per-hook deadline strictly below the runtime's request timeout.

Facts this module follows (containerd/nri):

* pkg/api/plugin.go — default socket ``/var/run/nri/nri.sock``; a pre-connected socket fd
  may be passed in ``NRI_PLUGIN_SOCKET``; names are non-empty ``[a-zA-Z0-9_.+-]``; the
  index is exactly two digits.
* pkg/api/v1alpha1/timeouts.go — registration timeout 5 s, request timeout 2 s (defaults;
  the runtime sends its configured values in ConfigureRequest, in milliseconds).
* pkg/api/event.go — subscription bit for event ``e`` is ``1 << (e - 1)``.
* pkg/adaptation/plugin.go — a zero event mask means "all events"; bits outside the
  runtime's ValidEvents fail configuration; a split Synchronize (``more=true``) must be
  answered with ``more`` echoed and no updates until the last chunk; a hook that times out
  (context deadline) or breaks the protocol closes the plugin and the pod proceeds, any
  other error fails the operation.
* pkg/adaptation/plugin_type.go — runtimes try the dedicated RunPodSandbox / StopPodSandbox
  / RemovePodSandbox / StartContainer RPCs first and fall back to StateChange on
  UNIMPLEMENTED; older runtimes only send StateChange. We serve both.

Events we subscribe to (RUN/STOP/REMOVE_POD_SANDBOX, CREATE_CONTAINER, START_CONTAINER) all
predate the later additions (UPDATE_POD_SANDBOX = 12 onward), so every runtime knows them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from dmn.agent.nri import mux
from dmn.agent.nri.handler import (
    Container,
    ContainerAdjustment,
    HookDeadline,
    HookRefused,
    HookTimeout,
    NriHandler,
    PodSandbox,
    call_with_deadline,
)
from dmn.agent.nri.transport import MuxTransport, TrunkBounds, TtrpcClient, TtrpcServer
from dmn.agent.nri.ttrpc_frame import Code, TtrpcError
from dmn.agent.protos import nri_api_pb2 as api
from dmn.observability.metrics import NRI_CONNECTS, NRI_RECONNECTS

log = logging.getLogger(__name__)

PLUGIN_SERVICE = "nri.pkg.api.v1alpha1.Plugin"
RUNTIME_SERVICE = "nri.pkg.api.v1alpha1.Runtime"
DEFAULT_SOCKET_PATH = "/var/run/nri/nri.sock"
SOCKET_ENV = "NRI_PLUGIN_SOCKET"
DEFAULT_REGISTRATION_TIMEOUT = 5.0
DEFAULT_REQUEST_TIMEOUT = 2.0
SUBSCRIBED_EVENTS = (
    api.RUN_POD_SANDBOX,
    api.STOP_POD_SANDBOX,
    api.REMOVE_POD_SANDBOX,
    api.CREATE_CONTAINER,
    api.START_CONTAINER,
)
_NAME_RE = re.compile(r"[a-zA-Z0-9_.+-]+")
_INDEX_RE = re.compile(r"[0-9]{2}")

T = TypeVar("T")


def check_plugin_name(name: str) -> None:
    if not name or not _NAME_RE.fullmatch(name):
        raise ValueError(f"invalid NRI plugin name {name!r}: must be non-empty [a-zA-Z0-9_.+-]")


def check_plugin_index(index: str) -> None:
    if not _INDEX_RE.fullmatch(index):
        raise ValueError(f"invalid NRI plugin index {index!r}: must be exactly two digits")


def event_mask(events: tuple[int, ...]) -> int:
    mask = 0
    for event in events:
        if not api.UNKNOWN < event < api.LAST:
            raise ValueError(f"unknown NRI event {event}")
        mask |= 1 << (event - 1)
    return mask


@dataclass(frozen=True)
class PluginConfig:
    name: str = "dra-multi-network"
    index: str = "10"
    socket_path: str = DEFAULT_SOCKET_PATH
    # Upper bound of a hook's deadline; the effective deadline is also at most
    # ``deadline_fraction`` of the runtime's request timeout (and of the caller's timeout).
    hook_deadline: float = 1.5
    deadline_fraction: float = 0.75
    backoff_initial: float = 0.1
    backoff_max: float = 5.0
    registration_timeout: float = DEFAULT_REGISTRATION_TIMEOUT
    workers: int = 4
    use_env_socket: bool = True
    # stalled frames, undrained writes, request floods (see dmn.agent.nri.transport)
    trunk: TrunkBounds = field(default_factory=TrunkBounds)

    def __post_init__(self) -> None:
        check_plugin_name(self.name)
        check_plugin_index(self.index)
        if not 0 < self.deadline_fraction < 1:
            raise ValueError("deadline_fraction must be in (0, 1)")


#: How many recent hook names :attr:`PluginStats.events` keeps (it used to grow per hook).
EVENT_HISTORY = 256


@dataclass
class PluginStats:
    """Counters of one plugin's lifetime; every field is bounded (counters and the last
    :data:`EVENT_HISTORY` hook names), however long the agent runs."""

    connects: int = 0
    registrations: int = 0
    configures: int = 0
    synchronizes: int = 0
    sync_chunks: int = 0
    hooks: int = 0
    hook_failures: int = 0
    hook_timeouts: int = 0
    state_changes: int = 0
    disconnects: int = 0
    runtime: str = ""
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    events: deque[str] = field(default_factory=lambda: deque(maxlen=EVENT_HISTORY))


def pod_from_proto(pod: api.PodSandbox) -> PodSandbox:
    netns = None
    for ns in pod.linux.namespaces:
        if ns.type == "network" and ns.path:
            netns = ns.path
    return PodSandbox(
        id=pod.id,
        name=pod.name,
        uid=pod.uid,
        namespace=pod.namespace,
        labels=dict(pod.labels),
        annotations=dict(pod.annotations),
        netns_path=netns,
        ips=tuple(pod.ips),
    )


def container_from_proto(ctr: api.Container) -> Container:
    return Container(
        id=ctr.id,
        pod_sandbox_id=ctr.pod_sandbox_id,
        name=ctr.name,
        state=ctr.state,
        labels=dict(ctr.labels),
        annotations=dict(ctr.annotations),
    )


def adjustment_to_proto(adj: ContainerAdjustment) -> api.ContainerAdjustment:
    out = api.ContainerAdjustment()
    for dev in adj.devices:
        d = out.linux.devices.add(path=dev.path, type=dev.type, major=dev.major, minor=dev.minor)
        if dev.file_mode is not None:
            d.file_mode.value = dev.file_mode
        if dev.uid is not None:
            d.uid.value = dev.uid
        if dev.gid is not None:
            d.gid.value = dev.gid
    return out


class NriPlugin:
    """Keeps the node agent registered with the runtime's NRI for as long as it runs."""

    def __init__(self, handler: NriHandler, config: PluginConfig | None = None) -> None:
        self.handler = handler
        self.config = config or PluginConfig()
        self.stats = PluginStats()
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=self.config.workers, thread_name_prefix="nri-hook"
        )
        self._stop = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._transport: MuxTransport | None = None
        self._synced = asyncio.Event()
        self._sync_pods: list[api.PodSandbox] = []
        self._sync_containers: list[api.Container] = []
        self._env_fd_used = False
        self.on_ready: Callable[[], None] | None = None
        self.on_disconnect: Callable[[], None] | None = None

    # -- lifecycle ---------------------------------------------------------------------

    async def run(self) -> None:
        """Connect, register, serve; on any disconnect back off and start over until stop()."""
        self._loop = asyncio.get_running_loop()
        attempt = 0
        try:
            while not self._stop.is_set():
                synced = False
                try:
                    synced = await self._session()
                except (TimeoutError, OSError, TtrpcError) as exc:
                    log.info("nri session ended error=%s", exc)
                except Exception:  # a bug or a peer we did not foresee: never stop retrying
                    log.exception("nri session failed unexpectedly; reconnecting")
                if self._stop.is_set():
                    break
                attempt = 0 if synced else attempt + 1
                delay = min(self.config.backoff_max, self.config.backoff_initial * (2**attempt))
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), delay)
        finally:
            self._executor.shutdown(wait=False, cancel_futures=True)

    def stop(self) -> None:
        """Thread-safe: end the current session and the reconnect loop."""
        loop = self._loop
        if loop is None:
            self._stop.set()
            return

        def _do() -> None:
            self._stop.set()
            if self._transport is not None:
                self._transport.close()

        if loop.is_running():
            loop.call_soon_threadsafe(_do)
        else:
            _do()

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        fd = os.environ.get(SOCKET_ENV) if self.config.use_env_socket else None
        if fd and not self._env_fd_used:
            # A runtime-launched plugin gets one pre-connected socket; after it is lost we
            # fall back to the well-known socket path.
            self._env_fd_used = True
            try:
                sock = socket.socket(fileno=int(fd))
            except ValueError as exc:
                raise OSError(f"invalid {SOCKET_ENV}={fd!r}") from exc
            return await asyncio.open_unix_connection(sock=sock)
        return await asyncio.open_unix_connection(self.config.socket_path)

    async def _session(self) -> bool:
        """One connection's lifetime; returns True if it got as far as synchronised."""
        reader, writer = await self._connect()
        self.stats.connects += 1
        NRI_CONNECTS.inc()
        if self.stats.connects > 1:
            NRI_RECONNECTS.inc()
        transport = MuxTransport(reader, writer, self.config.trunk)
        self._transport = transport
        self._synced.clear()
        self._sync_pods, self._sync_containers = [], []
        server = TtrpcServer(transport, mux.PLUGIN_SERVICE_CONN, {PLUGIN_SERVICE: self._methods()})
        client = TtrpcClient(transport, mux.RUNTIME_SERVICE_CONN)
        reader_task = asyncio.create_task(transport.run())
        synced = False
        try:
            req = api.RegisterPluginRequest(
                plugin_name=self.config.name, plugin_idx=self.config.index
            )
            await client.call(
                RUNTIME_SERVICE,
                "RegisterPlugin",
                req.SerializeToString(),
                timeout=self.config.registration_timeout,
            )
            self.stats.registrations += 1
            log.info("nri registered plugin=%s-%s", self.config.index, self.config.name)
            # The runtime configures and synchronises right after registration.
            budget = self.config.registration_timeout + 2 * DEFAULT_REQUEST_TIMEOUT
            closed = asyncio.ensure_future(transport.closed.wait())
            synced_wait = asyncio.ensure_future(self._synced.wait())
            _done, pending = await asyncio.wait(
                {closed, synced_wait}, timeout=budget, return_when=asyncio.FIRST_COMPLETED
            )
            for fut in pending:
                fut.cancel()
            synced = self._synced.is_set()
            if not synced and not transport.closed.is_set():
                raise TtrpcError(Code.DEADLINE_EXCEEDED, "runtime did not configure/synchronize")
            await transport.closed.wait()
        finally:
            transport.close()
            server.cancel()
            reader_task.cancel()
            with contextlib.suppress(BaseException):
                await reader_task
            self._transport = None
            self._synced.clear()
            self.stats.disconnects += 1
            if self.on_disconnect is not None:
                self.on_disconnect()
        return synced

    # -- ttrpc methods ------------------------------------------------------------------

    def _methods(self) -> dict[str, Any]:
        return {
            "Configure": self._configure,
            "Synchronize": self._synchronize,
            "Shutdown": self._shutdown,
            "RunPodSandbox": self._run_pod,
            "StopPodSandbox": self._stop_pod,
            "RemovePodSandbox": self._remove_pod,
            "CreateContainer": self._create_container,
            "StartContainer": self._start_container,
            "StateChange": self._state_change,
        }

    async def _configure(self, payload: bytes, timeout_nano: int) -> bytes:
        req = api.ConfigureRequest.FromString(payload)
        self.stats.configures += 1
        self.stats.runtime = f"{req.runtime_name}/{req.runtime_version}"
        if req.request_timeout > 0:
            self.stats.request_timeout = req.request_timeout / 1000.0
        log.info(
            "nri configured runtime=%s request_timeout_ms=%d registration_timeout_ms=%d",
            self.stats.runtime,
            req.request_timeout,
            req.registration_timeout,
        )
        return api.ConfigureResponse(events=event_mask(SUBSCRIBED_EVENTS)).SerializeToString()

    async def _synchronize(self, payload: bytes, timeout_nano: int) -> bytes:
        req = api.SynchronizeRequest.FromString(payload)
        self.stats.sync_chunks += 1
        self._sync_pods.extend(req.pods)
        self._sync_containers.extend(req.containers)
        if req.more:
            # Split synchronisation: echo `more`, request no updates until the last chunk.
            return api.SynchronizeResponse(more=True).SerializeToString()
        pods = [pod_from_proto(p) for p in self._sync_pods]
        ctrs = [container_from_proto(c) for c in self._sync_containers]
        self._sync_pods, self._sync_containers = [], []
        await self._hook("Synchronize", "", "", timeout_nano, self.handler.synchronize, pods, ctrs)
        self.stats.synchronizes += 1
        self._synced.set()
        if self.on_ready is not None:
            self.on_ready()
        return api.SynchronizeResponse(more=False).SerializeToString()

    async def _shutdown(self, payload: bytes, timeout_nano: int) -> bytes:
        await self._hook("Shutdown", "", "", timeout_nano, self.handler.shutdown)
        return api.Empty().SerializeToString()

    async def _run_pod(self, payload: bytes, timeout_nano: int) -> bytes:
        pod = pod_from_proto(api.RunPodSandboxRequest.FromString(payload).pod)
        await self._hook(
            "RunPodSandbox", pod.uid, "", timeout_nano, self.handler.run_pod_sandbox, pod
        )
        return api.RunPodSandboxResponse().SerializeToString()

    async def _stop_pod(self, payload: bytes, timeout_nano: int) -> bytes:
        pod = pod_from_proto(api.StopPodSandboxRequest.FromString(payload).pod)
        await self._hook(
            "StopPodSandbox", pod.uid, "", timeout_nano, self.handler.stop_pod_sandbox, pod
        )
        return api.StopPodSandboxResponse().SerializeToString()

    async def _remove_pod(self, payload: bytes, timeout_nano: int) -> bytes:
        pod = pod_from_proto(api.RemovePodSandboxRequest.FromString(payload).pod)
        await self._hook(
            "RemovePodSandbox", pod.uid, "", timeout_nano, self.handler.remove_pod_sandbox, pod
        )
        return api.RemovePodSandboxResponse().SerializeToString()

    async def _create_container(self, payload: bytes, timeout_nano: int) -> bytes:
        req = api.CreateContainerRequest.FromString(payload)
        pod, ctr = pod_from_proto(req.pod), container_from_proto(req.container)
        adj = await self._hook(
            "CreateContainer",
            pod.uid,
            ctr.id,
            timeout_nano,
            self.handler.create_container,
            pod,
            ctr,
        )
        if not isinstance(adj, ContainerAdjustment):
            raise TtrpcError(Code.INTERNAL, "create_container returned no ContainerAdjustment")
        return api.CreateContainerResponse(adjust=adjustment_to_proto(adj)).SerializeToString()

    async def _start_container(self, payload: bytes, timeout_nano: int) -> bytes:
        req = api.StartContainerRequest.FromString(payload)
        pod, ctr = pod_from_proto(req.pod), container_from_proto(req.container)
        await self._hook(
            "StartContainer", pod.uid, ctr.id, timeout_nano, self.handler.start_container, pod, ctr
        )
        return api.StartContainerResponse().SerializeToString()

    async def _state_change(self, payload: bytes, timeout_nano: int) -> bytes:
        evt = api.StateChangeEvent.FromString(payload)
        self.stats.state_changes += 1
        pod = pod_from_proto(evt.pod)
        if evt.event == api.RUN_POD_SANDBOX:
            await self._hook(
                "RunPodSandbox", pod.uid, "", timeout_nano, self.handler.run_pod_sandbox, pod
            )
        elif evt.event == api.STOP_POD_SANDBOX:
            await self._hook(
                "StopPodSandbox", pod.uid, "", timeout_nano, self.handler.stop_pod_sandbox, pod
            )
        elif evt.event == api.REMOVE_POD_SANDBOX:
            await self._hook(
                "RemovePodSandbox", pod.uid, "", timeout_nano, self.handler.remove_pod_sandbox, pod
            )
        elif evt.event == api.START_CONTAINER:
            ctr = container_from_proto(evt.container)
            await self._hook(
                "StartContainer",
                pod.uid,
                ctr.id,
                timeout_nano,
                self.handler.start_container,
                pod,
                ctr,
            )
        else:
            log.debug("nri ignores state change event=%d", evt.event)
        return api.Empty().SerializeToString()

    # -- hook execution -----------------------------------------------------------------

    def hook_deadline(self, timeout_nano: int = 0) -> float:
        """Seconds a hook may take: below the runtime's timeout, never above the cap."""
        budget = self.stats.request_timeout
        if timeout_nano > 0:
            budget = min(budget, timeout_nano / 1e9)
        return max(0.01, min(self.config.hook_deadline, budget * self.config.deadline_fraction))

    async def _hook(
        self,
        event: str,
        pod_uid: str,
        container_id: str,
        timeout_nano: int,
        fn: Callable[..., T],
        *args: Any,
    ) -> T:
        loop = asyncio.get_running_loop()
        deadline = self.hook_deadline(timeout_nano)
        self.stats.hooks += 1
        self.stats.events.append(event)
        # the handler sees its deadline (current_deadline) and checks it before mutating
        expiry = HookDeadline.after(deadline)
        started = time.monotonic()
        fut = loop.run_in_executor(self._executor, call_with_deadline, expiry, fn, *args)
        try:
            got = await asyncio.wait_for(asyncio.shield(fut), deadline)
            # the runtime runs NRI requests one at a time: this is what every later Pod's
            # request waits for (the Pod-startup benchmark reads it from the log)
            log.info(
                "nri hook answered event=%s pod_uid=%s duration_ms=%.1f",
                event,
                pod_uid,
                (time.monotonic() - started) * 1000,
            )
            return got
        except TimeoutError:
            expiry.expire()  # before the runtime hears of it: a late finisher must undo
            self.stats.hook_timeouts += 1
            report = HookTimeout(event, pod_uid, container_id, deadline)
            log.error(
                "nri hook exceeded deadline event=%s pod_uid=%s container=%s deadline_s=%.3f",
                event,
                pod_uid,
                container_id,
                deadline,
            )
            fut.add_done_callback(lambda f: _log_late(event, pod_uid, f))
            loop.run_in_executor(self._executor, self.handler.hook_timed_out, report)
            raise TtrpcError(
                Code.DEADLINE_EXCEEDED, f"{event} exceeded its {deadline:.3f}s deadline"
            ) from None
        except HookRefused as exc:
            self.stats.hook_failures += 1
            raise TtrpcError(Code.FAILED_PRECONDITION, f"{event}: {exc}") from None
        except TtrpcError:
            raise
        except Exception as exc:
            self.stats.hook_failures += 1
            log.exception("nri hook failed event=%s pod_uid=%s", event, pod_uid)
            raise TtrpcError(Code.UNKNOWN, f"{event} failed: {exc}") from None


def _log_late(event: str, pod_uid: str, fut: asyncio.Future[Any]) -> None:
    err = None if fut.cancelled() else fut.exception()
    log.warning("nri late hook finished event=%s pod_uid=%s error=%s", event, pod_uid, err)


class PluginThread:
    """Runs an :class:`NriPlugin` on its own event loop in a daemon thread.

    For callers that are not asyncio themselves (the node agent's main, tests, the lab).
    """

    def __init__(self, plugin: NriPlugin) -> None:
        self.plugin = plugin
        self.ready = threading.Event()
        self.sessions_synced = 0
        plugin.on_ready = self._ready
        plugin.on_disconnect = self.ready.clear
        self._thread = threading.Thread(target=self._main, name="nri-plugin", daemon=True)

    def _ready(self) -> None:
        self.sessions_synced += 1
        self.ready.set()

    def _main(self) -> None:
        asyncio.run(self.plugin.run())

    def start(self) -> PluginThread:
        self._thread.start()
        return self

    def wait_ready(self, timeout: float) -> bool:
        return self.ready.wait(timeout)

    def stop(self, timeout: float = 5.0) -> None:
        self.plugin.stop()
        self._thread.join(timeout)
