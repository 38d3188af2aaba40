"""Shared helpers for the NRI tests: a recording handler and plugin/runtime fixtures."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from dmn.agent.nri.handler import (
    Container,
    ContainerAdjustment,
    DeviceNode,
    HookRefused,
    HookTimeout,
    PodSandbox,
)

# How long tests wait for something that should happen promptly. Generous on purpose: the
# CI machine is shared, and a wait that succeeds returns as soon as its condition holds.
WAIT = 60.0
# Runtime request timeout and plugin hook-deadline cap for tests that are not about
# timeouts: far above any scheduling delay, so a loaded machine never drops the plugin.
RELAXED = {"request_timeout": 20.0, "registration_timeout": 20.0}
RELAXED_DEADLINE = 15.0


@dataclass
class RecordingHandler:
    """Implements NriHandler: records calls; can be told to stall or refuse."""

    calls: list[tuple[str, str, str | None]] = field(default_factory=list)
    synced: list[tuple[list[str], list[str]]] = field(default_factory=list)
    timeouts: list[HookTimeout] = field(default_factory=list)
    stall: dict[str, float] = field(default_factory=dict)
    # event -> gate: the hook blocks until the test sets it (deterministic, unlike a sleep)
    block: dict[str, threading.Event] = field(default_factory=dict)
    refuse: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def _record(self, event: str, pod: PodSandbox | None, extra: str | None = None) -> None:
        with self.lock:
            self.calls.append((event, pod.uid if pod else "", extra))
        if event in self.stall:
            time.sleep(self.stall[event])
        if event in self.block:
            self.block[event].wait(WAIT)
        if event in self.refuse:
            raise HookRefused(f"{event} refused by test")

    def synchronize(self, pods: Sequence[PodSandbox], containers: Sequence[Container]) -> None:
        with self.lock:
            self.synced.append(([p.uid for p in pods], [c.id for c in containers]))

    def run_pod_sandbox(self, pod: PodSandbox) -> None:
        self._record("RunPodSandbox", pod, pod.netns_path)

    def stop_pod_sandbox(self, pod: PodSandbox) -> None:
        self._record("StopPodSandbox", pod, pod.netns_path)

    def remove_pod_sandbox(self, pod: PodSandbox) -> None:
        self._record("RemovePodSandbox", pod, pod.netns_path)

    def create_container(self, pod: PodSandbox, container: Container) -> ContainerAdjustment:
        self._record("CreateContainer", pod, container.id)
        return ContainerAdjustment(
            devices=(DeviceNode("/dev/infiniband/uverbs0", "c", 231, 192, file_mode=0o666),)
        )

    def start_container(self, pod: PodSandbox, container: Container) -> None:
        self._record("StartContainer", pod, container.id)

    def shutdown(self) -> None:
        self._record("Shutdown", None)

    def hook_timed_out(self, report: HookTimeout) -> None:
        with self.lock:
            self.timeouts.append(report)

    def events(self) -> list[str]:
        with self.lock:
            return [c[0] for c in self.calls]


def release(handler: RecordingHandler) -> None:
    """Open every gate so no hook thread outlives the test."""
    for gate in handler.block.values():
        gate.set()
