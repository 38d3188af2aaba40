"""Cluster access through the official ``kubernetes`` client — one code path for real
clusters and the lab API server (DESIGN §2, ``api/``).

    from dmn.api.cluster import Cluster, connect, resources as r
    cluster = Cluster(connect(url=lab_url))            # or connect(kubeconfig=...)
    topo = cluster.get(r.NETWORK_TOPOLOGIES, "dual-vf")
    for event in cluster.watch(r.RESOURCE_CLAIMS, resource_version=rv): ...
    for event in ListWatch(cluster, r.NETWORK_TOPOLOGIES).events(): ...
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
