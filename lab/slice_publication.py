"""Publishes the lab node's ResourceSlices to the lab API server and keeps them current.

This is the publication half of a node agent, for the lab node only: on start and on every
DeviceExposurePolicy or ResourceClaim change it plans the pool with the real
:class:`~dmn.agent.slices.NodePublication` (policies read from the API server, allocated
pins read from claim status), writes the slices, deletes slices the pool no longer has,
and verifies the read-back (a server that drops fields switches publication to degraded).

Contract: :meth:`LabSlicePublication.publish` is synchronous and returns the stored slices;
:meth:`start`/:meth:`stop` run it from watches in background threads. A failed pass is
logged and retried by the next event or the periodic resync, never fatal.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any

from pydantic import ValidationError

from dmn.agent.inventory import Inventory
from dmn.agent.personas.status_report import report_policy_statuses
from dmn.agent.slices import NodePublication, allocated_devices
from dmn.api.cluster import AlreadyExists, ApiFailure, Cluster, ListWatch, NotFound
from dmn.api.cluster import resources as r
from dmn.api.cluster.events import EventRecorder
from dmn.api.identity import DRIVER
from dmn.api.policy import DeviceExposurePolicy

log = logging.getLogger(__name__)

Obj = dict[str, Any]


class LabSlicePublication:
    def __init__(
        self, cluster: Cluster, node_name: str, inventory: Inventory, resync: float = 30.0
    ) -> None:
        self.cluster = cluster
        self.node_name = node_name
        self.inventory = inventory
        self.resync = resync
        self.publication = NodePublication(node_name)
        self.events = EventRecorder(cluster, "dra-multi-network-node", node_name)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._watches: list[ListWatch] = []

    def _own_slices(self) -> list[Obj]:
        return [
            s
            for s in self.cluster.list(r.RESOURCE_SLICES).items
            if (s.get("spec") or {}).get("driver") == DRIVER
            and (s.get("spec") or {}).get("nodeName") == self.node_name
        ]

    def _policies(self, docs: list[Obj]) -> list[DeviceExposurePolicy]:
        out: list[DeviceExposurePolicy] = []
        for doc in docs:
            try:
                out.append(DeviceExposurePolicy.model_validate(doc))
            except ValidationError as exc:
                name = (doc.get("metadata") or {}).get("name")
                log.warning("policy skipped name=%s error=%s", name, exc.errors()[0]["msg"])
        return out

    def publish(self) -> list[Obj]:
        """Plan and write the pool once; returns the slices as stored."""
        with self._lock:
            existing = self._own_slices()
            if self.publication.publisher.generation == 0 and existing:
                # a restarted lab publishes above what its previous run left behind
                self.publication.publisher.generation = max(
                    int(s["spec"]["pool"]["generation"]) for s in existing
                )
            claims = self.cluster.list(r.RESOURCE_CLAIMS).items
            policy_docs = self.cluster.list(r.DEVICE_EXPOSURE_POLICIES).items
            plan = self.publication.plan(
                self.inventory,
                self._policies(policy_docs),
                {},
                allocated_devices(claims, DRIVER, self.node_name),
            )
            stored: list[Obj] = []
            for doc in plan.slices:
                stored.append(self._write(doc))
            for name in plan.obsolete(s["metadata"]["name"] for s in existing):
                with contextlib.suppress(NotFound):
                    self.cluster.delete(r.RESOURCE_SLICES, name)
            if self.publication.verify(plan.slices, stored):
                log.warning("lab slices degraded node=%s", self.node_name)
            report_policy_statuses(self.cluster, self.events, plan.personas, policy_docs)
            log.info(
                "lab slices published node=%s slices=%d devices=%d generation=%d",
                self.node_name,
                len(stored),
                len(plan.personas.personas),
                self.publication.publisher.generation,
            )
            return stored

    def _write(self, doc: Obj) -> Obj:
        try:
            return self.cluster.create(r.RESOURCE_SLICES, doc)
        except AlreadyExists:
            current = self.cluster.get(r.RESOURCE_SLICES, doc["metadata"]["name"])
            body = {**doc, "metadata": {**doc["metadata"], **_version(current)}}
            return self.cluster.replace(r.RESOURCE_SLICES, body)

    # --- background ----------------------------------------------------------------------

    def _watch(self, res: r.Resource) -> None:
        lw = ListWatch(self.cluster, res, timeout_seconds=60)
        self._watches.append(lw)

        def loop() -> None:
            while not self._stop.is_set():
                try:
                    for _event in lw.events():
                        self._wake.set()
                    return
                except Exception:
                    log.exception("lab publication watch failed resource=%s", res.plural)
                    self._stop.wait(1.0)

        self._spawn(loop, f"lab-publish-watch-{res.plural}")

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.resync)
            if self._stop.is_set():
                return
            self._wake.clear()
            try:
                self.publish()
            except ApiFailure as exc:
                log.info("lab publication retry error=%s", exc)
            except Exception:
                log.exception("lab publication failed; retrying on the next event")

    def _spawn(self, target: Any, name: str) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def start(self) -> None:
        self._stop.clear()
        self._watch(r.DEVICE_EXPOSURE_POLICIES)
        self._watch(r.RESOURCE_CLAIMS)
        self._spawn(self._loop, "lab-publish")

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        for lw in self._watches:
            lw.stop()
        for t in self._threads:
            t.join(timeout=5)
        self._threads.clear()
        self._watches.clear()


def _version(obj: Obj) -> Obj:
    return {"resourceVersion": obj["metadata"]["resourceVersion"]}
