"""The reads behind Pod admission: the claims and templates a Pod names, the classes, the
revisions the classes of ours it uses pin, and the Node it names.

The thin I/O half of :mod:`.pods` (which decides on what this returns). A claim, template,
revision or Node that does not exist is left out of the :class:`~.pods.World` (the decision
warns about it, or refuses a Pod bound to a missing Node); any other failure propagates to
the caller, which admits the Pod unchanged with a warning (Pod admission never blocks a Pod
because our controller could not read the cluster).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from dmn.api.cluster import Cluster, NotFound, Resource
from dmn.api.cluster import resources as r
from dmn.api.cluster.errors import InvalidName
from dmn.controller.webhook.pods import CLAIM, World, claim_refs, node_name, revisions_to_read


def _get(
    cluster: Cluster, resource: Resource, name: str, namespace: str | None = None
) -> Mapping[str, Any] | None:
    """The object, None when it does not exist (a name no object can have does not)."""
    try:
        return cluster.get(resource, name, namespace)
    except (NotFound, InvalidName):
        return None


def read_world(cluster: Cluster, namespace: str, pod: Mapping[str, Any]) -> World:
    """What :func:`dmn.controller.webhook.pods.mutate` and ``validate`` need for ``pod``
    in ``namespace``: one read per claim or template it names, one list of DeviceClasses,
    one read per revision the classes of ours it uses pin and, for such a Pod, one of the
    Node its ``spec.nodeName`` names (called for a CREATE only)."""
    objects: dict[tuple[str, str], Mapping[str, Any]] = {}
    for ref in claim_refs(pod):
        if (ref.kind, ref.name) in objects:
            continue
        resource = r.RESOURCE_CLAIMS if ref.kind == CLAIM else r.RESOURCE_CLAIM_TEMPLATES
        obj = _get(cluster, resource, ref.name, namespace)
        if obj is not None:
            objects[(ref.kind, ref.name)] = obj
    world = World(objects=objects, classes=cluster.list(r.DEVICE_CLASSES).items)
    names = revisions_to_read(pod, world)
    if not names:
        return world
    revisions = {
        name: obj
        for name in names
        if (obj := _get(cluster, r.NETWORK_TOPOLOGY_REVISIONS, name)) is not None
    }
    nodes: dict[str, Mapping[str, Any]] = {}
    bound = node_name(pod)
    if bound is not None and (node := _get(cluster, r.NODES, bound)) is not None:
        nodes[bound] = node
    return dataclasses.replace(world, revisions=revisions, nodes=nodes)
