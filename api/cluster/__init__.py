"""Cluster access through the official ``kubernetes`` client — one code path for real
clusters and the lab API server (design §2, ``api/``).

    from dmn.api.cluster import Cluster, connect, resources as r
    cluster = Cluster(connect(url=lab_url))            # or connect(kubeconfig=...)
    topo = cluster.get(r.NETWORK_TOPOLOGIES, "dual-vf")
    for event in cluster.watch(r.RESOURCE_CLAIMS, resource_version=rv): ...
    for event in ListWatch(cluster, r.NETWORK_TOPOLOGIES).events(): ...
    cluster.apply(manifest)                            # create or merge-patch, by discovery
    EventRecorder(cluster, "dra-multi-network-controller").record(obj, "Warning", "R", "msg")

Verbs on :class:`Cluster` (dicts in, dicts out): get, list (follows pages), create, replace
(PUT, ``status=True`` for the subresource), patch (``merge``/``json``/``strategic``,
``status=True``), delete (propagation, grace, uid/resourceVersion preconditions), watch
(one request, :class:`Gone` on 410), resource_for, apply. Failures are typed:
:class:`NotFound`, :class:`AlreadyExists`, :class:`Conflict`, :class:`Invalid` (with field
``causes``), :class:`Gone`, :class:`Forbidden`, :class:`Unavailable`, else
:class:`ApiFailure`. Writes send ``fieldValidation=Strict`` by default.
"""

from . import resources
from .access import Cluster, ObjectList, WatchEvent, WatchStream
from .connection import connect
from .errors import (
    AlreadyExists,
    ApiFailure,
    Conflict,
    FieldCause,
    Forbidden,
    Gone,
    Invalid,
    NotFound,
    Unavailable,
)
from .events import EventRecorder
from .listwatch import ListWatch
from .resources import Resource

__all__ = [
    "AlreadyExists",
    "ApiFailure",
    "Cluster",
    "Conflict",
    "EventRecorder",
    "FieldCause",
    "Forbidden",
    "Gone",
    "Invalid",
    "ListWatch",
    "NotFound",
    "ObjectList",
    "Resource",
    "Unavailable",
    "WatchEvent",
    "WatchStream",
    "connect",
    "resources",
]
