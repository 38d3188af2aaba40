"""Kubernetes Events for the objects the controller and the agent act on.

``EventRecorder.record(obj, "Warning", "ReasonCode", "message")`` writes a ``core/v1`` Event
about ``obj`` (namespace = the object's, ``default`` for cluster-scoped objects, as kubectl
and client-go do). A repeat of the same (object, type, reason, message) from this recorder
bumps ``count`` and ``lastTimestamp`` on the existing Event instead of creating a new one,
the client-go correlation users expect from ``kubectl describe``. Recording is best effort:
a failure is logged, never raised — an Event must not fail the work it reports on.
"""

from __future__ import annotations

import datetime as dt
import logging
import secrets
import threading
from collections.abc import Mapping
from typing import Any

from .access import Cluster
from .errors import ApiFailure, NotFound
from .resources import EVENTS

log = logging.getLogger(__name__)


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class EventRecorder:
    def __init__(self, cluster: Cluster, component: str, host: str = "") -> None:
        self.cluster = cluster
        self.component = component
        self.host = host
        self._lock = threading.Lock()
        self._recent: dict[tuple[str, str, str, str], tuple[str, str]] = {}  # -> (ns, name)

    def record(
        self, obj: Mapping[str, Any], event_type: str, reason: str, message: str
    ) -> dict[str, Any] | None:
        """Write or bump the Event; returns it, or None when the API refused."""
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        key = (str(meta.get("uid", "")), event_type, reason, message)
        try:
            with self._lock:
                known = self._recent.get(key)
            if known is not None:
                try:
                    current = self.cluster.get(EVENTS, known[1], known[0])
                    return self.cluster.patch(
                        EVENTS,
                        known[1],
                        {"count": int(current.get("count") or 1) + 1, "lastTimestamp": _now()},
                        known[0],
                    )
                except NotFound:
                    pass  # expired or deleted: write a new one
            now = _now()
            source: dict[str, str] = {"component": self.component}
            if self.host:
                source["host"] = self.host
            event = self.cluster.create(
                EVENTS,
                {
                    "metadata": {
                        "name": f"{meta.get('name', 'object')}.{secrets.token_hex(8)}",
                        "namespace": namespace,
                    },
                    "involvedObject": {
                        "apiVersion": obj.get("apiVersion", ""),
                        "kind": obj.get("kind", ""),
                        "name": meta.get("name", ""),
                        "namespace": meta.get("namespace", ""),
                        "uid": meta.get("uid", ""),
                        "resourceVersion": meta.get("resourceVersion", ""),
                    },
                    "type": event_type,
                    "reason": reason,
                    "message": message,
                    "count": 1,
                    "firstTimestamp": now,
                    "lastTimestamp": now,
                    "source": source,
                    "reportingComponent": self.component,
                    "reportingInstance": self.host or self.component,
                },
                namespace,
            )
            with self._lock:
                self._recent[key] = (namespace, event["metadata"]["name"])
                if len(self._recent) > 4096:
                    self._recent.pop(next(iter(self._recent)))
            return event
        except ApiFailure as exc:
            log.warning(
                "event not recorded reason=%s object=%s error=%s", reason, meta.get("name"), exc
            )
            return None
