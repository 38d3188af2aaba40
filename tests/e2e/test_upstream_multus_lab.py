"""The upstream lab runs Multus: real Multus (thin) and Whereabouts.

On the session's node lab with Multus enabled for this module (``multus_lab``), an
administrator's NetworkAttachmentDefinition — the reference macvlan plugin in bridge mode
over the lab link ``dmnlab0`` with Whereabouts IPAM — is selected through
``k8s.v1.cni.cncf.io/networks``:

* by two busybox Pods without claims: each gets ``net1`` with an address of the range from
  Whereabouts, Multus writes the Pods' network-status (and its ``AddedInterface`` Event),
  and the Pods ping each other over ``net1`` (macvlan bridge mode: the frames stay on the
  lab link). Deleting the Pods leaves no Whereabouts reservation (pool allocation or
  overlapping-range reservation);
* by a Pod that also has a claim of the driver's own ``shared-macvlan``: Multus' ``net2``
  and the driver's ``net1`` side by side, both in the network-status (Multus writes it at
  ADD, the node agent merges its entry in afterwards), nothing left after deletion.

This proves the lab, not the driver's automatic mode (no shadow NetworkAttachmentDefinition,
no selection written by the driver).
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import json
from collections.abc import Iterator
from typing import Any

import pytest

from dmn.api.cluster import Cluster, NotFound
from dmn.api.cluster import resources as r
from dmn.lab.pod_demo import NAMESPACE
from dmn.lab.upstream.cluster import UpstreamLab
from dmn.lab.upstream.demo import Kubectl, pod
from dmn.lab.upstream.driver import LAB_LINKS
from dmn.lab.upstream.images import BUSYBOX_IMAGE
from dmn.lab.upstream.multus import MultusInstall, reservations
from dmn.lab.upstream.multus_configs import (
    NETWORK_ATTACHMENT_DEFINITIONS,
    NETWORKS_ANNOTATION,
    PRIMARY_NETWORK,
    network_attachment_definition,
    network_status,
)
from tests.e2e import lab_pods, lab_pools
from tests.e2e.conftest import Session
from tests.e2e.lab_pods import WAIT
from tests.waiting import wait_for

pytestmark = [pytest.mark.e2e]

NAD = "e2e-macvlan-whereabouts"
RANGE = "10.71.0.0/24"
PARENT = LAB_LINKS[0]


def _selecting_pod(name: str, networks: str) -> dict[str, Any]:
    """A busybox Pod with no claim that selects ``networks`` through Multus."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "annotations": {NETWORKS_ANNOTATION: networks},
        },
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sleep", "3600"],
                    "securityContext": {"capabilities": {"add": ["NET_RAW"]}},
                }
            ],
        },
    }


def _multus_entry(admin: Cluster, name: str) -> dict[str, Any] | None:
    """The Pod's network-status entry for the NAD on ``net1``, once the annotation also
    names the lab's primary network as default (Multus writes both at ADD)."""
    entries = network_status(admin.get(r.PODS, name, NAMESPACE))
    default = [e for e in entries if e.get("name") == PRIMARY_NETWORK and e.get("default")]
    ours = [e for e in entries if e.get("name") == f"{NAMESPACE}/{NAD}"]
    return ours[0] if default and len(ours) == 1 else None


def _added_interface(admin: Cluster, name: str) -> list[str]:
    """Multus' ``AddedInterface`` Events about the Pod (their messages)."""
    return [
        str(e.get("message"))
        for e in lab_pods.events(admin, name)
        if e.get("reason") == "AddedInterface"
        and (e.get("source") or {}).get("component") == "multus"
    ]


@pytest.fixture(scope="module")
def nad(multus_lab: MultusInstall, upstream_session: Session) -> Iterator[str]:
    """The module's NetworkAttachmentDefinition (macvlan over ``dmnlab0``, Whereabouts)."""
    config = {
        "cniVersion": "1.0.0",
        "name": NAD,
        "type": "macvlan",
        "master": PARENT,
        "mode": "bridge",
        "ipam": multus_lab.ipam(RANGE),
    }
    admin = upstream_session.lab.admin()
    try:
        admin.apply(network_attachment_definition(NAD, NAMESPACE, config))
        yield NAD
        with contextlib.suppress(NotFound):
            admin.delete(NETWORK_ATTACHMENT_DEFINITIONS, NAD, NAMESPACE)
    finally:
        admin.close()


