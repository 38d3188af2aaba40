"""The slice of OpenAPI v3 discovery that ``kubectl apply`` needs from the lab.

kubectl validates with the server (``fieldValidation=Strict``) only after it has read, from
``/openapi/v3`` and the group-version document it points to, that the PATCH operation of the
object's kind declares a ``fieldValidation`` parameter. Without these documents it falls back
to client-side validation and fails with "failed to download openapi". The lab therefore
serves, per group-version, one path per resource whose PATCH operation carries
``x-kubernetes-group-version-kind`` and the write parameters — and no component schemas: the
lab does not publish models (``kubectl explain`` does not work), and since strategic merge
is not advertised, kubectl computes strategic patches for built-in kinds from its compiled-in
types, as it does for any server without schemas.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any

from .kinds import ResourceType

_WRITE_PARAMETERS = [
    {"name": name, "in": "query", "schema": {"type": "string"}}
    for name in ("dryRun", "fieldManager", "fieldValidation")
]


def _gv_key(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def _grouped(types: Iterable[ResourceType]) -> dict[str, list[ResourceType]]:
    grouped: dict[str, list[ResourceType]] = {}
    for rt in types:
        grouped.setdefault(_gv_key(rt.group, rt.version), []).append(rt)
    return grouped


def group_version_document(types: Iterable[ResourceType], key: str) -> dict[str, Any] | None:
    members = _grouped(types).get(key)
    if not members:
        return None
    paths: dict[str, Any] = {}
    for rt in sorted(members, key=lambda t: t.plural):
        scope = "/namespaces/{namespace}" if rt.namespaced else ""
        path = f"/{key}{scope}/{rt.plural}/{{name}}"
        paths[path] = {
            "patch": {
                "operationId": f"patch{rt.kind}",
                "x-kubernetes-group-version-kind": {
                    "group": rt.group,
                    "version": rt.version,
                    "kind": rt.kind,
                },
                "x-kubernetes-action": "patch",
                "parameters": _WRITE_PARAMETERS,
                "requestBody": {
                    "content": {
                        "application/json-patch+json": {"schema": {"type": "object"}},
                        "application/merge-patch+json": {"schema": {"type": "object"}},
                    }
                },
                "responses": {"200": {"description": "OK"}},
            }
        }
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes (dmn lab)", "version": "v1.37.0"},
        "paths": paths,
        "components": {"schemas": {}},
    }


def root_document(types: Iterable[ResourceType]) -> dict[str, Any]:
    materialized = list(types)
    paths = {}
    for key in sorted(_grouped(materialized)):
        doc = group_version_document(materialized, key)
        digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32]
        paths[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={digest.upper()}"}
    return {"paths": paths}
