"""List-then-watch that never misses a change: the loop every level-triggered reconciler needs.

``ListWatch.events()`` yields :class:`~.access.WatchEvent` s: first one ``ADDED`` per existing
object, then a ``SYNCED`` marker (object = ``{"metadata": {"resourceVersion": rv}}``), then
live changes. Each watch request resumes from the last version seen (bookmarks included);
when the server answers 410 Gone it relists and emits the *difference* against what it had
reported — ``ADDED``/``MODIFIED`` for new or changed objects, ``DELETED`` for vanished ones —
followed by another ``SYNCED``. Other failures (server unreachable, the resource not served
yet because its CRD is not installed, ...) are logged and retried with exponential backoff
and full jitter (each wait uniform in [0, backoff]), as client-go informers do: after an
API server restart, the watches of every agent on every node must not reconnect in
lockstep. ``stop()`` ends the iteration from any thread.
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Iterator
from typing import Any

from .access import Cluster, WatchEvent, WatchStream
from .errors import ApiFailure, Gone
from .resources import Resource

log = logging.getLogger(__name__)

SYNCED = "SYNCED"
INITIAL_BACKOFF = 0.2


def jittered(backoff: float, rand: Callable[[], float] = random.random) -> float:
    """Full jitter: a wait uniform in [0, ``backoff``] (never below a small floor)."""
    return max(0.01, backoff * rand())


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return (meta.get("namespace") or "", meta.get("name") or "")


class ListWatch:
    def __init__(
        self,
        cluster: Cluster,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
        max_backoff: float = 10.0,
        rand: Callable[[], float] = random.random,
        metadata_only: bool = False,
    ) -> None:
        """``metadata_only``: every object as PartialObjectMetadata (list and watch)."""
        self.cluster = cluster
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.timeout_seconds = timeout_seconds
        self.max_backoff = max_backoff
        self.rand = rand
        self.metadata_only = metadata_only
        #: the waits taken before reconnecting after failures (the last 32; tests, logs)
        self.waits: list[float] = []
        self._stopped = threading.Event()
        self._stream: WatchStream | None = None
        self.known: dict[tuple[str, str], dict[str, Any]] = {}

    def stop(self) -> None:
        self._stopped.set()
        stream = self._stream
        if stream is not None:
            stream.stop()

    def _relist(self) -> Iterator[WatchEvent]:
        listed = self.cluster.list(
            self.resource,
            self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            metadata_only=self.metadata_only,
        )
        current = {_key(item): item for item in listed.items}
        for key, item in current.items():
            old = self.known.get(key)
            if old is None:
                yield WatchEvent("ADDED", item)
            elif (old.get("metadata") or {}).get("resourceVersion") != (
                item.get("metadata") or {}
            ).get("resourceVersion"):
                yield WatchEvent("MODIFIED", item)
        for key, old in list(self.known.items()):
            if key not in current:
                yield WatchEvent("DELETED", old)
        self.known = current
        yield WatchEvent(SYNCED, {"metadata": {"resourceVersion": listed.resource_version}})

    def events(self) -> Iterator[WatchEvent]:
        backoff = INITIAL_BACKOFF
        rv: str | None = None
        while not self._stopped.is_set():
            try:
                if rv is None:
                    for event in self._relist():
                        if event.type == SYNCED:
                            rv = event.resource_version
                        yield event
                        if self._stopped.is_set():
                            return
                self._stream = self.cluster.watch(
                    self.resource,
                    self.namespace,
                    resource_version=rv,
                    label_selector=self.label_selector,
                    field_selector=self.field_selector,
                    timeout_seconds=self.timeout_seconds,
                    metadata_only=self.metadata_only,
                )
                for event in self._stream:
                    if self._stopped.is_set():
                        return
                    if event.resource_version:
                        rv = event.resource_version
                    if event.type == "BOOKMARK":
                        continue
                    if event.type == "DELETED":
                        self.known.pop(_key(event.object), None)
                    else:
                        self.known[_key(event.object)] = event.object
                    yield event
                backoff = INITIAL_BACKOFF
            except Gone:
                log.info("watch expired, relisting resource=%s", self.resource.plural)
                rv = None
            except ApiFailure as exc:  # Unavailable, NotFound (CRD not installed yet), ...
                if self._stopped.is_set():
                    return
                wait = jittered(backoff, self.rand)
                log.warning(
                    "watch failed resource=%s error=%s backoff=%.1f wait=%.2f",
                    self.resource.plural,
                    exc,
                    backoff,
                    wait,
                )
                self.waits = [*self.waits[-31:], wait]
                self._stopped.wait(wait)
                backoff = min(backoff * 2, self.max_backoff)
            finally:
                self._stream = None
