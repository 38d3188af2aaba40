"""NetworkTopology reconciler: topology → immutable revision + DeviceClasses + status.

Level-triggered: :meth:`TopologyReconciler.reconcile` reads the current topology, the
plugins and what already exists, and converges (design §4.5):

1. compile the topology (with its UID) against the NetworkPlugins in the cluster;
2. on diagnostics: report them in status (Ready=False, reason codes, observedGeneration)
   and touch nothing else — a Ready revision and its classes are never rewritten;
3. create the revision named by the digest, or adopt an identical existing one; a
   same-name revision with different content is an ``E_CONFLICT`` (never overwritten);
4. create or adopt one DeviceClass per root, bound to the revision's UID (conflicting
   pre-existing classes are ``E_CONFLICT``);
5. mark the revision Ready, make each root's stable class follow it
   (:mod:`.stable_classes`; a name another topology holds is an ``E_CONFLICT``), then the
   topology Ready with revision ref and root classes;
6. count the published devices each root's class selects (:mod:`.device_matches`) and
   report them as ``status.deviceMatches`` and the ``DevicesMatched`` condition (False with
   ``E_NO_MATCHING_DEVICES`` and a Warning Event when a class selects none). The count is
   made from the slices the controller watches; a slice change re-enqueues every topology.

When the API server refuses a generated object (422 Invalid, 403 from admission or RBAC)
the topology reports ``Rejected`` with the server's message and the key is retried with
backoff.

A later semantic change yields a new digest and thus a new revision; the old one stays
until the revision GC proves it released.

Settled topologies. Steps 1–5 of a topology that reached Ready are repeated only when an
input moved: with ``inputs`` (the controller's watch caches) a successful reconcile keeps
the fingerprint of what it started from — the topology's resourceVersion, every
NetworkPlugin's, its revisions' and its classes' — and a later reconcile that finds the same
fingerprint only recounts the devices (step 6) and reports — and not even that when no
slice event arrived since its last count (``slices_version``). A resync, or a slice event that
enqueues every topology, then costs no compile and no API call for a topology that changed
nothing (at rest with 300 topologies every resync made ~7 requests and a compile per
topology: 41 s of controller CPU and 1 GB of API responses a minute; benchmarks/scale.py).
Anything the fingerprint covers that moves — an edit, a plugin, a revision or class changed
or deleted by anyone — arrives on a watch and makes the next reconcile a full one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dmn.api.cluster import AlreadyExists, Cluster, Forbidden, Invalid, NotFound
from dmn.api.cluster import resources as r
from dmn.api.cluster.events import EventRecorder
from dmn.api.device_selectors import SelectorCache
from dmn.api.identity import LABEL_MANAGED_BY, MANAGED_BY, REVISION_FINALIZER
from dmn.api.served_yaml import served_document
from dmn.controller.compile.compiler import CompiledTopology, compile_topology
from dmn.controller.compile.plugin_sources import (
    Converted,
    StoredStateCache,
    plugins_from_objects,
)
from dmn.controller.conditions import condition, diagnostic_entries, set_condition, summary
from dmn.controller.device_matches import CONDITION as DEVICES_MATCHED
from dmn.controller.device_matches import (
    ClassMatch,
    SliceMatchMemo,
    count_matches,
    matches_condition,
)
from dmn.controller.stable_classes import StableClasses
from dmn.controller.workqueue import RetryLater
from dmn.interpreter.checker import CleanVerdicts
from dmn.interpreter.diagnostics import Code, Diagnostic
from dmn.observability.metrics import EVENTS_RECORDED
from dmn.opcodes.spec import OpcodeRegistry

log = logging.getLogger(__name__)


class ReconcileConflict(Exception):
    """A pre-existing object conflicts with the generated one.

    ``transient`` conflicts (the wanted revision is still being deleted) are reported and
    then retried with backoff; the others wait for a change of the objects involved.
    """

    def __init__(self, diagnostic: Diagnostic, *, transient: bool = False) -> None:
        super().__init__(diagnostic.message)
        self.diagnostic = diagnostic
        self.transient = transient


def _same_content(existing: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Equal revision specs, ignoring the topology generation that first produced it (a
    later non-semantic edit of the topology has the same digest and adopts the revision)."""

    def strip(spec: dict[str, Any]) -> dict[str, Any]:
        ref = {k: v for k, v in (spec.get("topologyRef") or {}).items() if k != "generation"}
        return {**spec, "topologyRef": ref}

    return strip(existing) == strip(wanted)


