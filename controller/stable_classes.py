"""One DeviceClass per topology root whose name never changes (issue 37.6).

Every revision has its own classes, named with a digest prefix, so a plugin or topology
edit renames them and a ResourceClaimTemplate naming one would have to be edited each time.
Beside them the controller keeps, per root, a *stable* class named ``<topology>-<root>``
(:func:`~dmn.controller.compile.classes.stable_class_name`) whose selectors and opaque
``TopologyRootConfiguration`` are a copy of the newest Ready revision's class for that root.

Why this is safe: the scheduler copies a class's config into the allocation
(``source: FromClass``) when it allocates, so every allocation pins the revision the stable
class named *at that moment*; the node agent verifies the claim against exactly that
revision (``agent/coordinator/verify.py``) and never reads the class. Switching the class
to a newer revision changes only what later allocations get.

The contract:

* :meth:`StableClasses.publish` is called only after the revision is marked Ready, so a
  stable class never names a revision that is not Ready;
* a class of that name that is not a stable class of this topology is never overwritten:
  another live topology's stable class (two topologies whose names meet, ``a-b`` + ``c``
  and ``a`` + ``b-c``), a per-revision class or someone else's class is an ``E_CONFLICT``;
  a stable class left by a deleted topology of the same name is taken over;
* the classes of roots the newest revision no longer has, and every stable class of a
  deleted topology, are deleted (:meth:`StableClasses.withdraw`);
* the revision a stable class names is retained by the revision collector
  (:func:`pinned_revisions`), whatever the topology's status says.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from dmn.api.cluster import AlreadyExists, Cluster, NotFound
from dmn.api.cluster import resources as r
from dmn.api.identity import (
    ANNOTATION_TOPOLOGY,
    LABEL_MANAGED_BY,
    LABEL_ROOT_STEP,
    LABEL_STABLE_CLASS,
    LABEL_TOPOLOGY_UID,
    MANAGED_BY,
)
from dmn.controller.compile.classes import stable_class_name
from dmn.interpreter.diagnostics import Code, Diagnostic

log = logging.getLogger(__name__)

STABLE_SELECTOR = f"{LABEL_STABLE_CLASS}=true,{LABEL_MANAGED_BY}={MANAGED_BY}"


def is_stable_class(cls: dict[str, Any]) -> bool:
    labels = (cls.get("metadata") or {}).get("labels") or {}
    return labels.get(LABEL_STABLE_CLASS) == "true" and labels.get(LABEL_MANAGED_BY) == MANAGED_BY


def bound_revision(cls: dict[str, Any]) -> dict[str, Any]:
    """The ``revisionRef`` of a class's TopologyRootConfiguration (empty when it has none)."""
    for cfg in (cls.get("spec") or {}).get("config") or []:
        params = (cfg.get("opaque") or {}).get("parameters") or {}
        if params.get("kind") == "TopologyRootConfiguration":
            return dict(params.get("revisionRef") or {})
    return {}


def stable_class(
    revision_class: dict[str, Any], topology: str, topology_uid: str
) -> dict[str, Any]:
    """The stable class of one root: ``revision_class`` (that root's class of the newest
    Ready revision) under the stable name, marked stable and owned by the topology's UID."""
    meta = revision_class["metadata"]
    labels = dict(meta.get("labels") or {})
    root = str(labels[LABEL_ROOT_STEP])
    labels[LABEL_STABLE_CLASS] = "true"
    labels[LABEL_TOPOLOGY_UID] = topology_uid
    annotations = dict(meta.get("annotations") or {})
    annotations[ANNOTATION_TOPOLOGY] = topology
    return {
        "apiVersion": revision_class["apiVersion"],
        "kind": "DeviceClass",
        "metadata": {
            "name": stable_class_name(topology, root),
            "labels": labels,
            "annotations": annotations,
        },
        "spec": copy.deepcopy(revision_class["spec"]),
    }


def _extended_resource_names(topo: dict[str, Any]) -> dict[str, str]:
    """Root step -> the ``extendedResourceName`` the topology gives that root's stable
    class (only the stable class carries it: one name, one class, across revisions)."""
    steps = (topo.get("spec") or {}).get("steps") or []
    return {
        str(s["id"]): str(s["extendedResourceName"])
        for s in steps
        if isinstance(s, dict) and s.get("extendedResourceName") and s.get("id")
    }


def pinned_revisions(classes: Iterable[dict[str, Any]]) -> dict[str, str]:
    """Revision name -> the stable class that names it, over ``classes``."""
    out: dict[str, str] = {}
    for cls in classes:
        if is_stable_class(cls):
            name = bound_revision(cls).get("name")
            if name:
                out[str(name)] = str(cls["metadata"]["name"])
    return out


