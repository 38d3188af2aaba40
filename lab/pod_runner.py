"""The embedded lab runs the Pods its API server is given (``dmn lab run``, ``dmn lab apply``).

Why: :class:`~dmn.lab.pods.LabPods` plays kube-scheduler, kubelet and containerd for one
process (the demo); a user trying their own Pod talks to a running ``dmn lab up`` from
another process. :class:`LabPodRunner` runs inside the lab process (``up --links netns``,
root) and acts like a node's kubelet watching the API server: a new Pod (no phase, or
Pending without a message) is bound to the lab node and brought up through ``LabPods`` (its
claims allocated, NodePrepare over the agent's DRA socket, a fresh network namespace driven
through the lab NRI runtime); a Pod being deleted (the API server deletes Pods bound to a
node gracefully) is torn down in a real kubelet's order, then its deletion is finished. The
outcome is the Pod's status (``Running``, or ``Pending`` with the reason code and message).

The Pods' network namespaces are what ``dmn lab exec`` enters. Their names are recorded
by this process in ``<state dir>/pods.json`` (``{"NAMESPACE/NAME": {"uid", "netns"}}``),
never taken from the Pod object, which any API client can write; the record exists
exactly while a runner is up, so clients tell from it that this lab runs Pods.
Pods restored from an earlier run of the lab (their sandboxes died with it) are marked
``Failed``. Sockets and the agent's journal live in a short private directory under /tmp
(unix socket paths must fit sockaddr_un), removed on stop.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

from dmn.api.cluster import ApiFailure, Conflict, ListWatch, NotFound
from dmn.api.cluster import resources as r
from dmn.api.cluster.access import WatchEvent
from dmn.api.cluster.listwatch import SYNCED
from dmn.lab.cluster import LabCluster, LabError
from dmn.lab.node import NODE_NAME
from dmn.lab.pods import LabPods
from dmn.lab.state_dir import StateDir

log = logging.getLogger(__name__)

RECORD = "pods.json"
#: The only namespace names the runner creates (see :class:`~dmn.lab.pods.LabPods`).
POD_NETNS = re.compile(r"^dmn-pod-[0-9a-f]{8}$")
RESTARTED = "the lab was restarted: this Pod's sandbox is gone (delete the Pod)"


def record_path(state: StateDir) -> Path:
    return state.root / RECORD


def read_record(state: StateDir) -> dict[str, dict[str, str]] | None:
    """The runner's record, or None when no runner is up (or the record is unreadable)."""
    try:
        doc = json.loads(record_path(state).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


class LabPodRunner:
    def __init__(self, lab: LabCluster, state: StateDir) -> None:
        self.state = state
        self.root = Path(tempfile.mkdtemp(prefix="dmn-lp-", dir="/tmp"))
        self.pods = LabPods(lab, self.root)
        self.cluster = lab.client()
        self._watch = ListWatch(self.cluster, r.PODS, timeout_seconds=60)
        self._thread: threading.Thread | None = None
        self._synced = False

    def start(self) -> LabPodRunner:
        try:
            self.pods.start()
        except BaseException:
            self.stop()
            raise
        self._write()
        self._thread = threading.Thread(target=self._loop, name="lab-pod-runner", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching, tear every Pod down (their objects are deleted), remove the record
        and the private directory."""
        self._watch.stop()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        with contextlib.suppress(Exception):
            self.pods.stop()
        with contextlib.suppress(FileNotFoundError):
            record_path(self.state).unlink()
        shutil.rmtree(self.root, ignore_errors=True)

    def _loop(self) -> None:
        for event in self._watch.events():
            try:
                self._handle(event)
            except Exception:  # one Pod's failure must not stop the node
                log.exception("event=lab-pod-failed type=%s", event.type)

    def _handle(self, event: WatchEvent) -> None:
        if event.type == SYNCED:
            self._synced = True
            return
        pod: dict[str, Any] = event.object
        meta = pod.get("metadata") or {}
        key = (meta.get("namespace") or "default", str(meta.get("name", "")))
        known = self.pods.pods.get(key)
        mine = known is not None and known.uid == meta.get("uid")
        if event.type == "DELETED":
            if mine:
                self._delete(*key)
            return
        if meta.get("deletionTimestamp"):  # graceful deletion: the node finishes it
            if mine:
                self._delete(*key)
            elif (pod.get("spec") or {}).get("nodeName") == NODE_NAME:
                with contextlib.suppress(NotFound, Conflict):
                    self.cluster.delete(
                        r.PODS, key[1], key[0], grace_period_seconds=0, uid=meta.get("uid")
                    )
            return
        if known is not None:
            return
        status = pod.get("status") or {}
        phase = status.get("phase")
        # the API server makes a new Pod Pending; the runner's own outcomes carry a message
        # (Pending) or are Running: without either, the Pod is new
        if phase in (None, "Pending") and not status.get("message"):
            self._admit(pod)
        elif not self._synced and phase in ("Pending", "Running"):
            self._mark_failed(pod)

    def _admit(self, pod: dict[str, Any]) -> None:
        try:
            running = self.pods.admit(pod)
        except LabError as exc:
            log.warning("event=lab-pod-not-started code=%s error=%s", exc.code, exc.message)
        except ApiFailure as exc:  # binding failed: the Pod changed or went away
            log.warning("event=lab-pod-not-bound error=%s", exc)
        else:
            log.info("event=lab-pod-running pod=%s/%s", running.namespace, running.name)
        self._write()

    def _delete(self, namespace: str, name: str) -> None:
        try:
            self.pods.delete(namespace, name)
        except LabError as exc:
            log.warning("event=lab-pod-delete-failed code=%s error=%s", exc.code, exc.message)
        self._write()
        log.info("event=lab-pod-deleted pod=%s/%s", namespace, name)

    def _mark_failed(self, pod: dict[str, Any]) -> None:
        pod = {**pod, "status": {**(pod.get("status") or {}), "phase": "Failed"}}
        pod["status"]["message"] = RESTARTED
        with contextlib.suppress(NotFound):
            self.cluster.replace(r.PODS, pod, pod["metadata"].get("namespace"), status=True)

    def _write(self) -> None:
        doc = {
            f"{ns}/{name}": {"uid": p.uid, "netns": p.netns}
            for (ns, name), p in sorted(self.pods.pods.items())
        }
        path = record_path(self.state)
        temporary = path.with_name(path.name + ".tmp")
        temporary.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        os.replace(temporary, path)