def _address_in_range(entry: dict[str, Any]) -> str:
    (ip,) = entry["ips"]
    assert ipaddress.ip_address(ip) in ipaddress.ip_network(RANGE), entry
    return str(ip)


def test_two_pods_get_net1_from_multus_with_whereabouts_addresses_and_ping(
    nad: str, upstream_lab: UpstreamLab, admin: Cluster, pods: list[str]
) -> None:
    kubectl = Kubectl(upstream_lab.admin_kubeconfig)
    names = ("multus-a", "multus-b")
    for name in names:
        admin.create(r.PODS, _selecting_pod(name, nad), NAMESPACE)
        pods.append(name)
    lab_pods.wait_running(admin, *names)

    addresses = {}
    for name in names:
        entry = wait_for(
            functools.partial(_multus_entry, admin, name),
            timeout=WAIT,
            interval=0.5,
            what=f"{name}'s network-status from Multus",
        )
        assert entry["interface"] == "net1", entry
        ip = _address_in_range(entry)
        assert lab_pools.address(kubectl, name) == f"{ip}/24"
        assert reservations(admin, f"{NAMESPACE}/{name}"), f"no reservation for {name}"
        said = _added_interface(admin, name)
        assert any("net1" in m and ip in m for m in said), said
        addresses[name] = ip
    assert len(set(addresses.values())) == 2, addresses

    target = addresses["multus-b"]
    route = kubectl.exec("multus-a", "ip", "route", "get", target)
    assert "dev net1" in route.stdout, route.stdout + route.stderr
    ping = kubectl.exec("multus-a", "ping", "-c", "2", "-W", "2", "-I", "net1", target)
    assert ping.returncode == 0, ping.stdout + ping.stderr

    lab_pods.remove(admin, *names)
    wait_for(
        lambda: not any(reservations(admin, f"{NAMESPACE}/{n}") for n in names),
        timeout=WAIT,
        interval=0.5,
        what="no Whereabouts reservation left for the deleted Pods",
    )


def test_a_claim_pod_gets_our_net1_beside_multus_net2(
    nad: str,
    classes: dict[str, str],
    upstream_lab: UpstreamLab,
    admin: Cluster,
    pods: list[str],
) -> None:
    name = "multus-and-claim"
    manifest = pod(name, "shared-macvlan")
    selection = json.dumps([{"name": nad, "interface": "net2"}])
    manifest["metadata"]["annotations"] = {NETWORKS_ANNOTATION: selection}
    admin.create(r.PODS, manifest, NAMESPACE)
    pods.append(name)
    lab_pods.wait_running(admin, name)

    def both() -> dict[str, dict[str, Any]] | None:
        entries = network_status(admin.get(r.PODS, name, NAMESPACE))
        by_interface = {str(e.get("interface")): e for e in entries}
        return by_interface if {"eth0", "net1", "net2"} <= set(by_interface) else None

    status = wait_for(both, timeout=WAIT, interval=0.5, what=f"{name}'s three interfaces")
    assert status["eth0"]["name"] == PRIMARY_NETWORK, status
    assert status["net2"]["name"] == f"{NAMESPACE}/{nad}", status
    ip = _address_in_range(status["net2"])
    (claim,) = lab_pods.claims_of(admin, lab_pods.uid(admin, name))
    assert status["net1"]["name"] == f"{NAMESPACE}/{claim['metadata']['name']}", status
    kubectl = Kubectl(upstream_lab.admin_kubeconfig)
    shown = kubectl.exec(name, "ip", "-o", "-4", "addr", "show", "net2")
    assert f"inet {ip}/24" in shown.stdout, shown.stdout + shown.stderr
    assert kubectl.exec(name, "ip", "link", "show", "net1").returncode == 0

    lab_pods.remove(admin, name)
    wait_for(
        lambda: not reservations(admin, f"{NAMESPACE}/{name}"),
        timeout=WAIT,
        interval=0.5,
        what="no Whereabouts reservation left for the deleted Pod",
    )
