"""The lab API server's HTTP edge: Kubernetes REST paths over :class:`~.store.Store`.

Why stdlib ``http.server.ThreadingHTTPServer``: the lab serves one developer machine or one
test, a handful of clients and a few dozen long-lived watch streams. A thread per connection
makes a blocking watch stream trivial and correct (chunked HTTP/1.1, one JSON event per line),
needs no dependency and no event loop shared with the controller under test, and starts in
milliseconds. An asyncio or ASGI server would only pay off at a scale the lab never has.

Start API (stable; the controller tests and ``dmn lab up`` use it)::

    server = LabApiServer(port=0)          # 127.0.0.1, an ephemeral port
    url = server.start()                   # "http://127.0.0.1:43121"
    ... kubernetes.client.ApiClient(configuration with host=url) ...
    server.stop()

    with LabApiServer() as server: ...     # start/stop as a context manager
    serve("127.0.0.1", 6443)               # blocking, for the CLI

Options: ``store`` (share or pre-seed a :class:`Store`), ``history_limit`` (watch events kept
for resuming; older versions get 410 Expired), ``tls=(certfile, keyfile)`` for HTTPS,
``tokens={"token": UserInfo(...)}`` to require bearer tokens, ``bookmark_interval`` seconds,
``webhooks`` (call registered admission webhooks, default on; see :mod:`.admission`),
``state`` (a JSON file: objects are restored from it when the server is built and written
back by ``stop()``/``save_state()``; watches from before a restore get 410 and relist).

Paths: ``/version``, ``/healthz``, ``/readyz``, ``/livez``, discovery (``/api``, ``/api/v1``,
``/apis``, ``/apis/<group>``, ``/apis/<group>/<version>``), ``/openapi/v3[/<gv>]`` (see
:mod:`.openapi`: enough for ``kubectl apply``, no model schemas) and
``/api/v1/...`` | ``/apis/<group>/<version>/...`` + ``[namespaces/<ns>/]<plural>[/<name>[/<sub>]]``
with subresources ``status`` (kinds that have it), ``pods/binding`` and ``namespaces/finalize``.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import os
import select
import socket
import ssl
import threading
import time
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from . import discovery, errors, kinds, metadata_view, openapi, patches, table
from .errors import ApiError
from .identity import LAB_ADMIN, UserInfo
from .kinds import ResourceType
from .selectors import (
    fields_match,
    labels_match,
    parse_field_selector,
    parse_label_selector,
)
from .store import ResourceVersionTooOld, Store, WatchEvent

log = logging.getLogger(__name__)

_TRUE = {"true", "True", "1"}
_DEFAULT_WATCH_TIMEOUT = 1800.0
_JSON = "application/json"


class _Route:
    __slots__ = ("group", "name", "namespace", "plural", "subresource", "version")

    def __init__(
        self, group: str, version: str, namespace: str, plural: str, name: str, sub: str
    ) -> None:
        self.group, self.version, self.namespace = group, version, namespace
        self.plural, self.name, self.subresource = plural, name, sub


def _parse_resource_path(group: str, version: str, rest: list[str]) -> _Route:
    namespace = ""
    if (
        rest[0] == "namespaces"
        and len(rest) >= 3
        and not (group == "" and len(rest) == 3 and rest[2] in ("status", "finalize"))
    ):
        namespace, rest = rest[1], rest[2:]
    if len(rest) > 3:
        raise errors.path_not_found()
    return _Route(
        group,
        version,
        namespace,
        rest[0],
        rest[1] if len(rest) > 1 else "",
        rest[2] if len(rest) > 2 else "",
    )


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HttpServer
    timeout = 300  # idle keep-alive connections end eventually
    _raw_body = b""
    _streaming = False  # a chunked watch response has started

    # --- plumbing ----------------------------------------------------------------------

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in separate writes; without TCP_NODELAY, Nagle plus the
        # client's delayed ACK adds ~40 ms to every request.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("http " + format, *args)

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _send_json(self, code: int, body: Any, warnings: list[str] | None = None) -> None:
        data = json.dumps(body, separators=(",", ":")).encode()
        self.send_response(code)
        self.send_header("Content-Type", _JSON)
        self.send_header("Content-Length", str(len(data)))
        for warning in warnings or []:
            self.send_header("Warning", "299 - " + json.dumps(warning))
        self.end_headers()
        self.wfile.write(data)

    def _read_body(self) -> Any:
        raw = self._raw_body
        if not raw:
            return None
        content_type = (self.headers.get("Content-Type") or _JSON).split(";")[0].strip()
        if content_type != _JSON and not content_type.endswith("+json"):
            # protobuf, CBOR or YAML bodies: the lab speaks JSON only
            raise errors.unsupported_media_type([_JSON])
        try:
            return json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise errors.bad_request(f"the request body is not valid JSON: {exc}") from exc

    def _user(self) -> UserInfo:
        tokens: Mapping[str, UserInfo] | None = self.server.lab.tokens
        user = LAB_ADMIN
        if tokens is not None:
            auth = self.headers.get("Authorization", "")
            token = auth[7:].strip() if auth.startswith("Bearer ") else ""
            if token not in tokens:
                raise errors.unauthorized()
            user = tokens[token]
        impersonate = self.headers.get("Impersonate-User")
        if impersonate:
            groups = tuple(self.headers.get_all("Impersonate-Group") or ()) or (
                "system:authenticated",
            )
            user = UserInfo(impersonate, groups)
        return user

    def _dispatch(self, method: str) -> None:
        started = time.monotonic()
        code = 200
        try:
            # Consume the whole body first: an early error must not leave bytes on a
            # keep-alive connection for the next request to trip over.
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = -1
            if length < 0 or self.headers.get("Transfer-Encoding"):
                self.close_connection = True
                raise errors.bad_request("a request body needs a valid Content-Length")
            self._raw_body = self.rfile.read(length) if length else b""
            code = self._handle(method)
        except ApiError as exc:
            code = exc.code
            self._send_json(exc.code, exc.status())
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # a server bug must still answer as a Status
            log.exception("internal error method=%s path=%s", method, self.path)
            code = 500
            if self._streaming:
                self.close_connection = True  # mid-stream: no second response possible
            else:
                self._send_json(500, errors.internal(f"internal error: {exc}").status())
        finally:
            self._streaming = False
        log.debug(
            "request method=%s path=%s code=%s ms=%.1f",
            method,
            self.path,
            code,
            (time.monotonic() - started) * 1000,
        )

    # --- routing -------------------------------------------------------------------------

    def _handle(self, method: str) -> int:
        url = urlsplit(self.path)
        params = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        parts = [unquote(p) for p in url.path.split("/") if p]
        lab = self.server.lab
        if method == "GET" and len(parts) == 1 and parts[0] in ("healthz", "readyz", "livez"):
            data = b"ok"
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return 200
        if method == "GET" and parts == ["version"]:
            self._send_json(200, discovery.version())
            return 200
        user = self._user()
        if method == "GET" and parts[:2] == ["openapi", "v3"]:
            if len(parts) == 2:
                self._send_json(200, openapi.root_document(lab.store.types()))
                return 200
            doc = openapi.group_version_document(lab.store.types(), "/".join(parts[2:]))
            if doc is None:
                raise errors.path_not_found()
            self._send_json(200, doc)
            return 200
        if not parts or parts[0] not in ("api", "apis"):
            raise errors.path_not_found()
        if parts[0] == "api":
            if len(parts) == 1:
                self._discovery(method, discovery.core_versions(self._address()))
                return 200
            group, version, rest = "", parts[1], parts[2:]
        else:
            if len(parts) == 1:
                self._discovery(method, discovery.group_list(lab.store.types()))
                return 200
            if len(parts) == 2:
                doc = discovery.group(lab.store.types(), parts[1])
                if doc is None:
                    raise errors.path_not_found()
                self._discovery(method, doc)
                return 200
            group, version, rest = parts[1], parts[2], parts[3:]
        if not rest:
            doc = discovery.resource_list(lab.store.types(), group, version)
            if doc is None:
                raise errors.path_not_found()
            self._discovery(method, doc)
            return 200
        route = _parse_resource_path(group, version, rest)
        rt = lab.store.resolve(route.group, route.version, route.plural)
        if rt is None or (route.namespace and not rt.namespaced):
            raise errors.path_not_found()
        return self._resource(method, rt, route, params, user)

    def _address(self) -> str:
        host, port = self.server.server_address[:2]
        return f"{host!s}:{port}"

    def _discovery(self, method: str, doc: Any) -> None:
        if method != "GET":
            raise errors.method_not_allowed(
                "the server does not allow this method on the requested resource"
            )
        self._send_json(200, doc)

    def _resource(
        self,
        method: str,
        rt: ResourceType,
        route: _Route,
        params: dict[str, str],
        user: UserInfo,
    ) -> int:
        store = self.server.lab.store
        sub = route.subresource
        allowed_subs = {"status"} if rt.status_subresource else set()
        if rt.group == "" and rt.plural == "pods":
            allowed_subs.add("binding")
        if rt.group == "" and rt.plural == "namespaces":
            allowed_subs.add("finalize")
        if sub and sub not in allowed_subs:
            raise errors.path_not_found()
        dry_run = _dry_run(params)
        field_validation = params.get("fieldValidation") or "Warn"
        if field_validation not in ("Ignore", "Warn", "Strict"):
            raise errors.bad_request(f'fieldValidation parameter unsupported: "{field_validation}"')
        namespace = route.namespace
        if rt.namespaced and route.name and not namespace:
            raise errors.path_not_found()
        if method == "GET":
            if params.get("watch") in _TRUE:
                if route.name:
                    params = {
                        **params,
                        "fieldSelector": ",".join(
                            s
                            for s in (params.get("fieldSelector"), f"metadata.name={route.name}")
                            if s
                        ),
                    }
                return self._watch(rt, namespace, params)
            if route.name:
                obj = store.get(rt, namespace, route.name)
                printer = self._printer(rt, params)
                if printer is not None:
                    rv = (obj.get("metadata") or {}).get("resourceVersion", "")
                    self._send_json(200, printer([obj], rv, True))
                    return 200
                self._send_json(200, obj)
                return 200
            return self._list(rt, namespace, params)
        if method == "POST":
            if route.name and sub == "binding":
                store.bind_pod(namespace, route.name, self._read_body() or {})
                self._send_json(
                    201,
                    {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "metadata": {},
                        "status": "Success",
                        "code": 201,
                    },
                )
                return 201
            if route.name or (rt.namespaced and not namespace):
                raise errors.method_not_allowed(
                    "the server does not allow this method on the requested resource"
                )
            result = store.create(
                rt,
                namespace,
                self._read_body(),
                user=user,
                dry_run=dry_run,
                field_validation=field_validation,
            )
            self._send_json(201, result.obj, result.warnings)
            return 201
        if method == "PUT":
            if not route.name:
                raise errors.method_not_allowed(
                    "the server does not allow this method on the requested resource"
                )
            body = self._read_body()
            if not isinstance(body, dict):
                raise errors.bad_request("the request body must be a JSON object")
            if sub == "finalize":
                finalizers = (body.get("spec") or {}).get("finalizers") or []
                result = store.finalize_namespace(route.name, list(finalizers))
            else:
                result = store.update(
                    rt,
                    namespace,
                    route.name,
                    body,
                    subresource=sub,
                    user=user,
                    dry_run=dry_run,
                    field_validation=field_validation,
                )
            self._send_json(200, result.obj, result.warnings)
            return 200
        if method == "PATCH":
            if not route.name or sub == "binding" or sub == "finalize":
                raise errors.method_not_allowed(
                    "the server does not allow this method on the requested resource"
                )
            content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
            if content_type not in (patches.MERGE, patches.JSON_PATCH, patches.STRATEGIC):
                accepted = [patches.JSON_PATCH, patches.MERGE]
                if not rt.custom:
                    accepted.append(patches.STRATEGIC)
                raise errors.unsupported_media_type(accepted)
            result = store.update(
                rt,
                namespace,
                route.name,
                patch=self._read_body(),
                patch_type=content_type,
                subresource=sub,
                user=user,
                dry_run=dry_run,
                field_validation=field_validation,
            )
            self._send_json(200, result.obj, result.warnings)
            return 200
        if method == "DELETE":
            if sub:
                raise errors.method_not_allowed(
                    "the server does not allow this method on the requested resource"
                )
            options = self._read_body() or {}
            if not isinstance(options, dict):
                raise errors.bad_request("DeleteOptions must be a JSON object")
            for key in ("propagationPolicy", "gracePeriodSeconds", "orphanDependents"):
                if key in params and key not in options:
                    value: Any = params[key]
                    if key == "gracePeriodSeconds":
                        value = _int_param(params, key)
                    elif key == "orphanDependents":
                        value = value in _TRUE
                    options[key] = value
            if not route.name:
                labels = parse_label_selector(params.get("labelSelector"))
                fields = parse_field_selector(params.get("fieldSelector"), rt.readers())
                deleted = store.delete_collection(
                    rt, namespace, labels, fields, options, user=user, dry_run=dry_run
                )
                self._send_json(200, _list_body(rt, deleted, store.resource_version, None, 0))
                return 200
            result = store.delete(rt, namespace, route.name, options, user=user, dry_run=dry_run)
            # Like the real handler: 202 only for a pending deletion that explicitly asked
            # orphanDependents=false; otherwise 200 with the object.
            code = 202 if not result.finished and options.get("orphanDependents") is False else 200
            self._send_json(code, result.obj)
            return code
        raise errors.method_not_allowed(
            "the server does not allow this method on the requested resource"
        )

    # --- list and watch --------------------------------------------------------------------

    def _list(self, rt: ResourceType, namespace: str, params: dict[str, str]) -> int:
        store = self.server.lab.store
        labels = parse_label_selector(params.get("labelSelector"))
        fields = parse_field_selector(params.get("fieldSelector"), rt.readers())
        limit = _int_param(params, "limit") or 0
        after = None
        token = params.get("continue")
        if token:
            try:
                decoded = json.loads(base64.urlsafe_b64decode(token.encode()))
                after = (decoded["ns"], decoded["name"])
                store.check_watch_start(int(decoded["rv"]))
            except ResourceVersionTooOld as exc:
                raise errors.gone(
                    "The provided continue parameter is too old to display a consistent list "
                    f"result. You can start a new list without the continue parameter. ({exc})"
                ) from exc
            except (ValueError, KeyError, TypeError, binascii.Error) as exc:
                raise errors.bad_request(f"continue key is not valid: {exc}") from exc
        rv_param = params.get("resourceVersion")
        if rv_param and rv_param != "0":
            try:
                store.check_watch_start(int(rv_param))
            except ValueError as exc:
                raise errors.bad_request(f"invalid resource version: {rv_param}") from exc
            except ResourceVersionTooOld as exc:
                if params.get("resourceVersionMatch") == "Exact":
                    raise errors.gone(str(exc)) from exc
        items, rv, next_key, remaining = store.list_objects(
            rt, namespace, labels, fields, limit=limit, after=after, copy_items=False
        )
        next_token = None
        if next_key is not None:
            next_token = base64.urlsafe_b64encode(
                json.dumps({"rv": rv, "ns": next_key[0], "name": next_key[1]}).encode()
            ).decode()
        printer = self._printer(rt, params)
        if printer is not None:
            body = printer(items, str(rv), True)
            if next_token:
                body["metadata"]["continue"] = next_token
            self._send_json(200, body)
            return 200
        body = _list_body(rt, items, rv, next_token, remaining)
        if metadata_view.wants_metadata(self.headers.get("Accept") or "", list_kind=True):
            body = {
                **body,
                "apiVersion": "meta.k8s.io/v1",
                "kind": "PartialObjectMetadataList",
                "items": [metadata_view.partial_metadata(o) for o in items],
            }
        self._send_json(200, body)
        return 200

    def _printer(self, rt: ResourceType, params: dict[str, str]) -> Any:
        """A row printer when the client asked for ``meta.k8s.io`` Tables, else None."""
        version = table.wants_table(self.headers.get("Accept") or "")
        if version is None:
            return None
        crd = None
        if rt.custom:
            try:
                crd = self.server.lab.store.get(kinds.CRD, "", f"{rt.plural}.{rt.group}")
            except ApiError:
                crd = None
        columns = table.columns_for(rt, crd)
        include = params.get("includeObject") or "Metadata"

        def render(objs: list[dict[str, Any]], rv: str, definitions: bool) -> dict[str, Any]:
            return table.table(
                version, columns, objs, rv, include=include, with_definitions=definitions
            )

        return render

    def _watch(self, rt: ResourceType, namespace: str, params: dict[str, str]) -> int:
        lab = self.server.lab
        store = lab.store
        labels = parse_label_selector(params.get("labelSelector"))
        readers = rt.readers()
        fields = parse_field_selector(params.get("fieldSelector"), readers)
        timeout = float(_int_param(params, "timeoutSeconds") or _DEFAULT_WATCH_TIMEOUT)
        bookmarks = params.get("allowWatchBookmarks") in _TRUE
        send_initial = params.get("sendInitialEvents") in _TRUE
        rv_param = params.get("resourceVersion") or ""

        printer = self._printer(rt, params)
        first_row = [True]
        metadata_only = metadata_view.wants_metadata(
            self.headers.get("Accept") or "", list_kind=False
        )

        def emit(event: Mapping[str, Any]) -> None:
            if printer is not None and event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                obj = event["object"]
                rv = (obj.get("metadata") or {}).get("resourceVersion", "")
                event = {"type": event["type"], "object": printer([obj], rv, first_row[0])}
                first_row[0] = False
            elif metadata_only and event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                event = {
                    "type": event["type"],
                    "object": metadata_view.partial_metadata(event["object"]),
                }
            self._chunk(event)

        def matches(obj: Mapping[str, Any] | None) -> bool:
            return (
                obj is not None and labels_match(labels, obj) and fields_match(fields, readers, obj)
            )

        initial: list[dict[str, Any]] = []
        expired: str | None = None
        if rv_param in ("", "0") or send_initial:
            objs, position = store.snapshot(rt, namespace)
            initial = [{"type": "ADDED", "object": _as(rt, o)} for o in objs if matches(o)]
        else:
            try:
                position = int(rv_param)
            except ValueError as exc:
                raise errors.bad_request(f"invalid resource version: {rv_param}") from exc
            try:
                store.check_watch_start(position)
            except ResourceVersionTooOld as exc:
                expired = str(exc)
        self.send_response(200)
        self.send_header("Content-Type", _JSON)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self._streaming = True
        try:
            if expired is not None:
                self._chunk(_error_event(expired))
                return 200
            for event in initial:
                emit(event)
            if send_initial and bookmarks:
                self._chunk(_bookmark(rt, position, initial_end=True))
            deadline = time.monotonic() + timeout
            last_bookmark = time.monotonic()
            while not lab.stopping.is_set() and not store.closed:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    events = store.events_after(position, min(remaining, 1.0))
                except ResourceVersionTooOld as exc:
                    self._chunk(_error_event(str(exc)))
                    break
                for change in events:
                    position = change.rv
                    out = _translate(rt, namespace, change, matches)
                    if out is not None:
                        emit(out)
                if bookmarks and time.monotonic() - last_bookmark >= lab.bookmark_interval:
                    self._chunk(_bookmark(rt, position))
                    last_bookmark = time.monotonic()
                if not events and self._peer_closed():
                    self.close_connection = True
                    return 200
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            self.close_connection = True
        return 200

    def _chunk(self, event: Mapping[str, Any]) -> None:
        data = json.dumps(event, separators=(",", ":")).encode() + b"\n"
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _peer_closed(self) -> bool:
        sock = self.connection
        try:
            readable, _, _ = select.select([sock], [], [], 0)
            if not readable:
                return False
            if isinstance(sock, ssl.SSLSocket):
                return sock.pending() == 0 and not sock.recv(1)
            return bool(sock.recv(1, socket.MSG_PEEK) == b"")
        except (OSError, ValueError, ssl.SSLError):
            return True


def _as(rt: ResourceType, obj: Mapping[str, Any]) -> dict[str, Any]:
    return {**obj, "apiVersion": rt.api_version, "kind": rt.kind}


def _translate(
    rt: ResourceType, namespace: str, event: WatchEvent, matches: Any
) -> dict[str, Any] | None:
    """The event a watcher of ``rt`` with these selectors sees, or None."""
    if event.storage != rt.storage_key:
        return None
    if rt.namespaced and namespace and event.namespace != namespace:
        return None
    if event.type == "ADDED":
        kind = "ADDED" if matches(event.obj) else None
    elif event.type == "DELETED":
        kind = "DELETED" if matches(event.obj) or matches(event.old) else None
    else:
        now, before = matches(event.obj), matches(event.old)
        kind = "MODIFIED" if now and before else "ADDED" if now else "DELETED" if before else None
    if kind is None:
        return None
    return {"type": kind, "object": _as(rt, event.obj)}


def _bookmark(rt: ResourceType, rv: int, *, initial_end: bool = False) -> dict[str, Any]:
    metadata: dict[str, Any] = {"resourceVersion": str(rv)}
    if initial_end:
        metadata["annotations"] = {"k8s.io/initial-events-end": "true"}
    return {
        "type": "BOOKMARK",
        "object": {"apiVersion": rt.api_version, "kind": rt.kind, "metadata": metadata},
    }


def _error_event(message: str) -> dict[str, Any]:
    return {"type": "ERROR", "object": errors.gone(message).status()}


def _list_body(
    rt: ResourceType, items: list[dict[str, Any]], rv: int, token: str | None, remaining: int
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"resourceVersion": str(rv)}
    if token:
        metadata["continue"] = token
        metadata["remainingItemCount"] = remaining
    return {
        "apiVersion": rt.api_version,
        "kind": f"{rt.kind}List",
        "metadata": metadata,
        "items": items,
    }


def _dry_run(params: dict[str, str]) -> bool:
    value = params.get("dryRun")
    if value in (None, ""):
        return False
    if value != "All":
        raise errors.bad_request(f'unsupported dryRun value "{value}"; only "All" is supported')
    return True


def _int_param(params: dict[str, str], key: str) -> int | None:
    value = params.get(key)
    if value in (None, ""):
        return None
    try:
        return int(value)
    except ValueError as exc:
        raise errors.bad_request(f"{key} must be an integer: {value!r}") from exc


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    lab: LabApiServer


class LabApiServer:
    """A Kubernetes API server for the lab and for tests; see the module docstring."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        store: Store | None = None,
        history_limit: int = 4096,
        tls: tuple[str, str] | None = None,
        tokens: Mapping[str, UserInfo] | None = None,
        bookmark_interval: float = 5.0,
        webhooks: bool = True,
        state: str | os.PathLike[str] | None = None,
    ) -> None:
        self.host, self.port = host, port
        self.store = store if store is not None else Store(history_limit=history_limit)
        self.state = Path(state) if state is not None else None
        if self.state is not None and self.state.exists():
            self.store.restore(json.loads(self.state.read_text()))
            log.info("lab apiserver state restored path=%s", self.state)
        self.tls = tls
        self.tokens = dict(tokens) if tokens is not None else None
        self.bookmark_interval = bookmark_interval
        self.stopping = threading.Event()
        self._httpd: _HttpServer | None = None
        self._thread: threading.Thread | None = None
        if webhooks and self.store.admission is None:
            from .admission import WebhookAdmission

            self.store.admission = WebhookAdmission(self.store)

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise RuntimeError("the lab API server is not running")
        scheme = "https" if self.tls else "http"
        host, port = self._httpd.server_address[:2]
        return f"{scheme}://{host!s}:{port}"

    def start(self) -> str:
        """Bind, serve in a background thread, and return the base URL."""
        if self._httpd is not None:
            return self.url
        self.stopping.clear()
        self.store.reopen()
        httpd = _HttpServer((self.host, self.port), _Handler)
        httpd.lab = self
        if self.tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(self.tls[0], self.tls[1])
            httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.2},
            name="lab-apiserver",
            daemon=True,
        )
        self._thread.start()
        log.info("lab apiserver started url=%s", self.url)
        return self.url

    def stop(self) -> None:
        """Stop serving; open watch streams end within about a second."""
        if self._httpd is None:
            return
        self.stopping.set()
        self.store.close()
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None
        self._thread = None
        if self.state is not None:
            self.save_state()
        log.info("lab apiserver stopped")

    def save_state(self) -> None:
        """Write every object to the ``state`` file (atomically: temp file, then rename)."""
        if self.state is None:
            return
        self.state.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.state.with_name(self.state.name + ".tmp")
        temporary.write_text(json.dumps(self.store.dump(), separators=(",", ":")))
        os.replace(temporary, self.state)
        log.info("lab apiserver state saved path=%s", self.state)

    def __enter__(self) -> LabApiServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(host: str = "127.0.0.1", port: int = 6443, **options: Any) -> None:
    """Run a lab API server in the foreground until interrupted (for the CLI)."""
    server = LabApiServer(host, port, **options)
    url = server.start()
    try:
        # announced inside the try: a SIGTERM as soon as the address is read must still
        # stop the server through ``finally`` (and save the state)
        log.info("serving url=%s", url)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
