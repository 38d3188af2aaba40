"""The lab API server's object store: Kubernetes storage semantics over an in-memory map.

One global ``resourceVersion`` counter orders every change; each change appends one watch
event to a bounded history, so a watch can resume from any version still in that history and
gets 410 Expired for older ones. Stored objects are never mutated after commit (a change
replaces the dict), which lets readers and watch streams share them without copying.

Semantics implemented here (the HTTP layer only translates):

* create: name or ``generateName``, 409 AlreadyExists, the namespace must exist and not be
  terminating, ``uid``/``creationTimestamp``/``generation``; ``resourceVersion`` must not be set.
* update and patch: optimistic concurrency (409 Conflict on a stale ``resourceVersion``; a
  custom resource PUT must carry one). The precondition is only what the *request* names: a
  PUT body's ``metadata.resourceVersion``, a merge or strategic patch's, a JSON patch's
  add/replace of ``/metadata/resourceVersion``. A patch that names none is applied to the
  newest object again when another write lands first, never answered 409 (the merged
  result always carries the stored version, so it is no precondition). The status
  subresource split (main-resource writes keep the old status, ``/status`` writes keep
  everything but status), ``generation`` bumped only when something outside metadata (and
  outside status, where status is a subresource) changed, no-op writes neither bump the
  version nor emit an event, no new finalizers once deletion started, and the object
  disappears when its last finalizer goes.
* delete: preconditions, finalizers → ``deletionTimestamp`` (+ generation bump), graceful
  deletion of Pods bound to a node (the kubelet finishes it with ``gracePeriodSeconds=0``),
  propagation ``Background`` (default), ``Foreground`` and ``Orphan``.
* in-process controllers (:mod:`.controllers`), run synchronously after every change under
  the store lock: ownerReference garbage collection, foreground deletion, the namespace
  lifecycle and CRD registration/cleanup. Per-kind rules live in :mod:`.strategy`.
* custom resources: pruning of unknown fields (warning, or 400 with
  ``fieldValidation=Strict``), defaults, structural schema validation → 422 Invalid.

Admission (mutating then validating) runs outside the lock; the write then commits only if the
object did not change meanwhile (patches retry, like the real server's GuaranteedUpdate).
"""

from __future__ import annotations

import copy
import datetime as dt
import logging
import random
import threading
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

from . import errors, kinds, patches, schema
from .builtin_schema import patch_merge_keys, validate_builtin
from .cel_rules import rule_evaluator
from .controllers import InProcessControllers
from .errors import ApiError
from .identity import LAB_ADMIN, UserInfo
from .kinds import ResourceType
from .selectors import FieldRequirement, Requirement, fields_match, labels_match
from .strategy import (
    FOREGROUND,
    check_preconditions,
    drop_deallocated_status_devices,
    finalizers_of,
    grace_period,
    group_of,
    meta_of,
    non_metadata,
    now_rfc3339,
    prepare_create,
    set_condition,
    stamp_device_taints,
    validate_crd,
    validate_metadata,
    validate_resource_claim_update,
)

log = logging.getLogger(__name__)

Obj = dict[str, Any]
StorageKey = tuple[str, str]  # (group, plural)
ObjKey = tuple[str, str]  # (namespace, name)

DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"


@dataclass(frozen=True)
class WatchEvent:
    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    storage: StorageKey
    namespace: str
    obj: Obj
    old: Obj | None


@dataclass(frozen=True)
class AdmissionAttributes:
    """One write as admission sees it (``AdmissionReview.request``)."""

    operation: str  # CREATE, UPDATE, DELETE
    rt: ResourceType
    namespace: str
    name: str
    obj: Obj | None
    old: Obj | None
    subresource: str
    user: UserInfo
    dry_run: bool
    options: Obj = field(default_factory=dict)


class Admission(Protocol):
    def mutate(self, attrs: AdmissionAttributes) -> Obj | None: ...

    def validate(self, attrs: AdmissionAttributes) -> None: ...


@dataclass
class WriteResult:
    obj: Obj
    warnings: list[str] = field(default_factory=list)
    finished: bool = True  # delete: the object is gone (200) rather than pending (202)


