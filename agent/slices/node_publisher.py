"""Publishes this node's ResourceSlices and republishes them whenever their inputs change.

Why here: publication was written twice — once in the agent (once, at start) and once in
the lab (with republishing) — and the two disagreed (the lab planned without the Node's
labels and failed when the policy CRD was absent). :class:`NodeSlicePublisher` is the one
implementation; ``dmn node`` and the lab both run it.

Inputs and triggers. A pass scans nothing by itself: it plans the pool with
:class:`~dmn.agent.slices.NodePublication` from the last inventory, the
DeviceExposurePolicies, the Node's labels and the devices allocated in ResourceClaim
status (allocated devices stay published, pinned with their previous declaration; the
claims come from the publisher's claim watch (:class:`~.pins.ClaimPins`) when the plan
changes no declaration, else from a list read after the policies), writes
the slices whose stored spec or labels differ from the plan (a slice already stored as
planned is not rewritten: in a Pod storm every claim change and every child created on a
NIC triggered a pass, and each rewrote every slice with three API calls, in the process
that serves the runtime's hooks, and woke every slice watcher), deletes slices the pool no
longer has and verifies the read-back (a server that drops fields switches publication to
degraded). Triggers: a DeviceExposurePolicy or
ResourceClaim watch event; an inventory change seen by the
:class:`~dmn.host.kernel_events.ChangeMonitor` (rtnetlink, udev), which rescans the
inventory first; and a periodic resync. Events are coalesced into one pass, and a pass
follows the previous one after ``coalesce`` seconds at the earliest (default 1 s): in a Pod
storm claim events arrive several times a second, and back-to-back passes (each lists the
slices, every ResourceClaim, the policies and the Node) competed with the runtime's hooks
in the agent's process; a trigger during the pause is served by the pass after it. A
DeviceExposurePolicy change (rare, and what an administrator waits for) ends the pause.

Contract: :meth:`NodeSlicePublisher.publish` is synchronous and returns the stored slices
(callers use it once at start so a node never serves before its slices exist);
:meth:`start`/:meth:`stop` run the triggers in background threads. A failed pass is logged
and retried on the next trigger or resync, never fatal. :attr:`inventory` and
``publication.last`` are what the node services read as the node's devices; ``allocated``
is the set of the pool's devices the last pass found allocated. With ``state_file`` (in
the agent's state directory) the publication state is restored at construction and saved
after every pass that wrote the pool (:mod:`.publication_state`): a restarted agent keeps
its pinned declarations and publishes above its last generation. Listeners added with
:meth:`add_listener` are called after every pass and every rescan (also when the API
server could not be written), from the publisher's thread: the agent's device health
report follows the inventory through them.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from dmn.agent.inventory.facts import Inventory
from dmn.agent.personas.build import node_selector_matches
from dmn.agent.personas.status_report import report_policy_statuses
from dmn.agent.slices.pins import ClaimPins, allocated_devices
from dmn.agent.slices.policy_reader import PolicyReader
from dmn.agent.slices.publication import TAINT_GRACE_S, NodePublication
from dmn.agent.slices.publication_state import load_publication, save_publication
from dmn.api.cluster import AlreadyExists, ApiFailure, Cluster, ListWatch, NotFound
from dmn.api.cluster import resources as r
from dmn.api.cluster.access import WatchEvent
from dmn.api.cluster.events import EventRecorder
from dmn.api.cluster.listwatch import SYNCED
from dmn.api.identity import DRIVER
from dmn.api.policy import DeviceExposurePolicy
from dmn.api.policy_report import ANNOTATION as POLICY_REPORT
from dmn.host.kernel_events import ChangeMonitor
from dmn.host.link_event_filter import LinkEventFilter
from dmn.host.rtnetlink.links import LinkState
from dmn.observability.metrics import PUBLISHED_DEVICES, PUBLISHED_SLICES

log = logging.getLogger(__name__)

Obj = dict[str, Any]


@dataclass(frozen=True)
class InventoryWatch:
    """How to notice inventory changes (see :class:`ChangeMonitor`): ``netns`` whose
    rtnetlink events to follow (None: the agent's own), and whether to listen to udev."""

    netns: str | None = None
    udev: bool = True
    uevent_source: str = "udev"
    debounce: float = 0.2
    resync: float = 300.0


class NodeSlicePublisher:
    def __init__(
        self,
        cluster: Cluster,
        node_name: str,
        scan: Callable[[], Inventory],
        *,
        driver: str = DRIVER,
        resync: float = 30.0,
        inventory_watch: InventoryWatch | None = None,
        coalesce: float = 1.0,
        state_file: Path | None = None,
    ) -> None:
        self.cluster = cluster
        self.node_name = node_name
        self.scan = scan
        self.driver = driver
        self.resync = resync
        self.coalesce = coalesce
        self.inventory_watch = inventory_watch
        self.link_events = LinkEventFilter()
        self.inventory = self._scanned(scan())
        self.state_file = state_file
        restored = load_publication(state_file, node_name) if state_file else None
        self.publication = restored or NodePublication(node_name)
        if restored is not None:
            log.info(
                "event=publication-restored node=%s generation=%d pinned=%d",
                node_name,
                restored.publisher.generation,
                len(restored.last.personas) if restored.last else 0,
            )
        self.policies: list[DeviceExposurePolicy] = []
        self.labels: dict[str, str] = {}
        self.node_uid = ""
        self.policy_reader = PolicyReader(cluster)
        self.cordoned = False
        self._policy_report: str | None = None
        self.events = EventRecorder(cluster, "dra-multi-network-node", node_name)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._prompt = threading.Event()  # ends the pause between passes (policies, stop)
        self._rescan = threading.Event()
        self._due = threading.Event()  # a trigger other than a rescan: the pass must run
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._watches: list[ListWatch] = []
        self._monitor: ChangeMonitor | None = None
        self.allocated: frozenset[str] = frozenset()
        self.claim_pins = ClaimPins(driver, node_name)
        #: the slices as the last complete pass stored them (None: read them whole)
        self._stored_slices: dict[str, Obj] | None = None
        self._listeners: list[Callable[[], None]] = []
        self._listeners_lock = threading.Lock()  # not _lock: that one spans API calls

    # --- one pass ------------------------------------------------------------------------

    def _own_slices(self) -> list[Obj]:
        """This node's slices of this driver. The server filters (``spec.nodeName`` and
        ``spec.driver`` are ResourceSlice field selectors): listing every slice made each
        pass read the whole cluster's pools, a cost per node that grew with the node count
        (benchmarks/scale.py). The check here stays for a server that ignores the selector.

        A pass first lists the slices' metadata alone: when the names and resourceVersions
        are those the previous pass stored, its copies are the slices (a resync pass read
        the node's whole pool, 370 KB, every 30 s on every node, to find it unchanged).
        Anything else — a slice changed, deleted or added by someone else, a server that
        ignores the selector, no previous pass — reads the slices whole."""
        selector = f"spec.nodeName={self.node_name},spec.driver={self.driver}"
        known, self._stored_slices = self._stored_slices, None
        if known:
            heads = self.cluster.list(
                r.RESOURCE_SLICES, field_selector=selector, metadata_only=True
            ).items
            versions = {
                str(h["metadata"]["name"]): h["metadata"].get("resourceVersion") for h in heads
            }
            if versions == {n: s["metadata"].get("resourceVersion") for n, s in known.items()}:
                return list(known.values())
        return [
            s
            for s in self.cluster.list(r.RESOURCE_SLICES, field_selector=selector).items
            if (s.get("spec") or {}).get("driver") == self.driver
            and (s.get("spec") or {}).get("nodeName") == self.node_name
        ]

    def _policy_objects(self) -> list[Obj]:
        try:
            return self.policy_reader.read()
        except NotFound:  # CRD not installed: nothing is exposed
            log.warning("event=no-policy-crd resource=%s", r.DEVICE_EXPOSURE_POLICIES.plural)
            return []

    def _policies(self, docs: list[Obj]) -> list[DeviceExposurePolicy]:
        out: list[DeviceExposurePolicy] = []
        for doc in docs:
            try:
                out.append(DeviceExposurePolicy.model_validate(doc))
            except ValidationError as exc:
                name = (doc.get("metadata") or {}).get("name")
                log.warning("event=policy-skipped name=%s error=%s", name, exc.errors()[0]["msg"])
        return out

    def _labels(self) -> dict[str, str]:
        node = self.cluster.get(r.NODES, self.node_name)
        # kept for the agent's ManageEswitch pass: a transition needs a cordoned node
        self.cordoned = bool((node.get("spec") or {}).get("unschedulable"))
        self.node_uid = str((node.get("metadata") or {}).get("uid") or "")
        # this node's policy reports as stored: a pass rewrites them only when they change
        self._policy_report = ((node.get("metadata") or {}).get("annotations") or {}).get(
            POLICY_REPORT
        )
        return dict((node.get("metadata") or {}).get("labels") or {})

    def publish(self) -> list[Obj]:
        """Plan and write the pool once from the current inventory; returns the slices as
        stored. Raises ``ApiFailure`` when the API server cannot be used."""
        with self._lock:
            existing = self._own_slices()
            if existing:
                # a restarted agent publishes above what its previous run left behind
                self.publication.publisher.generation = max(
                    self.publication.publisher.generation,
                    *(int(s["spec"]["pool"]["generation"]) for s in existing),
                )
            # policies (and labels) before claims: a device allocated and then withdrawn by
            # its policy while this pass reads is seen either still exposed or already
            # allocated (in the other order it was neither, was withdrawn, and lost the
            # declaration a pin needs, so the allocated device was never published again)
            policy_docs = self._policy_objects()
            # kept for the agent's ManageEswitch pass, which makes no API call of its own
            self.policies = self._policies(policy_docs)
            self.labels = self._labels()
            now = time.monotonic()
            self.allocated = self._allocated(now)
            plan = self.publication.plan(
                self.inventory,
                self.policies,
                self.labels,
                self.allocated,
                now=now,
            )
            by_name = {str(x["metadata"]["name"]): x for x in existing}
            stored = [
                self._write(owned, by_name.get(str(owned["metadata"]["name"])))
                for owned in (
                    _owned_by_node(doc, self.node_name, self.node_uid) for doc in plan.slices
                )
            ]
            for name in plan.obsolete(s["metadata"]["name"] for s in existing):
                with contextlib.suppress(NotFound):
                    self.cluster.delete(r.RESOURCE_SLICES, name)
            self._stored_slices = {str(s["metadata"]["name"]): s for s in stored}
            PUBLISHED_SLICES.set(len(stored))
            PUBLISHED_DEVICES.set(len(plan.personas.personas))
            if self.publication.verify(plan.slices, stored):
                log.warning("event=slices-degraded node=%s", self.node_name)
            if self.state_file is not None:
                save_publication(self.state_file, self.publication)
            if plan.taints_pending:
                # an unhealthy device still within its grace: look again once it is over
                timer = threading.Timer(TAINT_GRACE_S + 0.1, self._trigger)
                timer.daemon = True
                timer.start()
            concerned = {
                str(p.metadata.get("name", ""))
                for p in self.policies
                if node_selector_matches(p.spec.node_selector, self.labels)
            }
            self._policy_report = report_policy_statuses(
                self.cluster,
                self.events,
                plan.personas,
                policy_docs,
                self.node_name,
                concerned,
                self._policy_report,
            )
            log.info(
                "event=slices-published node=%s slices=%d devices=%d generation=%d",
                self.node_name,
                len(stored),
                len(plan.personas.personas),
                self.publication.publisher.generation,
            )
            return stored

    def _allocated(self, now: float) -> frozenset[str]:
        """This node's allocated devices for the pass about to plan. The claim watch's view
        serves when the plan with it changes no declaration (most passes: a claim event, a
        resync, a status change); a plan that would change one needs the claims at least as
        new as the policies just read, so the claims are listed (design §5.6)."""
        cached = self.claim_pins.allocated(now)
        if cached is not None and not self.publication.changes(
            self.inventory, self.policies, self.labels, cached, now=now
        ):
            return cached
        claims = self.cluster.list(r.RESOURCE_CLAIMS).items
        self.claim_pins.confirmed(now)
        return allocated_devices(claims, self.driver, self.node_name)

    def _write(self, doc: Obj, current: Obj | None) -> Obj:
        """The slice as stored after writing ``doc``; ``current`` is this pass's listed copy
        (None: not listed), returned as it is when it already holds what ``doc`` says."""
        if current is not None:
            doc = _with_taint_times(doc, current)
            if _stored_as_planned(current, doc):
                return current
        try:
            return self.cluster.create(r.RESOURCE_SLICES, doc)
        except AlreadyExists:
            current = self.cluster.get(r.RESOURCE_SLICES, doc["metadata"]["name"])
            version = {"resourceVersion": current["metadata"]["resourceVersion"]}
            body = {**doc, "metadata": {**doc["metadata"], **version}}
            return self.cluster.replace(r.RESOURCE_SLICES, body)

    # --- listeners -----------------------------------------------------------------------

    def add_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` after every pass from now on (and once right away)."""
        with self._listeners_lock:
            self._listeners.append(listener)
        self._notify_one(listener)

    def remove_listener(self, listener: Callable[[], None]) -> None:
        with self._listeners_lock:
            if listener in self._listeners:
                self._listeners.remove(listener)

    def _notify(self) -> None:
        with self._listeners_lock:
            listeners = list(self._listeners)
        for listener in listeners:
            self._notify_one(listener)

    @staticmethod
    def _notify_one(listener: Callable[[], None]) -> None:
        try:
            listener()
        except Exception:  # a listener's failure must not stop publication
            log.exception("event=publication-listener-failed")

    # --- triggers ------------------------------------------------------------------------

    def inventory_changed(self, reason: str) -> None:
        """The :class:`ChangeMonitor` callback: rescan, then republish (in the loop) if the
        rescan found the inventory changed."""
        log.info("event=inventory-changed node=%s reason=%s", self.node_name, reason)
        self._rescan.set()
        self._wake.set()

    def _trigger(self) -> None:
        """Ask for a pass whatever a rescan finds."""
        self._due.set()
        self._wake.set()

    def _watch(self, res: r.Resource, prompt: bool = False) -> None:
        # the policies as metadata: the generation is all the watch needs, the pass reads
        # the specs (PolicyReader), and the controller's status writes need not reach every
        # node whole
        metadata_only = res is r.DEVICE_EXPOSURE_POLICIES
        lw = ListWatch(self.cluster, res, timeout_seconds=60, metadata_only=metadata_only)
        self._watches.append(lw)

        # a policy's generation per name: a change of its status alone (the controller's
        # aggregate of the nodes' reports) changes nothing this node publishes, and waking
        # every node on each status write would cost a pass on every node
        generations: dict[str, object] = {}

        # a claim event that leaves this node's pins as they were (created unallocated,
        # reservedFor, the agent's own status write, another node's allocation) starts no
        # pass; in a Pod storm those are most claim events
        def loop() -> None:
            while not self._stop.is_set():
                try:
                    for event in lw.events():
                        if res is r.DEVICE_EXPOSURE_POLICIES and _status_only(event, generations):
                            continue
                        if res is r.RESOURCE_CLAIMS and not self.claim_pins.observe(event):
                            continue
                        self._due.set()
                        self._wake.set()
                        if prompt:
                            self._prompt.set()
                    return
                except Exception:
                    log.exception("event=publication-watch-failed resource=%s", res.plural)
                    self._stop.wait(1.0)

        self._spawn(loop, f"publish-watch-{res.plural}")

    def _loop(self) -> None:
        while not self._stop.is_set():
            woke = self._wake.wait(self.resync)
            if self._stop.is_set():
                return
            self._wake.clear()
            # triggers set _due before _wake: one arriving from here on wakes the next turn
            due = not woke or self._due.is_set()
            if due:
                self._due.clear()
            try:
                if self._rescan.is_set():
                    self._rescan.clear()
                    scanned = self._scanned(self.scan())
                    due = due or scanned != self.inventory
                    self.inventory = scanned
                if due:
                    self.publish()
            except ApiFailure as exc:
                self._due.set()  # the next trigger retries, even a rescan that changes nothing
                log.info("event=publication-retry node=%s error=%s", self.node_name, exc)
            except Exception:
                self._due.set()
                log.exception("event=publication-failed node=%s", self.node_name)
            self._notify()
            self._prompt.wait(self.coalesce)  # triggers meanwhile are kept in _wake
            self._prompt.clear()

    def _scanned(self, inventory: Inventory) -> Inventory:
        """``inventory``, after telling the link event filter which links it reports."""
        names, indexes = inventory_links(inventory)
        self.link_events.watch(names, indexes)
        return inventory

    def _spawn(self, target: Callable[[], None], name: str) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def start(self) -> NodeSlicePublisher:
        self._stop.clear()
        self._watch(r.DEVICE_EXPOSURE_POLICIES, prompt=True)
        self._watch(r.RESOURCE_CLAIMS)
        self._spawn(self._loop, "publish")
        if self.inventory_watch is not None:
            w = self.inventory_watch
            self._monitor = ChangeMonitor(
                self.inventory_changed,
                netns=w.netns,
                udev=w.udev,
                uevent_source=w.uevent_source,
                debounce=w.debounce,
                resync=w.resync,
                relevant=self.link_events.relevant,
            )
            self._monitor.start()
            # the inventory was scanned at construction, before the listeners were bound: a
            # link that came or went in between has no event, so rescan once now they are
            self.inventory_changed("inventory-watch-started")
        return self

    def stop(self) -> None:
        self._stop.set()
        self._trigger()
        self._prompt.set()
        if self._monitor is not None:
            self._monitor.stop()
            self._monitor = None
        for lw in self._watches:
            lw.stop()
        for t in self._threads:
            t.join(timeout=5)
        self._threads.clear()
        self._watches.clear()


def inventory_links(inventory: Inventory) -> tuple[set[str], set[int]]:
    """The names of ``inventory``'s netdevs, representors, followed links and default-route
    links, and the indexes of its netdevs, their masters and their lowers (what protection
    follows)."""
    names = set(inventory.followed_links)
    if isinstance(inventory.default_route_ifnames, frozenset):
        names |= inventory.default_route_ifnames
    indexes: set[int] = set()
    for item in inventory.items.values():
        for netdev in item.netdevs:
            names.add(netdev.ifname)
            if isinstance(netdev.state, LinkState):
                indexes |= {netdev.state.index, netdev.state.master, netdev.state.lower}
        names |= {rep.ifname for rep in item.representors}
        if item.representor is not None:
            names.add(item.representor.ifname)
    return names, indexes


def _status_only(event: WatchEvent, generations: dict[str, object]) -> bool:
    """Whether ``event`` is a MODIFIED of a policy whose ``metadata.generation`` did not move
    (a status write); records the generation it carries."""
    meta = (event.object or {}).get("metadata") or {}
    name = meta.get("name")
    if not name or event.type == SYNCED:
        return False
    if event.type == "DELETED":
        generations.pop(str(name), None)
        return False
    before = generations.get(str(name))
    generations[str(name)] = meta.get("generation")
    return event.type == "MODIFIED" and before is not None and before == meta.get("generation")


def _with_taint_times(doc: Obj, current: Obj) -> Obj:
    """``doc`` with each taint's ``timeAdded`` as the stored slice has it for the same
    device and taint (the API server stamps a taint written without one): a taint that
    stays keeps the time it was first added, and an unchanged slice compares equal."""
    stored: dict[tuple[str, str, str, str], str] = {}
    for device in (current.get("spec") or {}).get("devices") or ():
        for taint in device.get("taints") or ():
            if taint.get("timeAdded"):
                key = (device.get("name", ""), taint.get("key", ""), taint.get("value", ""),
                       taint.get("effect", ""))  # fmt: skip
                stored[key] = taint["timeAdded"]
    if not stored or "devices" not in doc["spec"]:
        return doc
    devices = []
    for device in doc["spec"].get("devices") or ():
        taints = []
        for taint in device.get("taints") or ():
            key = (device["name"], taint["key"], taint.get("value", ""), taint["effect"])
            when = stored.get(key)
            taints.append({**taint, "timeAdded": when} if when and "timeAdded" not in taint
                          else taint)  # fmt: skip
        devices.append({**device, "taints": taints} if taints else device)
    return {**doc, "spec": {**doc["spec"], "devices": devices}}


def _owned_by_node(doc: Obj, node_name: str, node_uid: str) -> Obj:
    """``doc`` owned by its Node, as kubelet plugins' slices are: the garbage collector
    deletes the slices of a Node deleted from the API (its devices are gone with it; no
    agent is left to withdraw them). Without the Node's UID (not read yet) the doc stays
    as planned."""
    if not node_uid:
        return doc
    owner = {
        "apiVersion": "v1",
        "kind": "Node",
        "name": node_name,
        "uid": node_uid,
        "controller": True,
    }
    return {**doc, "metadata": {**doc["metadata"], "ownerReferences": [owner]}}


def _stored_as_planned(current: Obj, doc: Obj) -> bool:
    """The stored slice has the planned spec, every planned label and the planned owner (a
    server that drops or defaults fields never compares equal, so its slice is written as
    before)."""
    if current.get("spec") != doc.get("spec"):
        return False
    owners = (doc.get("metadata") or {}).get("ownerReferences")
    if owners and (current.get("metadata") or {}).get("ownerReferences") != owners:
        return False
    have = (current.get("metadata") or {}).get("labels") or {}
    want = (doc.get("metadata") or {}).get("labels") or {}
    return all(have.get(k) == v for k, v in want.items())
