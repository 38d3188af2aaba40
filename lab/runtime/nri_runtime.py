"""A threaded NRI runtime for the lab and tests, behaving like containerd's NRI adaptation.

Behaviour copied from facts (containerd/nri pkg/adaptation/plugin.go, plugin_type.go,
pkg/api/plugin.go, pkg/api/event.go; containerd internal/nri/config.go):

* listen on a unix socket; each accepted connection must call Runtime.RegisterPlugin
  within the registration timeout (default 5 s) with a valid name and two-digit index;
* Configure (request timeout, default 2 s): a zero event mask means all events, bits
  outside the valid events fail configuration;
* Synchronize with every known pod and container, optionally split into chunks: each
  non-final chunk (``more=true``) must be answered with ``more`` echoed and no updates;
* lifecycle hooks run one at a time runtime-wide, in plugin index order, each under the
  request timeout; a timeout or a broken connection drops the plugin and the operation
  proceeds, an error status fails the operation;
* pod events and StartContainer go through the dedicated RPCs and fall back to
  StateChange when the plugin answers UNIMPLEMENTED; ``state_change_only`` emulates a
  runtime that predates the dedicated RPCs;
* with ``required_plugins`` (containerd's NRI default validator, see
  :mod:`.required_plugins`), CreateContainer fails after the plugins' hooks when a plugin
  the node or the Pod's annotation requires is not registered;
* a restart forgets what plugins were told (containerd internal/nri/nri.go keeps each
  sandbox's NRI state in memory, set at RunPodSandbox; Synchronize after a restart sets
  the state of containers only): sandboxes given to :meth:`LabNriRuntime.restore` (from before a
  restart) are listed at Synchronize, but their StopPodSandbox and RemovePodSandbox reach
  no plugin (seen on containerd 2.3.7 in the upstream lab).

Threads and blocking sockets on purpose: the agent's plugin side is asyncio, so the two
sides share neither framing code nor a concurrency model.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
import threading
from dataclasses import dataclass, field

from dmn.agent.protos import nri_api_pb2 as api
from dmn.lab.runtime import wire
from dmn.lab.runtime.required_plugins import RequiredPluginCheck, present_names

log = logging.getLogger(__name__)

PLUGIN_SVC = "nri.pkg.api.v1alpha1.Plugin"
RUNTIME_SVC = "nri.pkg.api.v1alpha1.Runtime"
VALID_EVENTS = (1 << (api.LAST - 1)) - 1
UNIMPLEMENTED = 12


class HookFailed(Exception):
    """A plugin answered a lifecycle hook with an error status: the operation fails."""


class CallTimeout(Exception):
    pass


class CallError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"code {code}: {message}")
        self.code = code
        self.message = message


class ConnectionLost(Exception):
    pass


@dataclass
class LabPod:
    id: str
    uid: str
    name: str
    namespace: str
    netns_path: str = ""
    annotations: dict[str, str] = field(default_factory=dict)

    def to_proto(self, with_netns: bool = True) -> api.PodSandbox:
        pod = api.PodSandbox(id=self.id, uid=self.uid, name=self.name, namespace=self.namespace)
        pod.annotations.update(self.annotations)
        if with_netns and self.netns_path:
            pod.linux.namespaces.add(type="network", path=self.netns_path)
        pod.linux.namespaces.add(type="ipc", path="")
        return pod


@dataclass
class LabContainer:
    id: str
    pod_id: str
    name: str
    state: int = api.CONTAINER_UNKNOWN
    devices: list[api.LinuxDevice] = field(default_factory=list)

    def to_proto(self) -> api.Container:
        ctr = api.Container(id=self.id, pod_sandbox_id=self.pod_id, name=self.name)
        ctr.state = self.state  # type: ignore[assignment]
        return ctr


@dataclass(frozen=True)
class RuntimeEvent:
    # registered | configured | synchronized | dropped | hook-error | fallback | unannounced
    # | validator (the default validator refused a container)
    kind: str
    plugin: str
    detail: str = ""


class PluginLink:
    """One connected plugin: a reader thread demultiplexes, calls block on a condition."""

    def __init__(self, sock: socket.socket, runtime: LabNriRuntime) -> None:
        self.sock = sock
        self.runtime = runtime
        self.name = ""
        self.idx = ""
        self.events = 0
        self.state_change = runtime.state_change_only
        self.closed = False
        self.registered = threading.Event()
        self.registration_error = ""
        self._trunk = wire.TrunkReader()
        self._send_lock = threading.Lock()
        self._cond = threading.Condition()
        self._replies: dict[int, bytes] = {}
        self._next_stream = 1
        self._reader = threading.Thread(target=self._read_loop, name="lab-nri-link", daemon=True)
        self._reader.start()

    @property
    def full_name(self) -> str:
        return f"{self.idx}-{self.name}"

    def subscribed(self, event: int) -> bool:
        return bool(self.events & (1 << (event - 1)))

    def _send(self, conn: int, message: bytes) -> None:
        with self._send_lock:
            self.sock.sendall(wire.trunk_frames(conn, message))

    def _read_loop(self) -> None:
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    break
                for conn in set(self._trunk.push(data)):
                    for stream, kind, _flags, body in self._trunk.messages(conn):
                        if conn == wire.CONN_RUNTIME and kind == wire.KIND_REQUEST:
                            self._serve_runtime(stream, body)
                        elif conn == wire.CONN_PLUGIN and kind == wire.KIND_RESPONSE:
                            with self._cond:
                                self._replies[stream] = body
                                self._cond.notify_all()
        except Exception as exc:  # I/O, or a plugin's malformed bytes: drop this link only
            log.debug("lab nri link read ended error=%s", exc)
        finally:
            self.close()

    def _serve_runtime(self, stream: int, body: bytes) -> None:
        req = wire.parse_request(body)
        if req.service == RUNTIME_SVC and req.method == "RegisterPlugin":
            reg = api.RegisterPluginRequest.FromString(req.payload)
            error = _check_identity(reg.plugin_name, reg.plugin_idx)
            if error:
                self.registration_error = error
                reply = wire.response_body(code=3, message=error)
            else:
                self.name, self.idx = reg.plugin_name, reg.plugin_idx
                reply = wire.response_body(api.Empty().SerializeToString())
            self._send(wire.CONN_RUNTIME, wire.ttrpc_message(stream, wire.KIND_RESPONSE, reply))
            self.registered.set()
        else:
            reply = wire.response_body(code=UNIMPLEMENTED, message=f"method {req.method}")
            self._send(wire.CONN_RUNTIME, wire.ttrpc_message(stream, wire.KIND_RESPONSE, reply))

    def call(self, method: str, payload: bytes, timeout: float) -> bytes:
        """Unary call on the Plugin service; raises CallTimeout, CallError, ConnectionLost."""
        with self._cond:
            stream = self._next_stream
            self._next_stream += 2
        body = wire.request_body(PLUGIN_SVC, method, payload, int(timeout * 1e9))
        try:
            self._send(wire.CONN_PLUGIN, wire.ttrpc_message(stream, wire.KIND_REQUEST, body))
        except OSError as exc:
            raise ConnectionLost(str(exc)) from exc
        with self._cond:
            ok = self._cond.wait_for(lambda: stream in self._replies or self.closed, timeout)
            reply = self._replies.pop(stream, None)
        if reply is None:
            if self.closed:
                raise ConnectionLost(f"{self.full_name} closed during {method}")
            assert not ok
            raise CallTimeout(f"{self.full_name} {method} exceeded {timeout}s")
        code, message, out = wire.parse_response(reply)
        if code:
            raise CallError(code, message)
        return out

    def close(self) -> None:
        with self._cond:
            if self.closed:
                return
            self.closed = True
            self._cond.notify_all()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.runtime._forget(self)


def _check_identity(name: str, idx: str) -> str:
    if not name or not re.fullmatch(r"[a-zA-Z0-9_.+-]+", name):
        return f"invalid plugin name {name!r}"
    if not re.fullmatch(r"[0-9]{2}", idx):
        return f"invalid plugin index {idx!r}, must be 2 digits"
    return ""


class LabNriRuntime:
    def __init__(
        self,
        socket_path: str,
        *,
        request_timeout: float = 2.0,
        registration_timeout: float = 5.0,
        sync_chunk: int | None = None,
        state_change_only: bool = False,
        runtime_name: str = "dmn-lab",
        runtime_version: str = "0.1",
        required_plugins: RequiredPluginCheck | None = None,
    ) -> None:
        self.socket_path = socket_path
        #: containerd's default validator's required-plugin check (None: not enabled)
        self.required_plugins = required_plugins
        self.request_timeout = request_timeout
        self.registration_timeout = registration_timeout
        self.sync_chunk = sync_chunk
        self.state_change_only = state_change_only
        self.runtime_name = runtime_name
        self.runtime_version = runtime_version
        self.pods: dict[str, LabPod] = {}
        self.containers: dict[str, LabContainer] = {}
        self.unannounced: set[str] = set()  # restored sandboxes: no Stop/Remove to plugins
        self.events: list[RuntimeEvent] = []
        self._links: list[PluginLink] = []
        self._ready: list[PluginLink] = []
        self._lock = threading.RLock()  # hooks are serialised runtime-wide
        self._changed = threading.Condition()
        self._listener: socket.socket | None = None
        self._accept_thread: threading.Thread | None = None

    # -- server ------------------------------------------------------------------------

    def start(self) -> LabNriRuntime:
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)
        os.makedirs(os.path.dirname(self.socket_path) or ".", exist_ok=True)
        lst = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        lst.bind(self.socket_path)
        lst.listen(16)
        self._listener = lst
        self._accept_thread = threading.Thread(target=self._accept_loop, daemon=True)
        self._accept_thread.start()
        return self

    def stop(self) -> None:
        lst, self._listener = self._listener, None
        if lst is not None:
            with contextlib.suppress(OSError):
                lst.shutdown(socket.SHUT_RDWR)
            lst.close()
        for link in list(self._links):
            link.close()
        if self._accept_thread is not None:
            self._accept_thread.join(2)
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)

    def shutdown(self) -> None:
        """Tell plugins the runtime is going down (Plugin.Shutdown), then stop."""
        with self._lock:
            for link in list(self._ready):
                with contextlib.suppress(CallTimeout, CallError, ConnectionLost):
                    link.call("Shutdown", api.Empty().SerializeToString(), self.request_timeout)
        self.stop()

    def _accept_loop(self) -> None:
        while self._listener is not None:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            link = PluginLink(conn, self)
            with self._changed:
                self._links.append(link)
            threading.Thread(target=self._setup, args=(link,), daemon=True).start()

    def adopt(self, sock: socket.socket) -> None:
        """Serve a pre-connected plugin socket, as containerd does for plugins it launches
        (the peer end is passed to the plugin in NRI_PLUGIN_SOCKET)."""
        link = PluginLink(sock, self)
        with self._changed:
            self._links.append(link)
        threading.Thread(target=self._setup, args=(link,), daemon=True).start()

    def _forget(self, link: PluginLink) -> None:
        with self._changed:
            if link in self._links:
                self._links.remove(link)
            if link in self._ready:
                self._ready.remove(link)
            self._changed.notify_all()

    def _record(self, kind: str, link: PluginLink, detail: str = "") -> None:
        with self._changed:
            self.events.append(RuntimeEvent(kind, link.full_name, detail))
            self._changed.notify_all()

    def _record_silent(self, method: str, pod_id: str) -> None:
        """A hook the runtime ran without telling plugins (a restored sandbox)."""
        with self._changed:
            self.events.append(RuntimeEvent("unannounced", "", f"{method} {pod_id}"))
            self._changed.notify_all()

    def _drop(self, link: PluginLink, why: str) -> None:
        log.warning("lab nri dropping plugin=%s reason=%s", link.full_name, why)
        self._record("dropped", link, why)
        link.close()

    def _setup(self, link: PluginLink) -> None:
        if not link.registered.wait(self.registration_timeout) or link.registration_error:
            self._drop(link, link.registration_error or "registration timed out")
            return
        self._record("registered", link)
        with self._lock:
            try:
                cfg = api.ConfigureRequest(
                    runtime_name=self.runtime_name,
                    runtime_version=self.runtime_version,
                    registration_timeout=int(self.registration_timeout * 1000),
                    request_timeout=int(self.request_timeout * 1000),
                )
                out = link.call("Configure", cfg.SerializeToString(), self.request_timeout)
                mask = api.ConfigureResponse.FromString(out).events
                if mask == 0:
                    mask = VALID_EVENTS
                elif mask & ~VALID_EVENTS:
                    self._drop(link, f"invalid plugin events 0x{mask & ~VALID_EVENTS:x}")
                    return
                link.events = mask
                self._record("configured", link, f"0x{mask:x}")
                self._synchronize(link)
            except (CallTimeout, CallError, ConnectionLost, ValueError) as exc:
                self._drop(link, f"setup failed: {exc}")
                return
            with self._changed:
                if not link.closed:
                    self._ready.append(link)
                    self._ready.sort(key=lambda lk: lk.idx)
                self._changed.notify_all()
            self._record("synchronized", link)

    def _synchronize(self, link: PluginLink) -> None:
        objs: list[api.PodSandbox | api.Container] = [p.to_proto() for p in self.pods.values()]
        objs += [c.to_proto() for c in self.containers.values()]
        size = self.sync_chunk or max(1, len(objs))
        chunks = [objs[i : i + size] for i in range(0, len(objs), size)] or [[]]
        for n, chunk in enumerate(chunks):
            req = api.SynchronizeRequest(more=n < len(chunks) - 1)
            for obj in chunk:
                if isinstance(obj, api.PodSandbox):
                    req.pods.append(obj)
                else:
                    req.containers.append(obj)
            out = link.call("Synchronize", req.SerializeToString(), self.request_timeout)
            rpl = api.SynchronizeResponse.FromString(out)
            if req.more and (len(rpl.update) > 0 or rpl.more != req.more):
                raise CallError(9, "plugin does not handle split sync requests")

    def wait_ready(self, count: int = 1, timeout: float = 5.0) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: len(self._ready) >= count, timeout)

    def wait_event(self, kind: str, timeout: float = 5.0, after: int = 0) -> RuntimeEvent | None:
        with self._changed:
            found: list[RuntimeEvent] = []

            def _match() -> bool:
                found[:] = [e for e in self.events[after:] if e.kind == kind]
                return bool(found)

            self._changed.wait_for(_match, timeout)
            return found[0] if found else None

    @property
    def ready_plugins(self) -> list[str]:
        with self._changed:
            return [lk.full_name for lk in self._ready]

    # -- lifecycle -----------------------------------------------------------------------

    def _hook(
        self,
        event: int,
        method: str,
        payload: bytes,
        state_change: api.StateChangeEvent | None,
        timeout: float | None = None,
    ) -> list[bytes]:
        """Call every subscribed ready plugin in index order under ``timeout`` (default: the
        request timeout)."""
        limit = self.request_timeout if timeout is None else timeout
        replies: list[bytes] = []
        with self._lock:
            for link in list(self._ready):
                if not link.subscribed(event):
                    continue
                try:
                    if link.state_change and state_change is not None:
                        link.call("StateChange", state_change.SerializeToString(), limit)
                        replies.append(b"")
                        continue
                    try:
                        replies.append(link.call(method, payload, limit))
                    except CallError as exc:
                        if exc.code != UNIMPLEMENTED or state_change is None:
                            raise
                        link.state_change = True
                        self._record("fallback", link, method)
                        link.call("StateChange", state_change.SerializeToString(), limit)
                        replies.append(b"")
                except (CallTimeout, ConnectionLost) as exc:
                    self._drop(link, f"{method}: {exc}")
                except CallError as exc:
                    self._record("hook-error", link, f"{method}: {exc.message}")
                    raise HookFailed(f"{link.full_name} {method}: {exc.message}") from exc
        return replies

    def restore(self, pods: list[LabPod], containers: list[LabContainer]) -> None:
        """What a restarted runtime reloads from its own store: listed at the next
        Synchronize; Stop/Remove of these sandboxes are not announced to plugins."""
        with self._lock:
            for pod in pods:
                self.pods[pod.id] = pod
                self.unannounced.add(pod.id)
            for ctr in containers:
                self.containers[ctr.id] = ctr

    def run_pod_sandbox_unseen(self, pod: LabPod) -> None:
        """A sandbox created while no plugin was registered (containerd runs the hook over no
        plugin and starts the sandbox): later hooks of it reach the plugins as usual."""
        with self._lock:
            self.pods[pod.id] = pod

    def run_pod_sandbox(self, pod: LabPod, timeout: float | None = None) -> None:
        """``timeout`` overrides the request timeout for this hook only (tests of drops)."""
        with self._lock:
            self.pods[pod.id] = pod
            proto = pod.to_proto()
            try:
                self._hook(
                    api.RUN_POD_SANDBOX,
                    "RunPodSandbox",
                    api.RunPodSandboxRequest(pod=proto).SerializeToString(),
                    api.StateChangeEvent(event=api.RUN_POD_SANDBOX, pod=proto),
                    timeout,
                )
            except HookFailed:
                del self.pods[pod.id]
                raise

    def stop_pod_sandbox(self, pod_id: str, with_netns: bool = False) -> None:
        with self._lock:
            if pod_id in self.unannounced:
                self._record_silent("StopPodSandbox", pod_id)
                return
            proto = self.pods[pod_id].to_proto(with_netns=with_netns)
            try:
                self._hook(
                    api.STOP_POD_SANDBOX,
                    "StopPodSandbox",
                    api.StopPodSandboxRequest(pod=proto).SerializeToString(),
                    api.StateChangeEvent(event=api.STOP_POD_SANDBOX, pod=proto),
                )
            except HookFailed as exc:
                log.warning("lab nri StopPodSandbox error ignored error=%s", exc)

    def remove_pod_sandbox(self, pod_id: str) -> None:
        with self._lock:
            proto = self.pods[pod_id].to_proto(with_netns=False)
            if pod_id in self.unannounced:
                self._record_silent("RemovePodSandbox", pod_id)
            else:
                try:
                    self._hook(
                        api.REMOVE_POD_SANDBOX,
                        "RemovePodSandbox",
                        api.RemovePodSandboxRequest(pod=proto).SerializeToString(),
                        api.StateChangeEvent(event=api.REMOVE_POD_SANDBOX, pod=proto),
                    )
                except HookFailed as exc:
                    log.warning("lab nri RemovePodSandbox error ignored error=%s", exc)
            self.pods.pop(pod_id, None)
            self.unannounced.discard(pod_id)
            for cid in [c.id for c in self.containers.values() if c.pod_id == pod_id]:
                del self.containers[cid]

    def create_container(self, pod_id: str, ctr: LabContainer) -> LabContainer:
        with self._lock:
            pod = self.pods[pod_id].to_proto()
            req = api.CreateContainerRequest(pod=pod, container=ctr.to_proto())
            for out in self._hook(
                api.CREATE_CONTAINER, "CreateContainer", req.SerializeToString(), None
            ):
                rpl = api.CreateContainerResponse.FromString(out)
                ctr.devices.extend(rpl.adjust.linux.devices)
            if self.required_plugins is not None:
                present = present_names(lk.full_name for lk in self._ready)
                refusal = self.required_plugins.refusal(
                    self.pods[pod_id].annotations, ctr.name, present
                )
                if refusal is not None:
                    with self._changed:
                        self.events.append(RuntimeEvent("validator", "", refusal))
                        self._changed.notify_all()
                    raise HookFailed(f"default-validator CreateContainer: {refusal}")
            ctr.state = api.CONTAINER_CREATED
            self.containers[ctr.id] = ctr
            return ctr

    def start_container(self, ctr_id: str) -> None:
        with self._lock:
            ctr = self.containers[ctr_id]
            pod = self.pods[ctr.pod_id].to_proto()
            proto = ctr.to_proto()
            self._hook(
                api.START_CONTAINER,
                "StartContainer",
                api.StartContainerRequest(pod=pod, container=proto).SerializeToString(),
                api.StateChangeEvent(event=api.START_CONTAINER, pod=pod, container=proto),
            )
            ctr.state = api.CONTAINER_RUNNING