class ResourceVersionTooOld(Exception):
    def __init__(self, requested: int, oldest: int) -> None:
        super().__init__(f"too old resource version: {requested} ({oldest})")


class Store(InProcessControllers):
    """In-memory Kubernetes object storage with watch history and built-in controllers."""

    def __init__(self, *, history_limit: int = 4096, admission: Admission | None = None) -> None:
        self._cond = threading.Condition(threading.RLock())
        self._objects: dict[StorageKey, dict[ObjKey, Obj]] = {}
        self._types: dict[tuple[str, str, str], ResourceType] = {}  # (group, version, plural)
        self._storage_types: dict[StorageKey, ResourceType] = {}
        self._by_kind: dict[tuple[str, str], ResourceType] = {}  # (group, kind)
        self._rv = 0
        self._history: deque[WatchEvent] = deque()
        self._history_limit = max(1, history_limit)
        self._compacted = 0  # events with rv <= this are gone from the history
        self._queue: list[tuple[str, Obj]] = []
        self._closed = False
        self.admission = admission
        #: Evaluates ``x-kubernetes-validations`` (None: CEL rules are not checked).
        self.custom_rules: schema.CustomRule | None = rule_evaluator()
        for rt in kinds.BUILTINS:
            self._register(rt)
        for ns in DEFAULT_NAMESPACES:
            self.create(kinds.NAMESPACES, "", {"metadata": {"name": ns}})

    # --- types ---------------------------------------------------------------------------

    def _register(self, rt: ResourceType) -> None:
        self._types[(rt.group, rt.version, rt.plural)] = rt
        self._storage_types.setdefault(rt.storage_key, rt)
        self._by_kind[(rt.group, rt.kind)] = self._storage_types[rt.storage_key]
        self._objects.setdefault(rt.storage_key, {})

    def resolve(self, group: str, version: str, plural: str) -> ResourceType | None:
        with self._cond:
            return self._types.get((group, version, plural))

    def types(self) -> list[ResourceType]:
        with self._cond:
            return list(self._types.values())

    def by_kind(self, api_version: str, kind: str) -> ResourceType | None:
        with self._cond:
            return self._by_kind.get((group_of(api_version), kind))

    @property
    def resource_version(self) -> int:
        with self._cond:
            return self._rv

    # --- reads ---------------------------------------------------------------------------

    def _out(self, rt: ResourceType, obj: Obj, *, deep: bool = True) -> Obj:
        """The object as a client of ``rt`` sees it; ``deep=False`` shares nested values
        with the store (only for callers that serialize without modifying)."""
        result = copy.deepcopy(obj) if deep else dict(obj)
        result["apiVersion"] = rt.api_version
        result["kind"] = rt.kind
        return result

    def _bucket(self, rt: ResourceType) -> dict[ObjKey, Obj]:
        """The objects of a type; 404 when the type is no longer served (CRD deleted)."""
        bucket = self._objects.get(rt.storage_key)
        if bucket is None:
            raise errors.path_not_found()
        return bucket

    def _stored(self, rt: ResourceType, namespace: str, name: str) -> Obj | None:
        return self._bucket(rt).get((namespace if rt.namespaced else "", name))

    def get(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        with self._cond:
            obj = self._stored(rt, namespace, name)
            if obj is None:
                raise errors.not_found(rt.qualified, name, rt.group)
            return self._out(rt, obj)

    def list_objects(
        self,
        rt: ResourceType,
        namespace: str,
        labels: tuple[Requirement, ...] = (),
        fields: tuple[FieldRequirement, ...] = (),
        *,
        limit: int = 0,
        after: ObjKey | None = None,
        copy_items: bool = True,
    ) -> tuple[list[Obj], int, ObjKey | None, int]:
        """Matching objects sorted by (namespace, name): (items, rv, next key, remaining).

        ``copy_items=False`` returns read-only views sharing nested values with the store
        (the HTTP layer serializes them at once).
        """
        readers = rt.readers()
        with self._cond:
            bucket = self._bucket(rt)
            keys = sorted(bucket)
            items: list[Obj] = []
            next_key: ObjKey | None = None
            remaining = 0
            for key in keys:
                if rt.namespaced and namespace and key[0] != namespace:
                    continue
                if after is not None and key <= after:
                    continue
                obj = bucket[key]
                if not labels_match(labels, obj) or not fields_match(fields, readers, obj):
                    continue
                if limit and len(items) >= limit:
                    remaining += 1
                    continue
                items.append(self._out(rt, obj, deep=copy_items))
                next_key = key
            return items, self._rv, (next_key if remaining else None), remaining

    # --- persistence -----------------------------------------------------------------------

    def dump(self) -> dict[str, Any]:
        """Every object and the current version, as one JSON-ready document."""
        with self._cond:
            objects = [
                copy.deepcopy(obj)
                for key in sorted(self._objects)
                for _k, obj in sorted(self._objects[key].items())
            ]
            return {"kind": "LabApiServerState", "resourceVersion": self._rv, "objects": objects}

    def restore(self, state: dict[str, Any]) -> None:
        """Replace all objects with a :meth:`dump`; CRDs first, so their types are served.

        The watch history starts empty at the restored version: a client resuming from an
        older version gets 410 Expired and relists, exactly as after an etcd compaction.
        """
        objects = [o for o in state.get("objects") or [] if isinstance(o, dict)]
        crd_api = kinds.CRD.api_version
        ordered = sorted(
            objects,
            key=lambda o: (
                0
                if (o.get("apiVersion"), o.get("kind")) == (crd_api, "CustomResourceDefinition")
                else 1
            ),
        )
        with self._cond:
            for bucket in self._objects.values():
                bucket.clear()
            for obj in ordered:
                rt = self._by_kind.get(
                    (group_of(str(obj.get("apiVersion", ""))), str(obj.get("kind", "")))
                )
                if rt is None:
                    log.warning("restore skipped object kind=%s", obj.get("kind"))
                    continue
                meta = meta_of(obj)
                ns = meta.get("namespace", "") if rt.namespaced else ""
                self._bucket(rt)[(ns, meta["name"])] = obj
                if rt is kinds.CRD or (rt.group, rt.plural) == kinds.CRD.storage_key:
                    self._register_crd(obj)
            self._rv = max(self._rv, int(state.get("resourceVersion") or 0))
            self._history.clear()
            self._compacted = self._rv
            self._cond.notify_all()

    # --- watch ---------------------------------------------------------------------------

    def snapshot(self, rt: ResourceType, namespace: str) -> tuple[list[Obj], int]:
        """All objects of a type (stored form) and the version they are consistent at."""
        with self._cond:
            objs = [
                obj
                for key, obj in sorted(self._bucket(rt).items())
                if not (rt.namespaced and namespace and key[0] != namespace)
            ]
            return objs, self._rv

    def check_watch_start(self, rv: int) -> None:
        with self._cond:
            if rv < self._compacted:
                raise ResourceVersionTooOld(rv, self._compacted + 1)

    def events_after(self, rv: int, timeout: float) -> list[WatchEvent]:
        """Events newer than ``rv``, waiting up to ``timeout`` seconds for the first one.

        Raises :class:`ResourceVersionTooOld` when events after ``rv`` left the history.
        """
        with self._cond:
            if self._rv <= rv and not self._closed:
                self._cond.wait_for(lambda: self._rv > rv or self._closed, timeout)
            if rv < self._compacted:
                raise ResourceVersionTooOld(rv, self._compacted + 1)
            if not self._history or self._rv <= rv:
                return []
            start = max(0, rv + 1 - self._history[0].rv)
            return [self._history[i] for i in range(start, len(self._history))]

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Wake every waiting watch so that it ends (the server is stopping)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def reopen(self) -> None:
        with self._cond:
            self._closed = False

    # --- low-level commit ----------------------------------------------------------------

    def _append(self, event: WatchEvent) -> None:
        self._history.append(event)
        while len(self._history) > self._history_limit:
            self._compacted = self._history.popleft().rv
        self._cond.notify_all()

    def _put(self, rt: ResourceType, obj: Obj, event_type: str, old: Obj | None) -> Obj:
        self._rv += 1
        meta = meta_of(obj)
        meta["resourceVersion"] = str(self._rv)
        ns = meta.get("namespace", "") if rt.namespaced else ""
        self._bucket(rt)[(ns, meta["name"])] = obj
        self._append(WatchEvent(self._rv, event_type, rt.storage_key, ns, obj, old))
        self._queue.append(("changed", obj))
        return obj

    def _remove(self, rt: ResourceType, obj: Obj) -> Obj:
        self._rv += 1
        final = copy.deepcopy(obj)
        meta = meta_of(final)
        meta["resourceVersion"] = str(self._rv)
        ns = meta.get("namespace", "") if rt.namespaced else ""
        self._objects.get(rt.storage_key, {}).pop((ns, meta["name"]), None)
        self._append(WatchEvent(self._rv, "DELETED", rt.storage_key, ns, final, obj))
        self._queue.append(("removed", final))
        return final

    # --- create --------------------------------------------------------------------------

    def create(
        self,
        rt: ResourceType,
        namespace: str,
        body: Obj,
        *,
        user: UserInfo = LAB_ADMIN,
        dry_run: bool = False,
        field_validation: str = "Warn",
    ) -> WriteResult:
        if not isinstance(body, dict):
            raise errors.bad_request("the request body must be a JSON object")
        obj = copy.deepcopy(body)
        self._check_kind(rt, obj)
        meta = meta_of(obj)
        if rt.namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent "
                    "on the request"
                )
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if meta.get("resourceVersion"):
            raise errors.bad_request("resourceVersion should not be set on objects to be created")
        generated = not meta.get("name") and bool(meta.get("generateName"))
        if generated:
            meta["name"] = self._generate_name(meta["generateName"])
        for drop in ("uid", "deletionTimestamp", "deletionGracePeriodSeconds", "managedFields"):
            meta.pop(drop, None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        if rt.tracks_generation:
            meta["generation"] = 1
        else:
            meta.pop("generation", None)
        prepare_create(rt, obj)
        warnings = self._admit_and_validate(
            "CREATE", rt, obj, None, "", user, dry_run, field_validation
        )
        meta = meta_of(obj)
        with self._cond:
            ns = meta.get("namespace", "")
            if rt.namespaced:
                self._check_namespace_open(ns)
            for _attempt in range(8):
                if self._stored(rt, ns, meta["name"]) is None:
                    break
                if not generated:
                    raise errors.already_exists(rt.qualified, meta["name"], rt.group)
                meta["name"] = self._generate_name(meta["generateName"])
            else:
                raise errors.already_exists(rt.qualified, meta["name"], rt.group)
            if dry_run:
                return WriteResult(self._out(rt, obj), warnings)
            stored = self._put(rt, obj, "ADDED", None)
            self._drain()
            return WriteResult(self._out(rt, stored), warnings)

    @staticmethod
    def _generate_name(prefix: str) -> str:
        return prefix[:58] + "".join(random.choice(_NAME_CHARS) for _ in range(5))

    def _check_kind(self, rt: ResourceType, obj: Obj) -> None:
        kind = obj.get("kind")
        api_version = obj.get("apiVersion")
        if kind and kind != rt.kind:
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the expected API "
                f"version ({rt.api_version}) or kind {kind} is not {rt.kind}"
            )
        if api_version and group_of(api_version) != rt.group:
            raise errors.bad_request(
                f"the API version in the data ({api_version}) does not match the expected API "
                f"version ({rt.api_version})"
            )
        obj["apiVersion"] = rt.api_version
        obj["kind"] = rt.kind

    def _check_namespace_open(self, namespace: str) -> None:
        ns = self._objects[kinds.NAMESPACES.storage_key].get(("", namespace))
        if ns is None:
            raise errors.not_found("namespaces", namespace)
        if meta_of(ns).get("deletionTimestamp"):
            raise errors.forbidden_request(
                f"unable to create new content in namespace {namespace} because it is being "
                "terminated",
                {"name": namespace, "kind": "namespaces"},
            )

    # --- validation and admission --------------------------------------------------------

    def _admit_and_validate(
        self,
        operation: str,
        rt: ResourceType,
        obj: Obj,
        old: Obj | None,
        subresource: str,
        user: UserInfo,
        dry_run: bool,
        field_validation: str,
    ) -> list[str]:
        """Mutating admission, then validation, then validating admission; mutates ``obj``."""
        meta = meta_of(obj)
        name = meta.get("name", "")
        if self.admission is not None:
            attrs = AdmissionAttributes(
                operation,
                rt,
                meta.get("namespace", ""),
                name,
                obj,
                old,
                subresource,
                user,
                dry_run,
            )
            mutated = self.admission.mutate(attrs)
            if mutated is not None and mutated is not obj:
                obj.clear()
                obj.update(mutated)
                self._check_kind(rt, obj)
        warnings = self._validate(rt, obj, old, field_validation)
        if self.admission is not None:
            self.admission.validate(
                AdmissionAttributes(
                    operation,
                    rt,
                    meta.get("namespace", ""),
                    name,
                    obj,
                    old,
                    subresource,
                    user,
                    dry_run,
                )
            )
        return warnings

    def _validate(
        self, rt: ResourceType, obj: Obj, old: Obj | None, field_validation: str
    ) -> list[str]:
        causes = validate_metadata(rt, obj)
        warnings: list[str] = []
        if rt.custom and rt.schema is not None:
            unknown = schema.prune(dict(rt.schema), obj)
            if unknown and field_validation == "Strict":
                raise errors.bad_request(
                    "strict decoding error: "
                    + ", ".join(f'unknown field "{path}"' for path in unknown)
                )
            if field_validation != "Ignore":
                warnings += [f'unknown field "{path}"' for path in unknown]
            schema.apply_defaults(dict(rt.schema), obj)
            body = _rule_view(obj)
            old_body = None if old is None else _rule_view(old)
            root = dict(rt.schema)
            root["required"] = [r for r in rt.schema.get("required") or [] if r != "metadata"]
            root["properties"] = {
                k: v for k, v in (rt.schema.get("properties") or {}).items() if k != "metadata"
            }
            causes += schema.validate(root, body, old=old_body, rules=self.custom_rules)
        if (rt.group, rt.plural) == kinds.CRD.storage_key:
            causes += validate_crd(obj, old)
        elif not rt.custom and not causes:
            causes += validate_builtin(obj)
        if (rt.group, rt.plural) == ("resource.k8s.io", "resourceclaims") and old is not None:
            causes += validate_resource_claim_update(obj, old)
        if causes:
            raise errors.invalid_object(rt.kind, rt.group, meta_of(obj).get("name", ""), causes)
        return warnings

    # --- update and patch ----------------------------------------------------------------

    def update(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        body: Obj | None = None,
        *,
        patch: Any = None,
        patch_type: str = "",
        subresource: str = "",
        user: UserInfo = LAB_ADMIN,
        dry_run: bool = False,
        field_validation: str = "Warn",
    ) -> WriteResult:
        """PUT (``body``) or PATCH (``patch`` + ``patch_type``) of an object or its status."""
        if patch_type == patches.STRATEGIC and rt.custom:
            raise errors.unsupported_media_type([patches.JSON_PATCH, patches.MERGE, patches.APPLY])
        if body is not None and not isinstance(body, dict):
            raise errors.bad_request("the request body must be a JSON object")
        for _attempt in range(16):
            with self._cond:
                current = self._stored(rt, namespace, name)
                if current is None:
                    raise errors.not_found(rt.qualified, name, rt.group)
                current_rv = meta_of(current)["resourceVersion"]
            new = self._apply_change(rt, current, body, patch, patch_type)
            self._check_kind(rt, new)
            meta = meta_of(new)
            # the precondition is what the request names: a PUT body's version, a patch's own
            requested_rv = (
                meta.get("resourceVersion")
                if body is not None
                else _patch_version(patch, patch_type)
            )
            if body is not None and not requested_rv and rt.custom:
                raise errors.invalid_object(
                    rt.kind,
                    rt.group,
                    name,
                    [
                        errors.invalid(
                            "metadata.resourceVersion", 0, "must be specified for an update"
                        )
                    ],
                )
            if requested_rv and requested_rv != current_rv:
                raise errors.conflict(rt.qualified, name, errors.STALE, rt.group)
            if meta.get("name") != name:
                raise errors.bad_request(
                    f"the name of the object ({meta.get('name')}) does not match the name on "
                    f"the URL ({name})"
                )
            if rt.namespaced and meta.get("namespace", namespace) != namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent "
                    "on the request"
                )
            new = self._prepare_update(rt, current, new, subresource)
            warnings = self._admit_and_validate(
                "UPDATE", rt, new, current, subresource, user, dry_run, field_validation
            )
            new = self._prepare_update(rt, current, new, subresource)
            with self._cond:
                latest = self._stored(rt, namespace, name)
                if latest is None:
                    raise errors.not_found(rt.qualified, name, rt.group)
                if meta_of(latest)["resourceVersion"] != current_rv:
                    if requested_rv:
                        raise errors.conflict(rt.qualified, name, errors.STALE, rt.group)
                    continue  # unconditional write: recompute against the newer object
                if dry_run:
                    return WriteResult(self._out(rt, new), warnings)
                result = self._commit_update(rt, current, new)
                self._drain()
                return WriteResult(self._out(rt, result), warnings, result is not None)
        raise errors.conflict(rt.qualified, name, "too many concurrent writes", rt.group)

    def _apply_change(
        self, rt: ResourceType, current: Obj, body: Obj | None, patch: Any, patch_type: str
    ) -> Obj:
        if body is not None:
            return copy.deepcopy(body)
        base = self._out(rt, current)
        if patch_type == patches.MERGE:
            if not isinstance(patch, dict):
                raise errors.bad_request("merge patch must be a JSON object")
            result = patches.merge_patch(base, patch)
        elif patch_type == patches.JSON_PATCH:
            result = patches.json_patch(base, patch)
        elif patch_type == patches.STRATEGIC:
            merge_keys = patch_merge_keys(rt.api_version, rt.kind)
            result = patches.strategic_merge_patch(base, patch, rt.plural, merge_keys)
        else:
            raise errors.unsupported_media_type(
                [patches.JSON_PATCH, patches.MERGE, patches.STRATEGIC]
            )
        if not isinstance(result, dict):
            raise errors.bad_request("the patched object must be a JSON object")
        return result

    def _prepare_update(self, rt: ResourceType, current: Obj, new: Obj, subresource: str) -> Obj:
        old_meta = meta_of(current)
        if subresource == "status":
            prepared = copy.deepcopy(current)
            prepared["apiVersion"], prepared["kind"] = rt.api_version, rt.kind
            if "status" in new:
                prepared["status"] = copy.deepcopy(new["status"])
            else:
                prepared.pop("status", None)
            if (rt.group, rt.plural) == ("resource.k8s.io", "resourceclaims"):
                drop_deallocated_status_devices(prepared, current)
            return prepared
        prepared = copy.deepcopy(new)
        stamp_device_taints(rt, prepared)
        meta = meta_of(prepared)
        for keep in (
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "namespace",
        ):
            if keep in old_meta:
                meta[keep] = old_meta[keep]
            else:
                meta.pop(keep, None)
        meta["resourceVersion"] = old_meta["resourceVersion"]
        if rt.status_subresource:
            if "status" in current:
                prepared["status"] = copy.deepcopy(current["status"])
            else:
                prepared.pop("status", None)
        if rt.group == "" and rt.plural == "namespaces":
            prepared["spec"] = copy.deepcopy(current.get("spec", {}))
        if rt.tracks_generation and non_metadata(
            prepared, skip_status=rt.status_subresource
        ) != non_metadata(current, skip_status=rt.status_subresource):
            meta["generation"] = int(old_meta.get("generation", 0)) + 1
        if old_meta.get("deletionTimestamp"):
            added = [
                f
                for f in meta.get("finalizers") or []
                if f not in (old_meta.get("finalizers") or [])
            ]
            if added:
                raise errors.invalid_object(
                    rt.kind,
                    rt.group,
                    old_meta["name"],
                    [
                        errors.forbidden(
                            "metadata.finalizers",
                            "no new finalizers can be added if the object is being deleted, "
                            f"found new finalizers {added}",
                        )
                    ],
                )
        return prepared

    def _commit_update(self, rt: ResourceType, current: Obj, new: Obj) -> Obj:
        """Commit under the lock: a no-op keeps the version, a drained deletion removes."""
        comparable_new = {**new, "apiVersion": None, "kind": None}
        comparable_old = {**current, "apiVersion": None, "kind": None}
        if comparable_new == comparable_old:
            return current
        new["apiVersion"] = current.get("apiVersion", rt.api_version)
        # Like the real store, an update only completes a deletion that is not graceful
        # (deletionGracePeriodSeconds 0): a bound Pod stays until the kubelet deletes it.
        old_meta = meta_of(current)
        if (
            old_meta.get("deletionTimestamp")
            and old_meta.get("deletionGracePeriodSeconds", 0) == 0
            and not finalizers_of(rt, new)
        ):
            return self._remove(rt, new)
        return self._put(rt, new, "MODIFIED", current)

    # --- delete --------------------------------------------------------------------------

    def delete(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        options: Obj | None = None,
        *,
        user: UserInfo = LAB_ADMIN,
        dry_run: bool = False,
    ) -> WriteResult:
        options = options or {}
        with self._cond:
            current = self._stored(rt, namespace, name)
            if current is None:
                raise errors.not_found(rt.qualified, name, rt.group)
        check_preconditions(rt, current, options)
        if self.admission is not None:
            meta = meta_of(current)
            self.admission.validate(
                AdmissionAttributes(
                    "DELETE",
                    rt,
                    meta.get("namespace", ""),
                    name,
                    None,
                    current,
                    "",
                    user,
                    dry_run,
                    options,
                )
            )
        with self._cond:
            current = self._stored(rt, namespace, name)
            if current is None:
                raise errors.not_found(rt.qualified, name, rt.group)
            check_preconditions(rt, current, options)
            if dry_run:
                return WriteResult(self._out(rt, current), [], False)
            result, finished = self._delete_locked(rt, current, options)
            self._drain()
            return WriteResult(self._out(rt, result), [], finished)

    def _delete_locked(self, rt: ResourceType, current: Obj, options: Obj) -> tuple[Obj, bool]:
        policy = options.get("propagationPolicy")
        if policy is None and options.get("orphanDependents") is not None:
            policy = "Orphan" if options["orphanDependents"] else "Background"
        policy = policy or "Background"
        if policy not in ("Background", "Foreground", "Orphan"):
            raise errors.bad_request(f"propagationPolicy {policy!r} is not supported")
        meta = meta_of(current)
        if policy == "Orphan":
            self._orphan_dependents(meta.get("uid", ""))
        grace = grace_period(rt, current, options)
        if meta.get("deletionTimestamp"):
            if (
                grace == 0
                and rt.group == ""
                and rt.plural == "pods"
                and meta.get("deletionGracePeriodSeconds")
            ):
                if not finalizers_of(rt, current):
                    return self._remove(rt, current), True
                shortened = copy.deepcopy(current)
                meta_of(shortened)["deletionGracePeriodSeconds"] = 0
                return self._put(rt, shortened, "MODIFIED", current), False
            return current, False
        finalizers = list(meta.get("finalizers") or [])
        if policy == "Foreground" and FOREGROUND not in finalizers:
            finalizers.append(FOREGROUND)
        new = copy.deepcopy(current)
        new_meta = meta_of(new)
        if finalizers:
            new_meta["finalizers"] = finalizers
        pending = bool(finalizers) or bool(grace) or bool(finalizers_of(rt, new))
        if not pending:
            return self._remove(rt, current), True
        stamp = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=grace or 0)
        new_meta["deletionTimestamp"] = stamp.strftime("%Y-%m-%dT%H:%M:%SZ")
        new_meta["deletionGracePeriodSeconds"] = grace or 0
        if rt.tracks_generation and "generation" in new_meta:
            new_meta["generation"] = int(new_meta["generation"]) + 1
        if rt.group == "" and rt.plural == "namespaces":
            new.setdefault("status", {})["phase"] = "Terminating"
        if (rt.group, rt.plural) == kinds.CRD.storage_key:
            new.setdefault("status", {})["conditions"] = set_condition(
                new.get("status", {}).get("conditions") or [],
                "Terminating",
                "True",
                "InstanceDeletionInProgress",
                "CustomResource deletion is in progress",
            )
        return self._put(rt, new, "MODIFIED", current), False

    def delete_collection(
        self,
        rt: ResourceType,
        namespace: str,
        labels: tuple[Requirement, ...],
        fields: tuple[FieldRequirement, ...],
        options: Obj | None = None,
        *,
        user: UserInfo = LAB_ADMIN,
        dry_run: bool = False,
    ) -> list[Obj]:
        items, _rv, _next, _rest = self.list_objects(rt, namespace, labels, fields)
        deleted = []
        for item in items:
            meta = meta_of(item)
            try:
                result = self.delete(
                    rt, meta.get("namespace", ""), meta["name"], options, user=user, dry_run=dry_run
                )
            except ApiError as exc:
                if exc.code == 404:
                    continue
                raise
            deleted.append(result.obj)
        return deleted

    # --- namespaces/finalize --------------------------------------------------------------

    def finalize_namespace(self, name: str, finalizers: list[str]) -> WriteResult:
        """``namespaces/<name>/finalize``: replace ``spec.finalizers`` (and finish deletion)."""
        rt = kinds.NAMESPACES
        with self._cond:
            current = self._stored(rt, "", name)
            if current is None:
                raise errors.not_found("namespaces", name)
            new = copy.deepcopy(current)
            spec = new.setdefault("spec", {})
            if finalizers:
                spec["finalizers"] = finalizers
            else:
                spec.pop("finalizers", None)
            result = self._commit_update(rt, current, new)
            self._drain()
            return WriteResult(self._out(rt, result))

    # --- pods/binding ----------------------------------------------------------------------

    def bind_pod(self, namespace: str, name: str, binding: Obj) -> None:
        """``pods/<name>/binding``: set ``spec.nodeName`` once, as the scheduler does."""
        rt = self._types[("", "v1", "pods")]
        node = ((binding or {}).get("target") or {}).get("name")
        if not node:
            raise errors.invalid_object("Binding", "", name, [errors.required("target.name")])
        with self._cond:
            current = self._stored(rt, namespace, name)
            if current is None:
                raise errors.not_found("pods", name)
            if meta_of(current).get("deletionTimestamp"):
                raise errors.conflict(
                    "pods", name, "pod is being deleted, cannot be assigned to a host"
                )
            if (current.get("spec") or {}).get("nodeName"):
                raise errors.conflict(
                    "pods",
                    name,
                    f'pod {name} is already assigned to node "{current["spec"]["nodeName"]}"',
                )
            new = copy.deepcopy(current)
            new.setdefault("spec", {})["nodeName"] = node
            self._put(rt, new, "MODIFIED", current)
            self._drain()


