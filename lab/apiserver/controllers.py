"""In-process controllers of the lab API server, run synchronously after every change.

They do what kube-controller-manager and the apiextensions server do in a real cluster, for
the semantics our code depends on:

* garbage collection by ownerReference: a dependent whose owners are all gone (absent, or
  present with another uid) is deleted with background propagation; dangling references
  next to a live owner are removed; owners under foreground deletion delete their dependents
  and lose their ``foregroundDeletion`` finalizer once no ``blockOwnerDeletion`` dependent
  remains. References to unknown kinds, or from a cluster-scoped dependent to a namespaced
  owner, are left alone (the real collector cannot resolve them either);
* namespace lifecycle: a terminating namespace has its contents deleted and disappears once
  empty (``spec.finalizers`` ``kubernetes`` released);
* CustomResourceDefinitions: creating or updating one (re)registers its served versions;
  deleting one deletes every custom resource, then releases the
  ``customresourcecleanup.apiextensions.k8s.io`` finalizer and unregisters the types.

Unlike the real controllers they run before the write returns (under the store lock), so a
test observes their effect immediately; the events they cause are ordinary watch events.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from . import kinds
from .kinds import ResourceType
from .strategy import (
    CRD_CLEANUP_FINALIZER,
    FOREGROUND,
    NAMESPACE_FINALIZER,
    group_of,
    meta_of,
)

log = logging.getLogger(__name__)

Obj = dict[str, Any]
StorageKey = tuple[str, str]
ObjKey = tuple[str, str]


class InProcessControllers:
    """Mixin of :class:`~.store.Store`: the controllers, operating on its locked state."""

    _objects: dict[StorageKey, dict[ObjKey, Obj]]
    _types: dict[tuple[str, str, str], ResourceType]
    _storage_types: dict[StorageKey, ResourceType]
    _by_kind: dict[tuple[str, str], ResourceType]
    _queue: list[tuple[str, Obj]]

    if TYPE_CHECKING:

        def _put(self, rt: ResourceType, obj: Obj, event_type: str, old: Obj | None) -> Obj: ...

        def _remove(self, rt: ResourceType, obj: Obj) -> Obj: ...

        def _delete_locked(
            self, rt: ResourceType, current: Obj, options: Obj
        ) -> tuple[Obj, bool]: ...

        def _commit_update(self, rt: ResourceType, current: Obj, new: Obj) -> Obj: ...

    def _drain(self) -> None:
        """Run the in-process controllers until nothing is left to do (lock held)."""
        while self._queue:
            what, obj = self._queue.pop(0)
            rt = self._by_kind.get((group_of(obj.get("apiVersion", "")), obj.get("kind", "")))
            if rt is None:
                continue
            if what == "changed":
                self._on_changed(rt, obj)
            else:
                self._on_removed(rt, obj)

    def _on_changed(self, rt: ResourceType, obj: Obj) -> None:
        meta = meta_of(obj)
        if meta.get("ownerReferences"):
            self._gc_check(rt, obj)
        deleting = bool(meta.get("deletionTimestamp"))
        if (rt.group, rt.plural) == kinds.CRD.storage_key:
            if deleting:
                self._delete_all_custom(obj)
                self._crd_check(obj)
            else:
                self._register_crd(obj)
        if rt.group == "" and rt.plural == "namespaces" and deleting:
            self._delete_namespace_contents(meta["name"])
            self._namespace_check(meta["name"])
        if deleting and FOREGROUND in (meta.get("finalizers") or []):
            for dep_rt, dep in self._dependents(meta.get("uid", "")):
                self._gc_check(dep_rt, dep)
            self._foreground_check(rt, obj)

    def _on_removed(self, rt: ResourceType, obj: Obj) -> None:
        meta = meta_of(obj)
        uid = meta.get("uid", "")
        for dep_rt, dep in self._dependents(uid):
            self._gc_check(dep_rt, dep)
        for ref in meta.get("ownerReferences") or []:
            owner_rt = self._by_kind.get((group_of(ref.get("apiVersion", "")), ref.get("kind", "")))
            if owner_rt is None:
                continue
            owner = self._objects.get(owner_rt.storage_key, {}).get(
                (meta.get("namespace", "") if owner_rt.namespaced else "", ref.get("name", ""))
            )
            if owner is not None and FOREGROUND in (meta_of(owner).get("finalizers") or []):
                self._foreground_check(owner_rt, owner)
        namespace = meta.get("namespace", "")
        if rt.namespaced and namespace:
            ns = self._objects[kinds.NAMESPACES.storage_key].get(("", namespace))
            if ns is not None and meta_of(ns).get("deletionTimestamp"):
                self._namespace_check(namespace)
        if rt.custom:
            crd = self._objects[kinds.CRD.storage_key].get(("", f"{rt.plural}.{rt.group}"))
            if crd is not None and meta_of(crd).get("deletionTimestamp"):
                self._crd_check(crd)
        if (rt.group, rt.plural) == kinds.CRD.storage_key:
            self._unregister_custom(obj)

    def _dependents(self, uid: str) -> Iterator[tuple[ResourceType, Obj]]:
        if not uid:
            return
        for key, objs in list(self._objects.items()):
            dep_rt = self._storage_types.get(key)
            if dep_rt is None:
                continue
            for obj in list(objs.values()):
                refs = meta_of(obj).get("ownerReferences") or []
                if any(ref.get("uid") == uid for ref in refs):
                    yield dep_rt, obj

    def _gc_check(self, rt: ResourceType, dep: Obj) -> None:
        meta = meta_of(dep)
        current = self._objects.get(rt.storage_key, {}).get(
            (meta.get("namespace", ""), meta["name"])
        )
        if current is None or meta_of(current).get("uid") != meta.get("uid"):
            return
        dep, meta = current, meta_of(current)
        solid, dangling, waiting = [], [], []
        for ref in meta.get("ownerReferences") or []:
            owner_rt = self._by_kind.get((group_of(ref.get("apiVersion", "")), ref.get("kind", "")))
            if owner_rt is None or (owner_rt.namespaced and not rt.namespaced):
                solid.append(ref)  # unresolvable or invalid: the real GC leaves these alone
                continue
            owner = self._objects.get(owner_rt.storage_key, {}).get(
                (meta.get("namespace", "") if owner_rt.namespaced else "", ref.get("name", ""))
            )
            if owner is None or meta_of(owner).get("uid") != ref.get("uid"):
                dangling.append(ref)
            elif meta_of(owner).get("deletionTimestamp") and FOREGROUND in (
                meta_of(owner).get("finalizers") or []
            ):
                waiting.append(ref)
            else:
                solid.append(ref)
        if not dangling and not waiting:
            return
        if not solid:
            policy = "Foreground" if waiting else "Background"
            log.debug("gc delete kind=%s name=%s policy=%s", rt.kind, meta["name"], policy)
            self._delete_locked(rt, dep, {"propagationPolicy": policy})
            return
        gone = {id(r) for r in dangling + waiting}
        new = copy.deepcopy(dep)
        meta_of(new)["ownerReferences"] = [
            copy.deepcopy(r) for r in meta["ownerReferences"] if id(r) not in gone
        ]
        self._put(rt, new, "MODIFIED", dep)

    def _orphan_dependents(self, uid: str) -> None:
        for dep_rt, dep in list(self._dependents(uid)):
            new = copy.deepcopy(dep)
            refs = [r for r in meta_of(new).get("ownerReferences") or [] if r.get("uid") != uid]
            if refs:
                meta_of(new)["ownerReferences"] = refs
            else:
                meta_of(new).pop("ownerReferences", None)
            self._put(dep_rt, new, "MODIFIED", dep)

    def _foreground_check(self, rt: ResourceType, owner: Obj) -> None:
        meta = meta_of(owner)
        current = self._objects.get(rt.storage_key, {}).get(
            (meta.get("namespace", ""), meta["name"])
        )
        if current is None or FOREGROUND not in (meta_of(current).get("finalizers") or []):
            return
        uid = meta_of(current).get("uid", "")
        for _dep_rt, dep in self._dependents(uid):
            for ref in meta_of(dep).get("ownerReferences") or []:
                if ref.get("uid") == uid and ref.get("blockOwnerDeletion"):
                    return
        self._drop_finalizer(rt, current, FOREGROUND)

    def _drop_finalizer(self, rt: ResourceType, obj: Obj, finalizer: str) -> None:
        new = copy.deepcopy(obj)
        meta = meta_of(new)
        meta["finalizers"] = [f for f in meta.get("finalizers") or [] if f != finalizer]
        if not meta["finalizers"]:
            del meta["finalizers"]
        self._commit_update(rt, obj, new)

    def _delete_namespace_contents(self, namespace: str) -> None:
        for key, objs in list(self._objects.items()):
            rt = self._storage_types.get(key)
            if rt is None or not rt.namespaced:
                continue
            for (ns, _name), obj in list(objs.items()):
                if ns == namespace and not meta_of(obj).get("deletionTimestamp"):
                    self._delete_locked(rt, obj, {})

    def _namespace_check(self, namespace: str) -> None:
        ns_obj = self._objects[kinds.NAMESPACES.storage_key].get(("", namespace))
        if ns_obj is None or not meta_of(ns_obj).get("deletionTimestamp"):
            return
        for key, objs in self._objects.items():
            rt = self._storage_types.get(key)
            if rt is not None and rt.namespaced and any(ns == namespace for ns, _ in objs):
                return
        new = copy.deepcopy(ns_obj)
        spec = new.setdefault("spec", {})
        spec["finalizers"] = [f for f in spec.get("finalizers") or [] if f != NAMESPACE_FINALIZER]
        if not spec["finalizers"]:
            del spec["finalizers"]
        self._commit_update(kinds.NAMESPACES, ns_obj, new)

    def _custom_types_of(self, crd: Obj) -> ResourceType | None:
        spec = crd.get("spec") or {}
        return self._storage_types.get(
            (spec.get("group", ""), (spec.get("names") or {}).get("plural", ""))
        )

    def _delete_all_custom(self, crd: Obj) -> None:
        rt = self._custom_types_of(crd)
        if rt is None or not rt.custom:
            return
        for obj in list(self._objects.get(rt.storage_key, {}).values()):
            if not meta_of(obj).get("deletionTimestamp"):
                self._delete_locked(rt, obj, {})

    def _crd_check(self, crd: Obj) -> None:
        rt = self._custom_types_of(crd)
        if rt is not None and rt.custom and self._objects.get(rt.storage_key):
            return
        current = self._objects[kinds.CRD.storage_key].get(("", meta_of(crd)["name"]))
        if current is not None and CRD_CLEANUP_FINALIZER in (
            meta_of(current).get("finalizers") or []
        ):
            self._drop_finalizer(kinds.CRD, current, CRD_CLEANUP_FINALIZER)

    def _register_crd(self, crd: Obj) -> None:
        served = kinds.from_crd(crd)
        if not served:
            return
        key = served[0].storage_key
        existing = self._storage_types.get(key)
        if existing is not None and not existing.custom:
            log.warning("crd shadows a built-in type crd=%s", meta_of(crd).get("name"))
            return
        for stale in [k for k, t in self._types.items() if t.storage_key == key]:
            del self._types[stale]
        storage_version = next(
            (v["name"] for v in crd["spec"]["versions"] if v.get("storage")), served[0].version
        )
        storage_rt = next((t for t in served if t.version == storage_version), served[0])
        for served_rt in served:
            self._types[(served_rt.group, served_rt.version, served_rt.plural)] = served_rt
        self._storage_types[key] = storage_rt
        if existing is not None:
            self._by_kind.pop((existing.group, existing.kind), None)
        self._by_kind[(storage_rt.group, storage_rt.kind)] = storage_rt
        self._objects.setdefault(key, {})

    def _unregister_custom(self, crd: Obj) -> None:
        rt = self._custom_types_of(crd)
        if rt is None or not rt.custom:
            return
        for key in [k for k, t in self._types.items() if t.storage_key == rt.storage_key]:
            del self._types[key]
        self._storage_types.pop(rt.storage_key, None)
        self._by_kind.pop((rt.group, rt.kind), None)
        self._objects.pop(rt.storage_key, None)
