"""``meta.k8s.io/v1`` PartialObjectMetadata: the metadata-only view a client asks for in its
Accept header (``application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1`` for a
list, ``as=PartialObjectMetadata`` for a watch), as kube-apiserver serves it: the same
objects, selectors and versions, each reduced to ``apiVersion``, ``kind`` and ``metadata``.
A client that needs only names, generations and versions (the node agent's view of the
DeviceExposurePolicies, whose status holds an entry per node) then reads bytes that do not
grow with what others write into the objects."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any


def wants_metadata(accept: str, *, list_kind: bool) -> bool:
    """Whether the Accept header asks for ``meta.k8s.io/v1`` PartialObjectMetadata (a list
    asks for ``PartialObjectMetadataList``, a watch or get for ``PartialObjectMetadata``)."""
    wanted = "PartialObjectMetadataList" if list_kind else "PartialObjectMetadata"
    for media in accept.split(","):
        params = dict(p.strip().split("=", 1) for p in media.split(";")[1:] if "=" in p)
        if params.get("as") == wanted and params.get("g") == "meta.k8s.io":
            return params.get("v", "v1") == "v1"
    return False


def partial_metadata(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The object as the API server's ``PartialObjectMetadata``: its metadata only."""
    return {
        "apiVersion": "meta.k8s.io/v1",
        "kind": "PartialObjectMetadata",
        "metadata": copy.deepcopy(dict(obj.get("metadata") or {})),
    }