def _rule_view(obj: Obj) -> Obj:
    """The object as CRD validation sees it: as in Kubernetes, a root rule may read
    ``self.metadata.name`` and ``self.metadata.generateName`` and nothing else of metadata."""
    body = {k: v for k, v in obj.items() if k != "metadata"}
    meta = obj.get("metadata") or {}
    visible = {k: meta[k] for k in ("name", "generateName") if isinstance(meta.get(k), str)}
    if visible:
        body["metadata"] = visible
    return body


def _patch_version(patch: Any, patch_type: str) -> str | None:
    """The resourceVersion a patch itself names as its precondition, or None.

    Not the patched object's: that carries the stored version in any case, so reading it
    from there turned every patch racing another writer into a 409 kube-apiserver never
    sends (its GuaranteedUpdate applies the patch to the newer object again)."""
    named: Any = None
    if patch_type == patches.JSON_PATCH and isinstance(patch, list):
        for op in patch:
            if (
                isinstance(op, dict)
                and op.get("op") in ("add", "replace")
                and op.get("path") == "/metadata/resourceVersion"
            ):
                named = op.get("value")
    elif isinstance(patch, dict) and isinstance(patch.get("metadata"), dict):
        named = patch["metadata"].get("resourceVersion")
    return str(named) if named else None
