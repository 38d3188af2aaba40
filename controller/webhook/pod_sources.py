"""The reads behind Pod admission: the claims and templates a Pod names, and the classes.

The thin I/O half of :mod:`.pods` (which decides on what this returns). A claim or template
that does not exist is left out of the :class:`~.pods.World` (the decision warns about it);
any other failure propagates to the caller, which admits the Pod unchanged with a warning
(Pod admission never blocks a Pod because our controller could not read the cluster).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dmn.api.cluster import Cluster, NotFound
from dmn.api.cluster import resources as r
from dmn.controller.webhook.pods import CLAIM, World, claim_refs


def read_world(cluster: Cluster, namespace: str, pod: Mapping[str, Any]) -> World:
    """What :func:`dmn.controller.webhook.pods.mutate` and ``validate`` need for ``pod``
    in ``namespace``: one read per claim or template it names, one list of DeviceClasses."""
    objects: dict[tuple[str, str], Mapping[str, Any]] = {}
    for ref in claim_refs(pod):
        if (ref.kind, ref.name) in objects:
            continue
        resource = r.RESOURCE_CLAIMS if ref.kind == CLAIM else r.RESOURCE_CLAIM_TEMPLATES
        try:
            objects[(ref.kind, ref.name)] = cluster.get(resource, ref.name, namespace)
        except NotFound:
            continue
    return World(objects=objects, classes=cluster.list(r.DEVICE_CLASSES).items)
