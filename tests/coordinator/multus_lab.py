"""Multus automatic mode on the lab node (:mod:`tests.coordinator.lab_node`): the NAD CRD and
the operator guide's worked example (``examples/multus``: the template ``macvlan-net``, a
DeviceExposurePolicy that offers every lab link's ``macvlan`` persona to ``multus-cni-shared``
at priority 200, taking it over from the lab's ``macvlan-cni`` policy, and the
``multus-macvlan`` topology whose class binds the template), and a stand-in for Multus
itself: :func:`multus_attached` writes the network-status Multus writes after a successful
ADD (the lab runs no Multus; the upstream lab will)."""

from __future__ import annotations

import itertools
import json
from typing import Any

import yaml

from dmn.api.cluster import Cluster
from dmn.api.cluster import resources as r
from dmn.api.multus.network_status import NETWORK_STATUS_ANNOTATION
from dmn.lab.allocator.service import ClaimService
from dmn.lab.demo import wait_settled
from dmn.lab.node import NODE_NAME
from dmn.lab.shipped import examples_dir
from tests.coordinator.lab_node import WAIT, LabNode, create_claim
from tests.fixtures.multus import nad_crd
from tests.waiting import wait_for

NADS = r.NETWORK_ATTACHMENT_DEFINITIONS
EXAMPLE = examples_dir() / "multus"


def example(name: str) -> dict[str, Any]:
    """One document of the operator guide's worked example (``examples/multus``)."""
    doc: dict[str, Any] = yaml.safe_load((EXAMPLE / name).read_text())
    return doc


_n = itertools.count()


def enable_multus(node: LabNode) -> str:
    """Install the CRD, policy, topology and template; returns the topology's DeviceClass
    once the node publishes its links for ``multus-cni-shared``."""
    cluster = node.cluster
    cluster.create(r.CUSTOM_RESOURCE_DEFINITIONS, nad_crd())
    cluster.apply(example("20-policy.yaml"))
    cluster.apply(example("30-topology.yaml"))
    (topo,) = wait_settled(cluster, ["multus-macvlan"], WAIT)
    assert topo.ready == "True", topo
    wait_for(
        lambda: any(
            p.plugin == "multus-cni-shared" for p in node.services.devices.personas().personas
        ),
        timeout=WAIT,
        what="the lab links published for multus-cni-shared",
    )
    cluster.create(NADS, example("10-template.yaml"), "default")
    return topo.device_classes[0]


def claimed_pod(
    node: LabNode,
    device_class: str,
    annotations: dict[str, str] | None = None,
    extra_classes: tuple[str, ...] = (),
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Claims (one of ``device_class``, then one per extra class) and a Pod on the lab node
    referencing them in that order, allocated and reserved for it."""
    i = next(_n)
    claims = [
        create_claim(node.cluster, f"mc-{i}-{k}", cls)
        for k, cls in enumerate((device_class, *extra_classes))
    ]
    meta: dict[str, Any] = {"name": f"mp-{i}", "namespace": "default"}
    if annotations:
        meta["annotations"] = annotations
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "nodeName": NODE_NAME,
            "containers": [{"name": "app", "image": "busybox"}],
            "resourceClaims": [
                {"name": f"net{k}", "resourceClaimName": c["metadata"]["name"]}
                for k, c in enumerate(claims)
            ],
        },
    }
    pod = node.cluster.create(r.PODS, body, "default")
    allocated = ClaimService(node.cluster, NODE_NAME).allocate(claims, pod=pod)
    return allocated, pod


def shadows(cluster: Cluster, namespace: str = "default") -> list[dict[str, Any]]:
    return [
        o
        for o in cluster.list(NADS, namespace).items
        if o["metadata"]["name"].startswith("dmn-multus-")
    ]


def annotations(cluster: Cluster, pod: dict[str, Any]) -> dict[str, str]:
    live = cluster.get(r.PODS, pod["metadata"]["name"], pod["metadata"]["namespace"])
    return dict(live["metadata"].get("annotations") or {})


def multus_attached(cluster: Cluster, pod: dict[str, Any], shadow: str, interface: str) -> None:
    """What Multus writes after its ADD: the Pod's network-status with the cluster network
    and the shadow's attachment (other writers' entries are Multus' to replace: it writes
    the whole list, as the real one does)."""
    status = [
        {"name": "lab-primary", "interface": "eth0", "ips": ["10.244.0.9"], "default": True},
        {
            "name": f"{pod['metadata']['namespace']}/{shadow}",
            "interface": interface,
            "ips": ["10.78.0.2"],
            "mac": "02:00:00:00:78:02",
            "dns": {},
        },
    ]
    cluster.patch(
        r.PODS,
        pod["metadata"]["name"],
        {"metadata": {"annotations": {NETWORK_STATUS_ANNOTATION: json.dumps(status)}}},
        pod["metadata"]["namespace"],
    )
