"""The node agent's Kubernetes Events: refusals and failures, attachments and removals.

The kubelet and NRI adapters call :meth:`NodeEventReporter.refused` for every request the
coordinator refuses or fails: the ``dmn_refusals_total{request, code}`` counter is bumped at
once, and a ``Warning`` Event whose reason is the reason code is written about the object the
request concerns — the ResourceClaim for NodePrepare/NodeUnprepare, the Pod for sandbox and
container hooks — so ``kubectl describe`` shows why. :meth:`NodeEventReporter.noticed` writes
the ``Normal`` ones (``Attached`` with the interfaces and addresses a Pod got, ``Detached``
when they were removed), so a Pod's events tell its network's story either way.

Events are written by a background thread from a bounded queue: a runtime hook must answer
within its deadline and must never wait on the API server; when the queue is full the Event
is dropped and counted, never the refusal itself.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from dmn.api.cluster import Cluster
from dmn.api.cluster.events import EventRecorder
from dmn.observability.metrics import EVENTS_RECORDED, REFUSALS
from dmn.serial_worker import SerialWorker

log = logging.getLogger(__name__)

COMPONENT = "dra-multi-network-node"
QUEUE_SIZE = 1024


def claim_object(namespace: str, name: str, uid: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": namespace, "name": name, "uid": uid},
    }


def pod_object(namespace: str, name: str, uid: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": namespace, "name": name, "uid": uid},
    }


def reason_of(error: str) -> str:
    """The reason code a refusal message starts with (``E_X: ...``), else ``E_INTERNAL``."""
    head = error.split(":", 1)[0].strip()
    return (
        head if head.startswith(("E_", "W_")) and head.replace("_", "").isalnum() else "E_INTERNAL"
    )


_Event = tuple[Mapping[str, Any], str, str, str]  # the object, type, reason, message


class NodeEventReporter:
    def __init__(self, cluster: Cluster | None, node_name: str) -> None:
        self.recorder = EventRecorder(cluster, COMPONENT, node_name) if cluster else None
        self._events: SerialWorker[_Event] = SerialWorker(
            "refusal-events", self._write, QUEUE_SIZE, start_on_put=False
        )
        self.dropped = 0

    def start(self) -> NodeEventReporter:
        if self.recorder is not None:
            self._events.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._events.close(timeout)

    def refused(self, request: str, code: str, message: str, obj: Mapping[str, Any]) -> None:
        """Count the refusal and queue its Event (never blocks, never raises)."""
        REFUSALS.labels(request=request, code=code).inc()
        meta = obj.get("metadata") or {}
        log.warning(
            "event=refused request=%s code=%s kind=%s namespace=%s name=%s uid=%s",
            request,
            code,
            obj.get("kind"),
            meta.get("namespace"),
            meta.get("name"),
            meta.get("uid"),
        )
        if self.recorder is None:
            return
        if not self._events.offer((obj, "Warning", code, f"{request}: {message}")):
            self.dropped += 1

    def noticed(self, obj: Mapping[str, Any], reason: str, message: str) -> None:
        """Queue a ``Normal`` Event about ``obj`` (never blocks, never raises)."""
        if self.recorder is None:
            return
        if not self._events.offer((obj, "Normal", reason, message)):
            self.dropped += 1

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every queued Event was written (tests); False on timeout."""
        return self._events.flush(timeout)

    def _write(self, event: _Event) -> None:
        assert self.recorder is not None
        obj, type_, reason, message = event
        if self.recorder.record(obj, type_, reason, message) is not None:
            EVENTS_RECORDED.labels(kind=str(obj.get("kind")), reason=reason).inc()