def _bound_ref(cls: dict[str, Any]) -> dict[str, Any]:
    for cfg in (cls.get("spec") or {}).get("config") or []:
        params = (cfg.get("opaque") or {}).get("parameters") or {}
        if params.get("kind") == "TopologyRootConfiguration":
            return dict(params.get("revisionRef") or {})
    return {}


def _stale_incarnation(existing: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """A managed class equal to ``wanted`` except for the revision UID it is bound to."""
    labels = existing["metadata"].get("labels") or {}
    if labels.get(LABEL_MANAGED_BY) != MANAGED_BY:
        return False
    have, want = _bound_ref(existing), _bound_ref(wanted)
    if not have or have.get("uid") == want.get("uid"):
        return False
    return bool(have.get("name") == want.get("name") and have.get("digest") == want.get("digest"))


_PLUGIN_REF = re.compile(r"^spec\.steps\[(\d+)\]\.pluginRef\.name$")


def _explain_invalid_plugins(
    diagnostics: list[Diagnostic], topo: dict[str, Any], invalid: dict[str, list[Diagnostic]]
) -> list[Diagnostic]:
    """A reference to a NetworkPlugin that exists but is invalid says why, instead of the
    compiler's plain "not found" (the compiler only sees the valid plugins)."""
    steps = (topo.get("spec") or {}).get("steps") or []
    out: list[Diagnostic] = []
    for d in diagnostics:
        m = _PLUGIN_REF.match(d.path) if d.code is Code.E_REF_UNRESOLVED else None
        name = None
        if m is not None and int(m.group(1)) < len(steps):
            name = ((steps[int(m.group(1))] or {}).get("pluginRef") or {}).get("name")
        if isinstance(name, str) and name in invalid:
            why = summary(invalid[name]) or "it does not parse"
            d = dataclasses.replace(d, message=f"NetworkPlugin {name!r} is invalid: {why}")
        out.append(d)
    return out


#: what :attr:`TopologyReconciler.inputs` answers: the topology as the watch holds it and the
#: fingerprint of every input of steps 1–5 (None: some watch has not listed yet)
Inputs = tuple[dict[str, Any], tuple[Any, ...]]

#: what a topology's own status write may not change for its result to stand for the same
#: inputs (a spec change moves the generation)
_UNCHANGED_BY_STATUS = ("generation", "labels", "annotations", "deletionTimestamp", "finalizers")


def _after_own_write(
    fingerprint: tuple[Any, ...], read: dict[str, Any], stored: dict[str, Any] | None
) -> tuple[Any, ...]:
    """``fingerprint`` (taken when the topology was ``read``) carried over to the version
    this reconcile's own status write ``stored``, when that write is all that happened in
    between: otherwise the write alone would make the next resync a full reconcile, which
    finds nothing to do. When the fingerprint was not of ``read`` (the cache lagged), or
    anything but the status moved meanwhile, it stays as it was, and the next reconcile
    is a full one (pure)."""
    if stored is None:
        return fingerprint
    before, after = read.get("metadata") or {}, stored.get("metadata") or {}
    if not fingerprint or fingerprint[0] != str(before.get("resourceVersion") or ""):
        return fingerprint
    if any(before.get(k) != after.get(k) for k in _UNCHANGED_BY_STATUS):
        return fingerprint
    return (str(after.get("resourceVersion") or ""), *fingerprint[1:])


@dataclass(frozen=True)
class Settled:
    """A topology's last successful reconcile: the fingerprint it started from and what it
    produced (enough to recount and report without compiling)."""

    fingerprint: tuple[Any, ...]
    compiled: CompiledTopology
    revision: dict[str, Any]
    held: dict[str, str]
    #: :attr:`TopologyReconciler.slices_version` when its devices were last counted
    slices: int | None = None


@dataclass
class TopologyReconciler:
    cluster: Cluster
    registry: OpcodeRegistry
    on_revision: Callable[[str], None] = lambda name: None
    #: topology UID -> the revision its latest successful compile produced. Shared with
    #: the revision collector so a revision being published is never collected between
    #: its creation and the topology status naming it.
    latest: dict[str, str] = field(default_factory=dict)
    #: Events about the topologies it rejects (created on first use)
    events: EventRecorder | None = None
    #: the ResourceSlices of this driver the controller watches, or None while that watch
    #: has not listed yet (no count is reported from a partial view)
    published_slices: Callable[[], list[dict[str, Any]] | None] = lambda: None
    selectors: SelectorCache = field(default_factory=SelectorCache)
    slice_counts: SliceMatchMemo = field(default_factory=SliceMatchMemo)
    plugin_objects: StoredStateCache[Converted] = field(default_factory=StoredStateCache)
    #: clean checker verdicts across compiles: a topology is compiled again after its own
    #: status write and on every resync, with the same plugin objects (``plugin_objects``)
    verdicts: CleanVerdicts = field(default_factory=lambda: CleanVerdicts(kept_plugins=64))
    #: the watch caches' view of a topology's inputs (see the module docstring)
    inputs: Callable[[str], Inputs | None] = lambda name: None
    #: moves with every event of the slices ``published_slices`` holds (None: unknown)
    slices_version: Callable[[], int | None] = lambda: None
    settled: dict[str, Settled] = field(default_factory=dict)

    def reconcile(self, name: str) -> None:
        seen = self.inputs(name)
        done = self.settled.get(name)
        if seen is not None and done is not None and done.fingerprint == seen[1]:
            version = self.slices_version()
            if version is not None and version == done.slices:
                # nothing moved since its devices were counted: a count visits every
                # published slice (19,000 at 500 nodes), for every topology, every resync
                return
            del self.settled[name]  # kept again once the recount is reported
            matches = self._device_matches(done.compiled, done.revision)
            stored = self._report_ready(seen[0], done.compiled, done.revision, matches, done.held)
            fingerprint = _after_own_write(done.fingerprint, seen[0], stored)
            self.settled[name] = dataclasses.replace(done, fingerprint=fingerprint, slices=version)
            return
        self.settled.pop(name, None)  # kept again only if this full reconcile succeeds
        self._reconcile(name, seen[1] if seen is not None else None)

    def _reconcile(self, name: str, fingerprint: tuple[Any, ...] | None) -> None:
        stable = StableClasses(self.cluster)
        try:
            topo = self.cluster.get(r.NETWORK_TOPOLOGIES, name)
        except NotFound:
            stable.withdraw(name)
            return
        meta = topo["metadata"]
        if meta.get("deletionTimestamp"):
            # deletion stops publication (the stable classes go at once); saved revisions
            # and their own classes stay until released
            stable.withdraw(name)
            return
        plugin_objs = self.cluster.list(r.NETWORK_PLUGINS).items
        plugins, invalid = plugins_from_objects(plugin_objs, self.plugin_objects)
        result = compile_topology(
            topo, plugins, self.registry, uid=meta["uid"], verdicts=self.verdicts
        )
        if result.compiled is None:
            # again with positions in the served object's YAML rendering (only on failure:
            # rendering and re-parsing is not free, and a Ready topology has no diagnostic)
            source = served_document(topo, "NetworkTopology").source
            result = compile_topology(topo, plugins, self.registry, source=source, uid=meta["uid"])
        if result.compiled is None:
            diagnostics = _explain_invalid_plugins(list(result.diagnostics), topo, invalid)
            self._report_failure(topo, diagnostics, "CompileFailed")
            return
        compiled = result.compiled
        self.latest[meta["uid"]] = compiled.revision_name
        try:
            revision = self._ensure_revision(compiled)
            classes = self._ensure_classes(compiled, revision)
        except ReconcileConflict as exc:
            self._report_failure(topo, [exc.diagnostic], "Conflict")
            if exc.transient:
                raise RetryLater(exc.diagnostic.message) from exc
            return
        except (Invalid, Forbidden) as exc:
            # the API server (schema, CEL compilation, admission, RBAC) refuses what we
            # generated: say so in status instead of retrying silently, and keep retrying
            # with backoff (a fixed webhook or RBAC rule needs no topology edit)
            code = Code.E_SCHEMA if isinstance(exc, Invalid) else Code.E_ACCESS
            rejected = Diagnostic(code, f"the API server rejected a generated object: {exc}")
            self._report_failure(topo, [rejected], "Rejected")
            raise RetryLater(str(exc)) from exc
        self._mark_revision_ready(revision, classes)
        held, conflicts = stable.publish(topo, compiled.device_classes(revision["metadata"]["uid"]))
        if conflicts:
            self._report_failure(topo, conflicts, "Conflict")
            return
        version = self.slices_version()
        matches = self._device_matches(compiled, revision)
        stored = self._report_ready(topo, compiled, revision, matches, held)
        self.on_revision(compiled.revision_name)
        if fingerprint is not None:
            fingerprint = _after_own_write(fingerprint, topo, stored)
            self.settled[name] = Settled(fingerprint, compiled, revision, held, version)

    # --- revision ----------------------------------------------------------------------

    def _ensure_revision(self, compiled: CompiledTopology) -> dict[str, Any]:
        body = dict(compiled.revision)
        body["metadata"] = dict(body["metadata"], finalizers=[REVISION_FINALIZER])
        try:
            created = self.cluster.create(r.NETWORK_TOPOLOGY_REVISIONS, body)
            log.info("revision created name=%s digest=%s", compiled.revision_name, compiled.digest)
            return created
        except AlreadyExists:
            pass
        existing = self.cluster.get(r.NETWORK_TOPOLOGY_REVISIONS, compiled.revision_name)
        spec = existing.get("spec") or {}
        if spec.get("digest") != compiled.digest or not _same_content(
            spec, compiled.revision["spec"]
        ):
            raise ReconcileConflict(
                Diagnostic(
                    Code.E_CONFLICT,
                    f"revision {compiled.revision_name} exists with different content "
                    f"(digest {spec.get('digest')}, expected {compiled.digest}): an earlier "
                    "topology of this name whose revision is still held, or a name collision",
                    path="metadata.name",
                )
            )
        if existing["metadata"].get("deletionTimestamp"):
            raise ReconcileConflict(
                Diagnostic(
                    Code.E_CONFLICT,
                    f"revision {compiled.revision_name} is being deleted; retrying",
                    path="metadata.name",
                ),
                transient=True,
            )
        if REVISION_FINALIZER not in (existing["metadata"].get("finalizers") or []):
            existing["metadata"]["finalizers"] = [
                *(existing["metadata"].get("finalizers") or []),
                REVISION_FINALIZER,
            ]
            existing = self.cluster.replace(r.NETWORK_TOPOLOGY_REVISIONS, existing)
        return existing

    # --- classes -----------------------------------------------------------------------

    def _ensure_classes(self, compiled: CompiledTopology, revision: dict[str, Any]) -> list[str]:
        names: list[str] = []
        for wanted in compiled.device_classes(revision["metadata"]["uid"]):
            name = wanted["metadata"]["name"]
            names.append(name)
            try:
                self.cluster.create(r.DEVICE_CLASSES, wanted)
                continue
            except AlreadyExists:
                pass
            existing = self.cluster.get(r.DEVICE_CLASSES, name)
            labels = existing["metadata"].get("labels") or {}
            if _stale_incarnation(existing, wanted):
                # ours, for this very revision name and digest, but bound to an earlier
                # incarnation of the revision that was collected meanwhile (a topology
                # that changed back while the collector ran): replace it
                log.info("stale class replaced name=%s", name)
                with contextlib.suppress(NotFound):
                    self.cluster.delete(r.DEVICE_CLASSES, name, uid=existing["metadata"].get("uid"))
                raise RetryLater(f"DeviceClass {name} was bound to a collected revision")
            if labels.get(LABEL_MANAGED_BY) != MANAGED_BY or existing.get("spec") != wanted["spec"]:
                raise ReconcileConflict(
                    Diagnostic(
                        Code.E_CONFLICT,
                        f"DeviceClass {name} exists and differs from the generated class; "
                        "it is not overwritten",
                        path="spec.steps",
                    )
                )
        return names

    def _mark_revision_ready(self, revision: dict[str, Any], classes: list[str]) -> None:
        status = revision.get("status") or {}
        generation = revision["metadata"].get("generation")
        conds = set_condition(
            status.get("conditions"),
            "Ready",
            True,
            "ClassesPublished",
            f"{len(classes)} DeviceClass(es) verified",
            generation,
        )
        if status.get("phase") == "Ready" and status.get("conditions") == conds:
            return
        self.cluster.patch(
            r.NETWORK_TOPOLOGY_REVISIONS,
            revision["metadata"]["name"],
            {"status": {"phase": "Ready", "observedGeneration": generation, "conditions": conds}},
            status=True,
        )

    # --- devices the classes select ----------------------------------------------------

    def _device_matches(
        self, compiled: CompiledTopology, revision: dict[str, Any]
    ) -> list[ClassMatch] | None:
        slices = self.published_slices()
        if slices is None:
            return None
        classes = compiled.device_classes(revision["metadata"]["uid"])
        return count_matches(classes, slices, self.selectors, self.slice_counts)

    # --- topology status ---------------------------------------------------------------

    def _report_ready(
        self,
        topo: dict[str, Any],
        compiled: CompiledTopology,
        revision: dict[str, Any],
        matches: list[ClassMatch] | None = None,
        stable: dict[str, str] | None = None,
    ) -> dict[str, Any] | None:
        """Write the Ready status; the topology as the write stored it (None: nothing to
        write)."""
        generation = topo["metadata"].get("generation")
        status = topo.get("status") or {}
        ref = compiled.revision_ref(revision["metadata"]["uid"]).to_api()
        roots = []
        for root in compiled.revision["spec"]["roots"]:
            entry = {"rootStep": root["rootStep"], "deviceClassName": root["deviceClassName"]}
            if stable and root["rootStep"] in stable:
                entry["stableDeviceClassName"] = stable[root["rootStep"]]
            roots.append(entry)
        conds = set_condition(
            status.get("conditions"),
            "Ready",
            True,
            "RevisionReady",
            f"revision {compiled.revision_name} is Ready",
            generation,
        )
        new: dict[str, Any] = {
            "observedGeneration": generation,
            "conditions": conds,
            "revision": ref,
            "roots": roots,
            "diagnostics": None,
        }
        newly_unmatched: tuple[str, str] | None = None
        if matches is not None:
            ok, reason, message = matches_condition(matches)
            before = condition(topo, DEVICES_MATCHED)
            new["conditions"] = set_condition(
                conds, DEVICES_MATCHED, ok, reason, message, generation
            )
            new["deviceMatches"] = [m.to_api() for m in matches]
            was = (before or {}).get("status"), (before or {}).get("reason")
            if not ok and was != ("False", reason):
                newly_unmatched = (reason, message)
        if all(status.get(k) == v for k, v in new.items() if v is not None) and not status.get(
            "diagnostics"
        ):
            return None
        if newly_unmatched is not None:
            self._warn(topo, *newly_unmatched)
        return self.cluster.patch(
            r.NETWORK_TOPOLOGIES, topo["metadata"]["name"], {"status": new}, status=True
        )

    def _warn(self, topo: dict[str, Any], reason: str, message: str) -> None:
        if self.events is None:
            self.events = EventRecorder(self.cluster, "dra-multi-network-controller")
        if self.events.record(topo, "Warning", reason, message) is not None:
            EVENTS_RECORDED.labels(kind="NetworkTopology", reason=reason).inc()

    def _event(self, topo: dict[str, Any], diagnostics: list[Diagnostic]) -> None:
        """One Warning Event per distinct reason code of a newly reported failure."""
        by_code: dict[str, list[Diagnostic]] = {}
        for diag in diagnostics:
            by_code.setdefault(diag.code.value, []).append(diag)
        for code, group in by_code.items():
            self._warn(topo, code, summary(group))

    def _report_failure(
        self, topo: dict[str, Any], diagnostics: list[Diagnostic], reason: str
    ) -> None:
        """Failure status for the current generation; revision/roots of the last Ready
        revision are kept, so workloads already pinned to it remain described."""
        generation = topo["metadata"].get("generation")
        status = topo.get("status") or {}
        conds = set_condition(
            status.get("conditions"), "Ready", False, reason, summary(diagnostics), generation
        )
        new = {
            "observedGeneration": generation,
            "conditions": conds,
            "diagnostics": diagnostic_entries(diagnostics),
        }
        if all(status.get(k) == v for k, v in new.items()):
            return
        log.info(
            "topology rejected name=%s generation=%s codes=%s",
            topo["metadata"]["name"],
            generation,
            ",".join(d.code.value for d in diagnostics),
        )
        self._event(topo, diagnostics)
        self.cluster.patch(
            r.NETWORK_TOPOLOGIES, topo["metadata"]["name"], {"status": new}, status=True
        )
