"""The controller process core: watches → one rate-limited work queue → reconcilers.

Every watch only *names* work (a key); every reconciler reads current state and
converges (level-triggered). A periodic resync re-enqueues every known object, so a
missed event is repaired within one resync period. Failed reconciles are retried with
per-key exponential backoff; a key is never processed by two workers at once.

Keys are ``(kind, name)`` with kind in topology | revision | plugin | policy | ippool |
capability (an IPAllocation names its pool; a deleted ResourceClaim re-enqueues every pool,
whose reconcile collects the claim's addresses; a Node, or its agent's Pod, names the Node
whose capability labels to converge, and a revision that comes or goes names every Node).
A change of this driver's ResourceSlices re-enqueues every topology (its status counts the
devices each class selects, from the slices this watch holds).

Event storms are coalesced. A Pod burst makes hundreds of claim, attachment, allocation and
slice events in seconds, and each used to start a full reconcile of every revision, pool or
topology, competing for the node's CPU with the Pods it served. So the keys those events
name are scheduled a short window ahead (:data:`RECHECK_WINDOW_S`; a key already waiting
stays once), and a claim, attachment or Node event skips the revisions whose last verdict
only their topology decides (current or settling: :data:`.revision_gc.TOPOLOGY_REASONS`);
an event of a topology rechecks that topology's revisions, and the resync still enqueues
everything. What this trades is latency of reports and collection (at most the window),
never a decision: every reconcile still reads the current state.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dmn.api.cluster import ApiFailure, Cluster, ListWatch, WatchEvent
from dmn.api.cluster import resources as r
from dmn.api.cluster.listwatch import SYNCED
from dmn.api.identity import DRIVER, LABEL_MANAGED_BY, LABEL_TOPOLOGY, MANAGED_BY
from dmn.api.policy_report import ANNOTATION as POLICY_REPORT
from dmn.api.policy_report import node_reports
from dmn.controller.ippool import IPPoolReconciler
from dmn.controller.node_capability import DEFAULT_GRACE_S, AgentPods, NodeCapabilityReconciler
from dmn.controller.plugin_status import PluginStatusReconciler, PolicyStatusReconciler
from dmn.controller.revision_gc import RevisionCollector
from dmn.controller.topology import TopologyReconciler
from dmn.controller.workqueue import RateLimitedQueue, RetryLater
from dmn.observability.metrics import RECONCILES
from dmn.opcodes.spec import OpcodeRegistry

log = logging.getLogger(__name__)

Key = tuple[str, str]

RECHECK_WINDOW_S = 1.0
"""How far ahead an event-storm key (a topology recount, a revision or pool recheck) is
scheduled; the events of one window make one reconcile per key."""
NODES_PER_WINDOW_S = 50.0
"""Nodes per second of :meth:`Controller._report_window` above one second."""
REPORT_WINDOW_MAX_S = 15.0
"""The longest a node's policy report waits for its policy's status."""


@dataclass
class Controller:
    cluster: Cluster
    registry: OpcodeRegistry
    workers: int = 2
    resync: float = 30.0
    queue: RateLimitedQueue = field(default_factory=RateLimitedQueue)
    #: the node agents' Pods (None: the agent is not a Pod, as in the embedded lab)
    agent_pods: AgentPods | None = None
    capability_grace: float = DEFAULT_GRACE_S

    def __post_init__(self) -> None:
        self.topologies = TopologyReconciler(
            self.cluster,
            self.registry,
            published_slices=self.published_slices,
            inputs=self.topology_inputs,
            slices_version=self.slices_version,
        )
        self.revisions = RevisionCollector(
            self.cluster, publishing=self.topologies.latest, cached=self.revision_cached
        )
        self.plugins = PluginStatusReconciler(self.cluster, self.registry)
        self.policies = PolicyStatusReconciler(self.cluster, reports=self.policy_reports)
        self.pools = IPPoolReconciler(self.cluster)
        self.capabilities = NodeCapabilityReconciler(
            self.cluster,
            lambda: self._cached(r.NETWORK_TOPOLOGY_REVISIONS),
            None if self.agent_pods is None else self._agent_pods,
            grace=self.capability_grace,
            node=self.node_cached,
        )
        self._watches: list[ListWatch] = []
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self._slice_events = 0
        self._listed: set[str] = set()  # the kinds whose watch has listed (since start)
        # each Node's policy reports: the annotation as last seen, and what it holds
        self._report_values: dict[str, str | None] = {}
        self._reports: dict[str, dict[str, dict[str, Any]]] = {}
        self._policy_generations: dict[str, Any] = {}  # per policy, as its last event had it
        self.processed = 0

    # --- keys --------------------------------------------------------------------------

    def _watch_of(self, res: Any) -> ListWatch | None:
        for lw in self._watches:
            if lw.resource is res:
                return lw
        return None

    def _names(self, res: Any) -> list[str]:
        lw = self._watch_of(res)
        # the watch thread mutates ``known``: copy its keys in one step (no Python code runs
        # inside list(dict)), then sort the copy
        return sorted(name for _, name in list(lw.known)) if lw is not None else []

    def _cached(self, res: Any) -> list[dict[str, Any]]:
        """The objects the watch of ``res`` holds (one copy step: its thread mutates it)."""
        lw = self._watch_of(res)
        return list(lw.known.values()) if lw is not None else []

    def _known(self, res: Any) -> dict[tuple[str, str], dict[str, Any]]:
        lw = self._watch_of(res)
        return dict(lw.known) if lw is not None else {}  # one step, as in :meth:`_cached`

    def _one(self, res: Any, name: str) -> dict[str, Any] | None:
        """Object ``name`` (cluster-scoped) as the watch of ``res`` holds it."""
        lw = self._watch_of(res)
        return lw.known.get(("", name)) if lw is not None else None  # no copy of the cache

    def topology_inputs(self, name: str) -> tuple[dict[str, Any], tuple[Any, ...]] | None:
        """Topology ``name`` as the watch holds it and the fingerprint of what its reconcile
        reads (its resourceVersion, every NetworkPlugin's, its revisions' and its
        classes'), from the watch caches; None until each of those watches has listed."""
        if not {"topology", "plugin", "revision", "class"} <= self._listed:
            return None
        topo = self._one(r.NETWORK_TOPOLOGIES, name)
        if topo is None:
            return None
        label = name[:63].rstrip("-.")
        plugins = sorted((n, _version(o)) for (_, n), o in self._known(r.NETWORK_PLUGINS).items())
        revisions = sorted(
            (n, _version(o))
            for (_, n), o in self._known(r.NETWORK_TOPOLOGY_REVISIONS).items()
            if ((o.get("spec") or {}).get("topologyRef") or {}).get("name") == name
        )
        classes = sorted(
            (n, _version(o))
            for (_, n), o in self._known(r.DEVICE_CLASSES).items()
            if ((o.get("metadata") or {}).get("labels") or {}).get(LABEL_TOPOLOGY) == label
        )
        return topo, (_version(topo), tuple(plugins), tuple(revisions), tuple(classes))

    def revision_cached(self, name: str) -> tuple[dict[str, Any], dict[str, Any] | None] | None:
        """Revision ``name`` and the topology it names, as the watches hold them; None
        until both watches have listed or when the revision is not held."""
        if not {"topology", "revision"} <= self._listed:
            return None
        revision = self._one(r.NETWORK_TOPOLOGY_REVISIONS, name)
        if revision is None:
            return None
        ref = (revision.get("spec") or {}).get("topologyRef") or {}
        return revision, self._one(r.NETWORK_TOPOLOGIES, str(ref.get("name")))

    def node_cached(self, name: str) -> dict[str, Any] | None:
        """Node ``name`` as the watch holds it; None before its first list or when it does
        not hold it (the caller reads the API then)."""
        return self._one(r.NODES, name) if "node" in self._listed else None

    def policy_reports(self) -> dict[str, dict[str, dict[str, Any]]] | None:
        """Every Node's policy reports (node → policy → entry) as the Node watch holds them;
        None before its first list."""
        return dict(self._reports) if "node" in self._listed else None  # one step

    def _report_window(self) -> float:
        """How far ahead a node report schedules its policies' status: one second, longer
        with more nodes (at most :data:`REPORT_WINDOW_MAX_S`). A change every node reports
        on arrives as one report per node over the whole republication; each status write
        reaches every node's watch, so the writes a policy gets meanwhile are bounded by
        the window, not by the nodes."""
        nodes = len(self._report_values)
        return min(REPORT_WINDOW_MAX_S, max(RECHECK_WINDOW_S, nodes / NODES_PER_WINDOW_S))

    def _node_report(self, event: WatchEvent, name: str) -> None:
        """Keep Node ``name``'s policy reports; the policies a changed report names (before
        or after) get their status recomputed within :meth:`_report_window`."""
        meta = event.object.get("metadata") or {}
        value = (
            None if event.type == "DELETED" else (meta.get("annotations") or {}).get(POLICY_REPORT)
        )
        if event.type == "DELETED":
            if self._report_values.pop(name, None) is None and name not in self._reports:
                return
        elif name in self._report_values and self._report_values[name] == value:
            return
        else:
            self._report_values[name] = value
        before = self._reports.get(name, {})
        entries, why = ({}, None) if value is None else node_reports(event.object)
        if why is not None:
            log.warning("event=policy-report-refused node=%s reason=%r", name, why)
        if entries:
            self._reports[name] = entries
        else:
            self._reports.pop(name, None)
        if "node" in self._listed:
            window = self._report_window()
            for policy in sorted(set(before) | set(entries)):
                self.queue.add_after(("policy", policy), window)

    def _agent_pods(self) -> list[dict[str, Any]]:
        return self._cached(r.PODS)  # watched in the agents' namespace only

    def enqueue_all(self, kind: str, res: Any) -> None:
        for name in self._names(res):
            self.queue.add((kind, name))

    def _soon(self, kind: str, names: list[str]) -> None:
        for name in names:
            self.queue.add_after((kind, name), RECHECK_WINDOW_S)

    def _revisions_of(self, topology: str) -> list[str]:
        """The names of the revisions the watch holds for ``topology``."""
        out = []
        for rev in self._cached(r.NETWORK_TOPOLOGY_REVISIONS):
            ref = (rev.get("spec") or {}).get("topologyRef") or {}
            name = (rev.get("metadata") or {}).get("name")
            if name and ref.get("name") == topology:
                out.append(str(name))
        return sorted(out)

    def _releasable_revisions(self) -> list[str]:
        """The revisions a claim, attachment or Node event may release: all but those
        whose last verdict was their topology's alone."""
        held = set(self.revisions.held_by_topology)
        return [n for n in self._names(r.NETWORK_TOPOLOGY_REVISIONS) if n not in held]

    def published_slices(self) -> list[dict[str, Any]] | None:
        """This driver's ResourceSlices as the watch holds them; None before its first list
        (a count from no slices would report every class as matching nothing)."""
        lw = self._watch_of(r.RESOURCE_SLICES)
        if "slice" not in self._listed or lw is None:
            return None
        return list(lw.known.values())  # one step: the watch thread mutates it

    def slices_version(self) -> int | None:
        """A number that moves with every event of this driver's slices (None before their
        watch has listed): a topology's device count is current while it has not moved."""
        return self._slice_events if "slice" in self._listed else None

    def _on_event(self, kind: str, event: WatchEvent) -> None:
        if kind == "slice":
            self._slice_events += 1
            # before the first list, ADDED events only fill the cache: count once it is whole
            if event.type == SYNCED:
                self._listed.add(kind)
            if kind in self._listed:
                self._soon("topology", self._names(r.NETWORK_TOPOLOGIES))
            return
        if event.type == SYNCED:
            self._listed.add(kind)
            if kind == "node":  # the reports are whole: every policy's status can be summed
                self.enqueue_all("policy", r.DEVICE_EXPOSURE_POLICIES)
            return
        obj = event.object
        name = (obj.get("metadata") or {}).get("name")
        if not name:
            return
        if kind == "topology":
            self.queue.add(("topology", name))
            # its current revision may have moved on (or it is gone): its revisions are
            # decided again (only its own: topologies are many, and each writes its status)
            self._soon("revision", self._revisions_of(name))
        elif kind == "revision":
            self.queue.add(("revision", name))
            if event.type != "MODIFIED":  # a requirement came or went: relabel every Node
                self.enqueue_all("capability", r.NODES)
            topo = ((obj.get("spec") or {}).get("topologyRef") or {}).get("name")
            if topo and event.type == "DELETED":
                self.queue.add(("topology", topo))
        elif kind == "plugin":
            self.queue.add(("plugin", name))
            self.enqueue_all("topology", r.NETWORK_TOPOLOGIES)
        elif kind == "policy":
            generation = (obj.get("metadata") or {}).get("generation")
            status_only = (
                event.type == "MODIFIED" and self._policy_generations.get(name) == generation
            )
            self._policy_generations[name] = generation
            if event.type == "DELETED":
                self._policy_generations.pop(name, None)
            if status_only:
                # a status write (ours, mostly): summed again within the window, so a write
                # does not at once make another while reports keep arriving
                self.queue.add_after(("policy", name), self._report_window())
            else:
                self.queue.add(("policy", name))
        elif kind == "ippool":
            self.queue.add(("ippool", name))
            if event.type != "MODIFIED":  # a pool came or went: the others' overlap changed
                self.enqueue_all("ippool", r.IP_POOLS)
        elif kind == "ipallocation":
            pool = (obj.get("spec") or {}).get("pool")
            if pool:
                self._soon("ippool", [str(pool)])
        elif kind == "class":
            label = (obj.get("metadata", {}).get("labels") or {}).get(LABEL_TOPOLOGY)
            if label:
                # the label holds the name cut to 63 characters: map it back to every
                # known topology it may stand for
                names = [
                    n for n in self._names(r.NETWORK_TOPOLOGIES) if n[:63].rstrip("-.") == label
                ]
                for topo in names or [label]:
                    self.queue.add(("topology", topo))
        elif kind == "agentpod":
            node = (obj.get("spec") or {}).get("nodeName")
            if node:
                self.queue.add(("capability", str(node)))
        else:  # claims, attachments, nodes: anything that can release a revision
            if kind == "node":
                self._node_report(event, str(name))
                self.queue.add(("capability", name))
            self._soon("revision", self._releasable_revisions())
            if kind == "claim" and event.type == "DELETED":  # its addresses are collectable
                self._soon("ippool", self._names(r.IP_POOLS))

    # --- processing --------------------------------------------------------------------

    def handlers(self) -> dict[str, Callable[[str], Any]]:
        return {
            "topology": self.topologies.reconcile,
            "revision": self.revisions.reconcile,
            "plugin": self.plugins.reconcile,
            "policy": self.policies.reconcile,
            "ippool": self.pools.reconcile,
            "capability": self.capabilities.reconcile,
        }

    def process_one(self, timeout: float | None = None) -> bool:
        key = self.queue.get(timeout)
        if key is None:
            return False
        kind, name = str(key[0]), str(key[1])  # type: ignore[index]
        try:
            result = self.handlers()[kind](name)
            self.queue.forget(key)
            if kind in ("revision", "ippool", "capability") and result is False:
                self.queue.add_after(key, self.resync)
            RECONCILES.labels(kind=kind, result="ok").inc()
        except (ApiFailure, RetryLater) as exc:
            delay = self.queue.retry(key)
            RECONCILES.labels(kind=kind, result="retry").inc()
            log.info("reconcile retry kind=%s name=%s error=%s delay=%.2f", kind, name, exc, delay)
        except Exception:
            delay = self.queue.retry(key)
            RECONCILES.labels(kind=kind, result="error").inc()
            log.exception("reconcile failed kind=%s name=%s delay=%.2f", kind, name, delay)
        finally:
            self.processed += 1
            self.queue.done(key)
        return True

    def _worker(self) -> None:
        while not self._stop.is_set():
            self.process_one(timeout=0.5)

    def _watch(
        self,
        kind: str,
        res: Any,
        label_selector: str | None = None,
        field_selector: str | None = None,
        namespace: str | None = None,
    ) -> None:
        lw = ListWatch(
            self.cluster,
            res,
            namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            timeout_seconds=60,
        )
        self._watches.append(lw)

        def loop() -> None:
            # ListWatch retries API failures itself; anything else (a bug, a decode error)
            # is logged and the list-watch restarted, so one bad event never leaves the
            # controller deaf to a resource
            while not self._stop.is_set():
                try:
                    for event in lw.events():
                        self._on_event(kind, event)
                    return
                except Exception:
                    log.exception("watch loop failed resource=%s; restarting", res.plural)
                    self._stop.wait(1.0)

        self._spawn(loop, f"watch-{res.plural}")

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def _resync_loop(self) -> None:
        """Re-enqueue everything known every ``resync`` seconds; one failed pass is logged
        and never ends the loop (a dead resync would leave missed events unrepaired)."""
        while not self._stop.wait(self.resync):
            try:
                self.enqueue_all("topology", r.NETWORK_TOPOLOGIES)
                self.enqueue_all("revision", r.NETWORK_TOPOLOGY_REVISIONS)
                self.enqueue_all("plugin", r.NETWORK_PLUGINS)
                self.enqueue_all("policy", r.DEVICE_EXPOSURE_POLICIES)
                self.enqueue_all("ippool", r.IP_POOLS)
                self.enqueue_all("capability", r.NODES)
            except Exception:
                log.exception("resync pass failed; continuing")

    def start(self) -> None:
        self._stop.clear()
        self._watch("topology", r.NETWORK_TOPOLOGIES)
        self._watch("revision", r.NETWORK_TOPOLOGY_REVISIONS)
        self._watch("plugin", r.NETWORK_PLUGINS)
        self._watch("policy", r.DEVICE_EXPOSURE_POLICIES)
        self._watch("ippool", r.IP_POOLS)
        self._watch("ipallocation", r.IP_ALLOCATIONS)
        self._watch("class", r.DEVICE_CLASSES, f"{LABEL_MANAGED_BY}={MANAGED_BY}")
        self._watch("slice", r.RESOURCE_SLICES, field_selector=f"spec.driver={DRIVER}")
        self._watch("claim", r.RESOURCE_CLAIMS)
        self._watch("attachment", r.NETWORK_ATTACHMENT_STATUSES)
        self._watch("node", r.NODES)
        if self.agent_pods is not None:
            # namespaced: the chart grants the controller Pods of its release namespace only
            where = self.agent_pods
            self._watch("agentpod", r.PODS, where.selector, namespace=where.namespace)
        for i in range(self.workers):
            self._spawn(self._worker, f"worker-{i}")
        self._spawn(self._resync_loop, "resync")
        log.info("controller started workers=%d resync=%.1f", self.workers, self.resync)

    def workers_alive(self) -> tuple[bool, str]:
        """Liveness: every thread this controller started is still running (true before it
        started: a replica waiting for the Lease is alive)."""
        dead = [t.name for t in self._threads if not t.is_alive()]
        if dead and not self._stop.is_set():
            return False, f"threads stopped: {', '.join(sorted(dead))}"
        return True, ""

    def stop(self) -> None:
        self._stop.set()
        for lw in self._watches:
            lw.stop()
        self.queue.shutdown()
        for t in self._threads:
            t.join(timeout=5)
        self._watches.clear()
        self._threads.clear()
        self._listed.clear()
        self._report_values.clear()
        self._reports.clear()
        self._policy_generations.clear()
        log.info("controller stopped")


def _version(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")
