"""DRA features of Kubernetes 1.37 through the real kube-scheduler and kubelet.

Prioritized lists (``firstAvailable``): one claim template asks first for a whole lab link
(the host-device class, pinned to one link by its inventory ID) and, if that is not
available, for a shared macvlan child (the shared-macvlan class, addressed from the example
pool). The first Pod gets the whole link:
its claim's result names the subrequest ``net/whole`` and the node runs host-cni, so ``net1``
in the Pod is the lab's veth itself. The second Pod's first choice is taken, so the
scheduler chooses ``net/shared``: the node runs that class's macvlan program and IPAM, so its
``net1`` is a macvlan child with a pool address. Each Pod got the configuration of the
subrequest that was chosen.

Extended resources backed by DRA: a topology names ``extendedResourceName`` on its root; the
controller sets it on the root's stable DeviceClass; a Pod that only asks for
``example.com/lab-net: 1`` in ``resources.limits`` gets a claim the scheduler makes for it
(named in the Pod's ``status.extendedResourceClaimStatus``, never in its spec) and, through
it, ``net1`` with a pool address.
"""

from __future__ import annotations

import copy
import json
from collections import defaultdict
from typing import Any

import pytest

from dmn import NRI_PLUGIN_NAME
from dmn.api.cluster import Cluster
from dmn.api.cluster import resources as r
from dmn.api.identity import DRIVER
from dmn.controller.webhook.pods import POD_KEY
from dmn.lab import manifests
from dmn.lab.demo import TOPOLOGIES, wait_settled
from dmn.lab.pod_demo import NAMESPACE
from dmn.lab.pod_network import wait_reported
from dmn.lab.upstream.cluster import UpstreamLab
from dmn.lab.upstream.demo import pod
from tests.e2e import lab_pods
from tests.e2e.lab_pods import WAIT

pytestmark = [pytest.mark.e2e]

TEMPLATE = "whole-else-shared"


def _template(whole_class: str, shared_class: str, link: str) -> dict[str, Any]:
    pinned = f'device.attributes["{DRIVER}"].inventoryID == "{link}"'
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": TEMPLATE, "namespace": NAMESPACE},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "net",
                            "firstAvailable": [
                                {
                                    "name": "whole",
                                    "deviceClassName": whole_class,
                                    "selectors": [{"cel": {"expression": pinned}}],
                                },
                                {"name": "shared", "deviceClassName": shared_class},
                            ],
                        }
                    ]
                }
            }
        },
    }


def _result(admin: Cluster, pod: str) -> dict[str, Any]:
    (claim,) = lab_pods.claims_of(admin, lab_pods.uid(admin, pod))
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    return dict(result)


def _net1_kind(pod_uid: str) -> str:
    with lab_pods.held_netns(pod_uid) as fd:
        net1 = lab_pods.ns_links(fd)["net1"]
    return str((net1.get("linkinfo") or {}).get("info_kind", ""))


def test_each_pod_gets_the_configuration_of_the_subrequest_chosen_for_it(
    upstream_lab: UpstreamLab, admin: Cluster, classes: dict[str, str], pods: list[str]
) -> None:
    personas: dict[str, dict[str, lab_pods.LabDevice]] = defaultdict(dict)
    for device in lab_pods.devices(admin):
        personas[device.inventory_id][device.persona] = device
    link = min(i for i, p in personas.items() if {"kernel", "macvlan"} <= set(p))
    admin.apply(_template(classes["lab-host-device"], classes["shared-macvlan"], link))

    lab_pods.run(admin, pods, "first-choice", TEMPLATE)
    lab_pods.wait_running(admin, "first-choice")
    assert _requires_our_plugin(admin, "first-choice")  # through firstAvailable classes
    whole = _result(admin, "first-choice")
    assert (whole["request"], whole["device"]) == ("net/whole", personas[link]["kernel"].name)
    assert _net1_kind(lab_pods.uid(admin, "first-choice")) == "veth"  # the lab link itself

    lab_pods.run(admin, pods, "second-choice", TEMPLATE)
    lab_pods.wait_running(admin, "second-choice")
    shared = _result(admin, "second-choice")
    assert shared["request"] == "net/shared" and shared.get("shareID"), shared
    assert shared["device"] != personas[link]["macvlan"].name  # its parent is handed off
    assert _net1_kind(lab_pods.uid(admin, "second-choice")) == "macvlan"
    reported = wait_reported(admin, NAMESPACE, "second-choice", "net1", WAIT)
    assert reported is not None and reported.addresses, lab_pods.describe(admin, "second-choice")


def _requires_our_plugin(admin: Cluster, name: str) -> bool:
    """Our Pod webhook put our NRI plugin into the Pod's required-plugins annotation."""
    annotations = admin.get(r.PODS, name, NAMESPACE)["metadata"].get("annotations") or {}
    return NRI_PLUGIN_NAME in json.loads(annotations.get(POD_KEY, "[]"))


EXTENDED = "example.com/lab-net"


def _extended_topology() -> dict[str, Any]:
    (doc,) = [
        d.doc
        for d in manifests.load(TOPOLOGIES)
        if d.kind == "NetworkTopology" and d.name == "shared-macvlan"
    ]
    topo = copy.deepcopy(doc)
    topo["metadata"] = {"name": "extended-macvlan"}
    roots = [s for s in topo["spec"]["steps"] if s["kind"] == "Allocation"]
    roots[0]["extendedResourceName"] = EXTENDED
    return dict(topo)


def test_a_pod_asking_for_the_extended_resource_gets_the_network(
    upstream_lab: UpstreamLab, admin: Cluster, classes: dict[str, str], pods: list[str]
) -> None:
    admin.apply(_extended_topology())
    try:
        (settled,) = wait_settled(admin, ["extended-macvlan"], WAIT)
        assert settled.ready == "True", settled
        topo = admin.get(r.NETWORK_TOPOLOGIES, "extended-macvlan")
        (root,) = topo["status"]["roots"]
        stable = admin.get(r.DEVICE_CLASSES, root["stableDeviceClassName"])
        assert stable["spec"]["extendedResourceName"] == EXTENDED

        body = pod("extended", "unused")
        del body["spec"]["resourceClaims"]
        body["spec"]["containers"][0]["resources"] = {"limits": {EXTENDED: "1"}}
        admin.create(r.PODS, body, NAMESPACE)
        pods.append("extended")
        lab_pods.wait_running(admin, "extended")
        assert _requires_our_plugin(admin, "extended")  # through the extended resource
        status = admin.get(r.PODS, "extended", NAMESPACE)["status"]
        made = status["extendedResourceClaimStatus"]["resourceClaimName"]
        claim = admin.get(r.RESOURCE_CLAIMS, made, NAMESPACE)
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        assert result["driver"] == DRIVER and result.get("shareID"), result
        assert _net1_kind(lab_pods.uid(admin, "extended")) == "macvlan"
        reported = wait_reported(admin, NAMESPACE, "extended", "net1", WAIT)
        assert reported is not None and reported.addresses, lab_pods.describe(admin, "extended")
        lab_pods.remove(admin, "extended")
        pods.remove("extended")
    finally:
        admin.delete(r.NETWORK_TOPOLOGIES, "extended-macvlan")
