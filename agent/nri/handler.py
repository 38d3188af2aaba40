"""The interface the NRI plugin adapter calls — implemented by the agent's coordinator.

The adapter converts NRI protobuf messages into these plain values (the coordinator never
sees protobuf) and calls the handler from a worker thread, one hook at a time per
runtime request. A hook that raises :class:`HookRefused` (or any exception) fails the
runtime operation: the runtime reports the error and does not start the pod or
container. A hook that outlives its deadline is answered with DEADLINE_EXCEEDED and
reported to ``hook_timed_out``; its thread is left to finish, and its result is
discarded, so coordinator hooks must be idempotent and serialise per pod themselves.

A late finisher must not act on an answer nobody waits for: while a hook runs,
:func:`current_deadline` (in the hook's worker thread) is its :class:`HookDeadline`, which
a handler checks before each mutation — once the runtime was answered, the hook must
undo what it did instead of finishing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

T = TypeVar("T")


class HookDeadline:
    """When the runtime stops waiting for one hook (``time.monotonic`` seconds).

    :meth:`expired` is true once that time passed or the adapter answered the runtime
    DEADLINE_EXCEEDED (:meth:`expire`); it errs on the side of expired, which is safe: a
    hook that gives up refuses, and a refused hook changes nothing.
    """

    def __init__(self, at: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.at = at
        self._clock = clock
        self._expired = threading.Event()

    @classmethod
    def after(cls, seconds: float) -> HookDeadline:
        return cls(time.monotonic() + seconds)

    def expire(self) -> None:
        self._expired.set()

    def expired(self) -> bool:
        return self._expired.is_set() or self._clock() >= self.at

    def remaining(self) -> float:
        return 0.0 if self._expired.is_set() else max(0.0, self.at - self._clock())


_current = threading.local()


def current_deadline() -> HookDeadline | None:
    """The deadline of the hook this worker thread runs (None outside a hook)."""
    deadline: HookDeadline | None = getattr(_current, "deadline", None)
    return deadline


def call_with_deadline(deadline: HookDeadline, fn: Callable[..., T], *args: object) -> T:
    """Run ``fn(*args)`` with :func:`current_deadline` answering ``deadline``."""
    previous = getattr(_current, "deadline", None)
    _current.deadline = deadline
    try:
        return fn(*args)
    finally:
        _current.deadline = previous


@dataclass(frozen=True)
class PodSandbox:
    id: str
    name: str
    uid: str
    namespace: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    # Path of the sandbox network namespace (linux.namespaces entry of type "network");
    # None when the runtime sent none — expected at StopPodSandbox/RemovePodSandbox.
    netns_path: str | None = None
    ips: tuple[str, ...] = ()


@dataclass(frozen=True)
class Container:
    id: str
    pod_sandbox_id: str
    name: str
    state: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class DeviceNode:
    """A device node to add to a container (NRI LinuxDevice)."""

    path: str
    type: str  # "c" or "b"
    major: int
    minor: int
    file_mode: int | None = None
    uid: int | None = None
    gid: int | None = None


@dataclass(frozen=True)
class ContainerAdjustment:
    devices: tuple[DeviceNode, ...] = ()


@dataclass(frozen=True)
class HookTimeout:
    """Report of a hook that exceeded its deadline."""

    event: str
    pod_uid: str
    container_id: str
    deadline: float


class HookRefused(Exception):
    """Raised by a handler to refuse an operation with a reason the runtime reports."""


class NriHandler(Protocol):
    def synchronize(self, pods: Sequence[PodSandbox], containers: Sequence[Container]) -> None:
        """The runtime's full state after every (re)connect; reconcile, request nothing."""

    def run_pod_sandbox(self, pod: PodSandbox) -> None: ...

    def stop_pod_sandbox(self, pod: PodSandbox) -> None: ...

    def remove_pod_sandbox(self, pod: PodSandbox) -> None: ...

    def create_container(self, pod: PodSandbox, container: Container) -> ContainerAdjustment: ...

    def start_container(self, pod: PodSandbox, container: Container) -> None: ...

    def shutdown(self) -> None:
        """The runtime is going down; the adapter will reconnect when it returns."""

    def hook_timed_out(self, report: HookTimeout) -> None:
        """A hook missed its deadline; the runtime was answered DEADLINE_EXCEEDED."""