def _same(existing: dict[str, Any], wanted: dict[str, Any]) -> bool:
    have, want = existing["metadata"], wanted["metadata"]
    return bool(
        existing.get("spec") == wanted["spec"]
        and (have.get("labels") or {}) == want["labels"]
        and (have.get("annotations") or {}) == want["annotations"]
    )


@dataclass
class StableClasses:
    cluster: Cluster

    def publish(
        self, topo: dict[str, Any], revision_classes: list[dict[str, Any]]
    ) -> tuple[dict[str, str], list[Diagnostic]]:
        """Make each root's stable class follow ``revision_classes`` (the classes of the
        topology's newest Ready revision) and delete the stable classes of roots it no
        longer has. Returns root step -> stable class name for the classes it holds, and an
        ``E_CONFLICT`` per name it may not take."""
        name, uid = str(topo["metadata"]["name"]), str(topo["metadata"]["uid"])
        held: dict[str, str] = {}
        conflicts: list[Diagnostic] = []
        extended = _extended_resource_names(topo)
        for revision_class in revision_classes:
            wanted = stable_class(revision_class, name, uid)
            root = str(wanted["metadata"]["labels"][LABEL_ROOT_STEP])
            if root in extended:
                wanted["spec"]["extendedResourceName"] = extended[root]
            problem = self._converge(wanted, name, uid)
            if problem is None:
                held[root] = str(wanted["metadata"]["name"])
            else:
                conflicts.append(problem)
        self.withdraw(name, keep=set(held.values()))
        return held, conflicts

    def _converge(self, wanted: dict[str, Any], topology: str, uid: str) -> Diagnostic | None:
        class_name = str(wanted["metadata"]["name"])
        try:
            self.cluster.create(r.DEVICE_CLASSES, wanted)
            log.info("stable class created name=%s topology=%s", class_name, topology)
            return None
        except AlreadyExists:
            pass
        existing = self.cluster.get(r.DEVICE_CLASSES, class_name)
        owner = self._owner(existing)
        if owner is not None and owner != (topology, uid):
            what = (
                f"the stable DeviceClass of topology {owner[0]!r}" if owner[0] else "another object"
            )
            root = wanted["metadata"]["labels"][LABEL_ROOT_STEP]
            return Diagnostic(
                Code.E_CONFLICT,
                f"the stable DeviceClass name {class_name!r} of root {root!r} is taken by "
                f"{what}; it is not overwritten (rename the topology or the step). The "
                "per-revision class in status.roots[].deviceClassName works meanwhile",
                path="metadata.name",
            )
        if _same(existing, wanted):
            return None
        body = dict(wanted, metadata=dict(wanted["metadata"]))
        body["metadata"]["resourceVersion"] = existing["metadata"].get("resourceVersion")
        self.cluster.replace(r.DEVICE_CLASSES, body)
        log.info(
            "stable class now follows name=%s revision=%s",
            class_name,
            bound_revision(wanted).get("name"),
        )
        return None

    def _owner(self, existing: dict[str, Any]) -> tuple[str, str] | None:
        """Who holds an existing class of the wanted name: (topology, uid) of a live
        topology, ("", "") for anything that is not a stable class, None when it is a stable
        class whose topology is gone (free to take over)."""
        if not is_stable_class(existing):
            return ("", "")
        meta = existing["metadata"]
        topology = str((meta.get("annotations") or {}).get(ANNOTATION_TOPOLOGY, ""))
        uid = str((meta.get("labels") or {}).get(LABEL_TOPOLOGY_UID, ""))
        try:
            live = self.cluster.get(r.NETWORK_TOPOLOGIES, topology) if topology else None
        except NotFound:
            live = None
        if live is None or live["metadata"].get("uid") != uid:
            return None
        if live["metadata"].get("deletionTimestamp"):
            return None
        return (topology, uid)

    def withdraw(self, topology: str, keep: set[str] | None = None) -> None:
        """Delete the stable classes of ``topology`` (by its full name) except ``keep``."""
        for cls in self.cluster.list(r.DEVICE_CLASSES, label_selector=STABLE_SELECTOR).items:
            meta = cls["metadata"]
            if (meta.get("annotations") or {}).get(ANNOTATION_TOPOLOGY) != topology:
                continue
            if keep is not None and meta["name"] in keep:
                continue
            log.info("stable class withdrawn name=%s topology=%s", meta["name"], topology)
            with contextlib.suppress(NotFound):
                self.cluster.delete(r.DEVICE_CLASSES, meta["name"], uid=meta.get("uid"))
