"""Notice inventory changes instead of polling blindly (design §5).

:class:`ChangeMonitor` listens to kernel uevents on the ``pci``, ``net`` and ``infiniband``
subsystems (pyudev) and to rtnetlink link, address and route events, and calls
``on_change(reason)`` — debounced, from one dispatcher thread — so the agent rescans.
With ``relevant``, rtnetlink messages it refuses are dropped (see
:mod:`dmn.host.link_event_filter`). A
slow periodic resync (``resync`` seconds) covers anything missed, and a listener that
fails is logged and leaves the resync as the fallback: a missed event must never leave
stale inventory in place forever.
"""

from __future__ import annotations

import contextlib
import logging
import select
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

_SUBSYSTEMS = ("pci", "net", "infiniband")


class ChangeMonitor:
    def __init__(
        self,
        on_change: Callable[[str], None],
        *,
        netns: str | None = None,
        udev: bool = True,
        uevent_source: str = "udev",
        debounce: float = 0.2,
        resync: float = 300.0,
        relevant: Callable[[Any], bool] | None = None,
    ) -> None:
        self.on_change = on_change
        self.relevant = relevant  # an rtnetlink message that can change the inventory
        self.netns = netns
        self.udev = udev
        self.uevent_source = uevent_source  # "udev" (processed by udevd) or "kernel" (raw)
        self.debounce = debounce
        self.resync = resync
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._reasons: list[str] = []
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._ready = threading.Barrier(3 + (1 if udev else 0))  # start() + listeners

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> None:
        targets: list[Callable[[], None]] = [self._dispatch, self._rtnetlink]
        if self.udev:
            targets.append(self._uevents)
        for target in targets:
            t = threading.Thread(target=target, name=f"inventory-{target.__name__}", daemon=True)
            t.start()
            self._threads.append(t)
        try:
            self._ready.wait(timeout=5)  # listeners are bound before start() returns
        except threading.BrokenBarrierError:
            log.warning("inventory watch: a listener did not come up; resync remains")

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        for t in self._threads:
            t.join(timeout=5)
        self._threads.clear()

    def __enter__(self) -> ChangeMonitor:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- plumbing ----------------------------------------------------------------------

    def notify(self, reason: str) -> None:
        with self._lock:
            self._reasons.append(reason)
        self._wake.set()

    def _dispatch(self) -> None:
        self._arrive()
        while not self._stop.is_set():
            woke = self._wake.wait(timeout=self.resync)
            if self._stop.is_set():
                return
            if woke:
                self._stop.wait(self.debounce)  # let a burst settle into one rescan
            self._wake.clear()
            with self._lock:
                reasons, self._reasons = self._reasons, []
            reason = ",".join(sorted(set(reasons))) if reasons else "resync"
            try:
                self.on_change(reason)
            except Exception:  # a failed rescan must not kill the watcher
                log.exception("inventory watch: rescan callback failed reason=%s", reason)

    def _arrive(self) -> None:
        with contextlib.suppress(threading.BrokenBarrierError):
            self._ready.wait(timeout=5)

    def _rtnetlink(self) -> None:
        from pyroute2 import IPRoute
        from pyroute2.netlink.rtnl import (
            RTMGRP_IPV4_IFADDR,
            RTMGRP_IPV4_ROUTE,
            RTMGRP_IPV6_IFADDR,
            RTMGRP_IPV6_ROUTE,
            RTMGRP_LINK,
        )

        groups = (
            RTMGRP_LINK
            | RTMGRP_IPV4_IFADDR
            | RTMGRP_IPV6_IFADDR
            | RTMGRP_IPV4_ROUTE
            | RTMGRP_IPV6_ROUTE
        )
        kwargs: dict[str, Any] = {"netns": self.netns} if self.netns else {}
        try:
            ipr = IPRoute(**kwargs)
            ipr.bind(groups=groups)
        except Exception:
            log.exception("inventory watch: rtnetlink listener unavailable")
            self._arrive()
            return
        self._arrive()
        try:
            while not self._stop.is_set():
                ready, _, _ = select.select([ipr], [], [], 0.5)
                if not ready:
                    continue
                messages = list(ipr.get())
                while _buffered(ipr):
                    messages.extend(ipr.get())
                events = {
                    str(m.get("event", ""))
                    for m in messages
                    if self.relevant is None or self.relevant(m)
                }
                for event in sorted(e for e in events if e):
                    self.notify(f"rtnl:{event}")
        except Exception:
            log.exception("inventory watch: rtnetlink listener failed; periodic resync remains")
        finally:
            ipr.close()

    def _uevents(self) -> None:
        try:
            import pyudev

            monitor = pyudev.Monitor.from_netlink(pyudev.Context(), source=self.uevent_source)
            for subsystem in _SUBSYSTEMS:
                monitor.filter_by(subsystem)
            monitor.start()
        except Exception:
            log.exception("inventory watch: udev listener unavailable")
            self._arrive()
            return
        self._arrive()
        try:
            while not self._stop.is_set():
                device = monitor.poll(timeout=0.5)
                if device is not None:
                    self.notify(f"udev:{device.subsystem}:{device.action}")
        except Exception:
            log.exception("inventory watch: udev listener failed; periodic resync remains")


def _buffered(ipr: Any) -> bool:
    """Whether pyroute2 (0.9) holds received datagrams its last ``get()`` did not return.

    One ``get()`` returns one datagram's messages, but the read behind it takes every
    datagram the socket had; the rest wait in the library's queue, where ``select`` on the
    socket cannot see them. Without this each change was reported only when the next one
    arrived. Other library versions without that queue: False, the old behaviour."""
    queues = getattr(getattr(getattr(ipr, "asyncore", None), "msg_queue", None), "queues", None)
    queue = queues.get(0) if isinstance(queues, dict) else None
    return bool(queue is not None and queue.qsize() > 0)
