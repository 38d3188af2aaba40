"""Typed access to Kubernetes objects through the official client, the same for every kind.

:class:`Cluster` speaks plain dicts (the wire form) for core kinds, ``resource.k8s.io/v1``
kinds and the project's custom resources alike. Every call goes through the official
client's ``ApiClient`` (auth, TLS, kubeconfig, request serialization — exactly the request
``CustomObjectsApi`` would send for a group, and ``CoreV1Api`` for the core group); watches
run through ``kubernetes.watch.Watch``. Failures are raised as the typed exceptions of
:mod:`.errors`. Callers that want generated models can use :attr:`Cluster.core`,
:attr:`Cluster.resource_v1`, :attr:`Cluster.coordination` and :attr:`Cluster.custom_objects`,
built on the same ``ApiClient``.

Defaults chosen for this project: writes ask ``fieldValidation=Strict`` (an unknown field is
an error, not a silently pruned typo) and send ``fieldManager=dra-multi-network``.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import urllib3
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from .apply_patch import previous_apply, three_way_patch, with_last_applied
from .errors import (
    AlreadyExists,
    ApiFailure,
    NotFound,
    Unavailable,
    from_api_exception,
    from_status,
)
from .resources import Resource, path_segment

log = logging.getLogger(__name__)

Obj = dict[str, Any]

#: Accept headers asking for ``meta.k8s.io/v1`` PartialObjectMetadata (a list, and a watch's
#: objects), as client-go's metadata client sends them
METADATA_LIST = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
METADATA = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
PATCH_TYPES = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
}


@dataclass(frozen=True)
class ObjectList:
    items: list[Obj]
    resource_version: str


@dataclass(frozen=True)
class WatchEvent:
    type: str  # ADDED, MODIFIED, DELETED, BOOKMARK
    object: Obj

    @property
    def resource_version(self) -> str:
        return str((self.object.get("metadata") or {}).get("resourceVersion") or "")


class Cluster:
    """One API server, reached through one official ``ApiClient``."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        field_manager: str = "dra-multi-network",
        field_validation: str = "Strict",
        request_timeout: float = 30.0,
    ) -> None:
        self.api_client = api_client
        self.field_manager = field_manager
        self.field_validation = field_validation
        self.request_timeout = request_timeout
        self._discovered: dict[str, dict[str, Resource]] = {}

    # The generated API classes, for callers that want them. Built on first use: importing
    # ``CoreV1Api``'s module alone cost seconds of every agent, controller and CLI start
    # (and tens of seconds under the kernel lab's emulation), and requests here go through
    # :meth:`_send` with the same ``ApiClient``.
    @cached_property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api_client)

    @cached_property
    def resource_v1(self) -> client.ResourceV1Api:
        return client.ResourceV1Api(self.api_client)

    @cached_property
    def coordination(self) -> client.CoordinationV1Api:
        return client.CoordinationV1Api(self.api_client)

    @cached_property
    def custom_objects(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api_client)

    def close(self) -> None:
        self.api_client.close()  # type: ignore[no-untyped-call]

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- transport ---------------------------------------------------------------------------

    def _send(
        self,
        method: str,
        path: str,
        query: list[tuple[str, Any]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        *,
        timeout: float | tuple[float, float] | None = None,
        accept: str = "application/json",
    ) -> Any:
        headers = {"Accept": accept}
        if body is not None:
            headers["Content-Type"] = content_type
        request = self.api_client.param_serialize(
            method=method,
            resource_path=path,
            query_params=[(k, v) for k, v in query or [] if v is not None],
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            response = self.api_client.call_api(
                *request, _request_timeout=timeout or self.request_timeout
            )
        except ApiException as exc:
            raise from_api_exception(exc) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise Unavailable(0, "Unavailable", f"{method} {path}: {exc}") from exc
        return response

    def request(
        self,
        method: str,
        path: str,
        query: list[tuple[str, Any]] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        *,
        accept: str = "application/json",
    ) -> Any:
        """One JSON request; returns the decoded body or raises an :class:`ApiFailure`."""
        response = self._send(method, path, query, body, content_type, accept=accept)
        data = response.read()
        decoded: Any = None
        if data:
            try:
                decoded = json.loads(data)
            except ValueError:
                decoded = {"message": data.decode(errors="replace")}
        if not 200 <= response.status <= 299:
            status = decoded if isinstance(decoded, dict) else {}
            raise from_status(status, response.status)
        return decoded

    def _write_query(self, dry_run: bool) -> list[tuple[str, Any]]:
        query: list[tuple[str, Any]] = [
            ("fieldManager", self.field_manager),
            ("fieldValidation", self.field_validation),
        ]
        if dry_run:
            query.append(("dryRun", "All"))
        return query

    # --- verbs -------------------------------------------------------------------------------

    def get(self, res: Resource, name: str, namespace: str | None = None) -> Obj:
        result: Obj = self.request("GET", res.path(namespace, name))
        return result

    def list(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int | None = None,
        metadata_only: bool = False,
    ) -> ObjectList:
        """All matching objects (following ``continue`` pages) and the list's version.
        ``metadata_only``: each as ``meta.k8s.io/v1`` PartialObjectMetadata (its metadata
        alone: what no spec or status write of others makes larger)."""
        items: list[Obj] = []
        token: str | None = None
        while True:
            body = self.request(
                "GET",
                res.path(namespace),
                [
                    ("labelSelector", label_selector),
                    ("fieldSelector", field_selector),
                    ("limit", page_size),
                    ("continue", token),
                ],
                accept=METADATA_LIST if metadata_only else "application/json",
            )
            for item in body.get("items") or []:
                item.setdefault("apiVersion", res.api_version)
                item.setdefault("kind", res.kind)
                items.append(item)
            metadata = body.get("metadata") or {}
            token = metadata.get("continue")
            if not token:
                return ObjectList(items, str(metadata.get("resourceVersion") or ""))

    def create(
        self,
        res: Resource,
        body: Mapping[str, Any],
        namespace: str | None = None,
        *,
        dry_run: bool = False,
    ) -> Obj:
        namespace = namespace or (body.get("metadata") or {}).get("namespace")
        obj = {"apiVersion": res.api_version, "kind": res.kind, **body}
        result: Obj = self.request("POST", res.path(namespace), self._write_query(dry_run), obj)
        return result

    def replace(
        self,
        res: Resource,
        body: Mapping[str, Any],
        namespace: str | None = None,
        *,
        status: bool = False,
        dry_run: bool = False,
    ) -> Obj:
        """PUT the object (or its ``status`` subresource); 409 :class:`Conflict` if stale.

        The namespace is the body's ``metadata.namespace``, else ``namespace``.
        """
        meta = body.get("metadata") or {}
        ns = meta.get("namespace") or namespace
        path = res.path(ns, meta["name"], "status" if status else "")
        obj = {"apiVersion": res.api_version, "kind": res.kind, **body}
        result: Obj = self.request("PUT", path, self._write_query(dry_run), obj)
        return result

    def patch(
        self,
        res: Resource,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: str = "merge",
        status: bool = False,
        dry_run: bool = False,
    ) -> Obj:
        """Patch with ``merge`` (default), ``json`` or ``strategic`` (built-in kinds only)."""
        path = res.path(namespace, name, "status" if status else "")
        result: Obj = self.request(
            "PATCH", path, self._write_query(dry_run), patch, PATCH_TYPES[patch_type]
        )
        return result

    def delete(
        self,
        res: Resource,
        name: str,
        namespace: str | None = None,
        *,
        propagation_policy: str | None = None,
        grace_period_seconds: int | None = None,
        uid: str | None = None,
        resource_version: str | None = None,
        dry_run: bool = False,
    ) -> Obj:
        """Delete; returns the object (with ``deletionTimestamp`` while finalizers remain)."""
        options: Obj = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if propagation_policy:
            options["propagationPolicy"] = propagation_policy
        if grace_period_seconds is not None:
            options["gracePeriodSeconds"] = grace_period_seconds
        preconditions = {
            k: v for k, v in (("uid", uid), ("resourceVersion", resource_version)) if v
        }
        if preconditions:
            options["preconditions"] = preconditions
        query = [("dryRun", "All")] if dry_run else []
        result: Obj = self.request("DELETE", res.path(namespace, name), query, options)
        return result

    # --- manifests ---------------------------------------------------------------------------

    def resource_for(self, api_version: str, kind: str) -> Resource:
        """The :class:`Resource` serving ``kind`` in ``api_version``, from API discovery.

        Raises :class:`NotFound` when the server does not serve that kind (e.g. a CRD that is
        not installed yet). Discovery documents are cached per group-version until a miss.
        """
        cached = self._discovered.get(api_version)
        if cached is None or kind not in cached:
            group, _, version = api_version.rpartition("/")
            version = path_segment(version, "API version")
            if group:
                group = path_segment(group, "API group")
            path = f"/apis/{group}/{version}" if group else f"/api/{version}"
            body = self.request("GET", path)
            cached = {
                entry["kind"]: Resource(
                    group, version, entry["name"], entry["kind"], entry["namespaced"]
                )
                for entry in body.get("resources") or []
                if "/" not in entry.get("name", "")
            }
            self._discovered[api_version] = cached
        if kind not in cached:
            raise NotFound(
                404, "NotFound", f"the server doesn't serve kind {kind!r} in {api_version!r}"
            )
        return cached[kind]

    def apply(self, manifest: Mapping[str, Any], namespace: str | None = None) -> Obj:
        """Create the object, or patch it to the manifest with ``kubectl apply``'s client-side
        semantics (:mod:`.apply_patch`): fields an earlier apply set that the manifest no
        longer has are removed, fields other writers added are kept, and the manifest is
        recorded in the ``last-applied-configuration`` annotation. Not server-side apply
        (no field ownership). The namespace defaults to the manifest's, then
        ``namespace``, then ``default`` for namespaced kinds.
        """
        res = self.resource_for(str(manifest.get("apiVersion", "")), str(manifest.get("kind", "")))
        meta = dict(manifest.get("metadata") or {})
        ns = None
        if res.namespaced:
            ns = meta.get("namespace") or namespace or "default"
            meta["namespace"] = ns
        body = with_last_applied({**manifest, "metadata": meta})
        try:
            return self.create(res, body, ns)
        except AlreadyExists:
            current = self.get(res, meta["name"], ns)
            patch = three_way_patch(previous_apply(current), body, current)
            for key in ("apiVersion", "kind"):
                patch.pop(key, None)
            if not patch:
                return current
            return self.patch(res, meta["name"], patch, ns)

    # --- watch -------------------------------------------------------------------------------

    def watch(
        self,
        res: Resource,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
        allow_bookmarks: bool = True,
        metadata_only: bool = False,
    ) -> WatchStream:
        """One watch request from ``resource_version``; ends when the server closes it.
        ``metadata_only``: each event's object as PartialObjectMetadata.

        Iterating raises :class:`~.errors.Gone` when the version is too old (relist then).
        """
        return WatchStream(
            self,
            res,
            namespace,
            resource_version=resource_version,
            label_selector=label_selector,
            field_selector=field_selector,
            timeout_seconds=timeout_seconds,
            allow_bookmarks=allow_bookmarks,
            metadata_only=metadata_only,
        )

    def _watch_call(self, res: Resource, namespace: str | None, **kwargs: Any) -> Any:
        """The list function ``kubernetes.watch.Watch.stream`` drives (watch=True)."""
        query = [
            ("watch", "true"),
            ("resourceVersion", kwargs.get("resource_version")),
            ("labelSelector", kwargs.get("label_selector")),
            ("fieldSelector", kwargs.get("field_selector")),
            ("timeoutSeconds", kwargs.get("timeout_seconds")),
            ("allowWatchBookmarks", "true" if kwargs.get("allow_watch_bookmarks") else None),
        ]
        timeout = kwargs.get("timeout_seconds") or 300
        response = self._send(
            "GET",
            res.path(namespace),
            query,
            timeout=(self.request_timeout, timeout + 30),
            accept=METADATA if kwargs.get("metadata_only") else "application/json",
        )
        if not 200 <= response.status <= 299:
            data = response.read()
            raise from_status(json.loads(data) if data else {}, response.status)
        return response.response


class WatchStream:
    """Iterable of :class:`WatchEvent` for one watch request; ``stop()`` from any thread."""

    def __init__(
        self,
        cluster: Cluster,
        res: Resource,
        namespace: str | None,
        *,
        resource_version: str | None,
        label_selector: str | None,
        field_selector: str | None,
        timeout_seconds: int,
        allow_bookmarks: bool,
        metadata_only: bool = False,
    ) -> None:
        self._cluster = cluster
        self._res = res
        self._namespace = namespace
        self._kwargs = {
            "resource_version": resource_version,
            "label_selector": label_selector,
            "field_selector": field_selector,
            "timeout_seconds": timeout_seconds,
            "allow_watch_bookmarks": allow_bookmarks,
            "metadata_only": metadata_only,
        }
        self._watch = watch.Watch(return_type="object")  # type: ignore[no-untyped-call]
        self._watch._api_client = cluster.api_client
        # Watch.stream() resets its own stop flag when it starts and only knows the
        # response once the request returned; keep our own flag and response so that a
        # stop() at any moment ends the stream instead of waiting for the server timeout.
        self._lock = threading.Lock()
        self._stopped = False
        self._response: Any = None

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            response = self._response
        self._watch.stop()  # type: ignore[no-untyped-call]
        if response is not None:
            _shutdown(response)

    def __iter__(self) -> Iterator[WatchEvent]:
        def call(**kwargs: Any) -> Any:
            response = self._cluster._watch_call(self._res, self._namespace, **kwargs)
            with self._lock:
                self._response = response
                stopped = self._stopped
            if stopped:
                _shutdown(response)
            return response

        if self._stopped:
            return
        try:
            for event in self._watch.stream(call, **self._kwargs):  # type: ignore[no-untyped-call]
                raw = event.get("raw_object")
                if isinstance(raw, dict):
                    raw.setdefault("apiVersion", self._res.api_version)
                    raw.setdefault("kind", self._res.kind)
                    yield WatchEvent(str(event.get("type")), raw)
        except ApiException as exc:
            raise from_api_exception(exc) from exc
        except ApiFailure:
            raise
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as exc:
            if self._stopped:
                return
            raise Unavailable(0, "Unavailable", f"watch {self._res.plural}: {exc}") from exc


def _shutdown(response: Any) -> None:
    """Abort a streaming urllib3 response from another thread (its socket, then itself)."""
    connection = getattr(response, "connection", None)
    sock = getattr(connection, "sock", None)
    try:
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
