"""Addresses from IPPools on real Kubernetes: a workload's static address, and exhaustion.

Each test brings its own IPPool and macvlan-cni topology (its own subnet, so the session's
example pools and other modules' Pods are never in the way), runs Pods through the real
scheduler, kubelet and containerd, and reads what the node did from inside the Pods and from
the API server. No address is assigned by a test.

* A claim's ``WorkloadParameters`` ask for an address of the pool's reserved range and get it
  on ``net1`` with the pool's route; a claim asking for one of the dynamic range is refused at
  RunPodSandbox with ``E_IPAM_STATIC_OUTSIDE_RESERVED`` in the Pod's Events (ours and
  kubelet's), no container starts, and nothing is allocated for it.
* A pool of two addresses: a third Pod stays ContainerCreating with ``E_IPPOOL_EXHAUSTED``
  and starts, with the freed address, once one of the first two is deleted (kubelet's own
  retry of the sandbox); afterwards no IPAllocation of the pool is left.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest

from dmn.api.cluster import Cluster, NotFound
from dmn.api.cluster import resources as r
from dmn.api.identity import API_VERSION
from dmn.lab.pod_demo import NAMESPACE
from dmn.lab.upstream.cluster import UpstreamLab
from dmn.lab.upstream.demo import Kubectl, pod, pod_phase
from tests.e2e import lab_pods, lab_pools
from tests.e2e.lab_pods import WAIT
from tests.waiting import wait_for

pytestmark = [pytest.mark.e2e]


def _event_with(admin: Cluster, pod: str, code: str) -> list[dict[str, Any]]:
    return [e for e in lab_pods.events(admin, pod) if code in json.dumps(e)]


def test_a_workload_gets_its_static_address_and_one_outside_the_reserved_range_is_refused(
    upstream_lab: UpstreamLab, admin: Cluster, pods: list[str]
) -> None:
    pool = lab_pools.pool(
        "e2e-static",
        "10.59.0.0/24",
        "10.59.0.10",
        "10.59.0.20",
        gateway="10.59.0.1",
        reserved=[{"start": "10.59.0.200", "end": "10.59.0.209"}],
        routes=[{"destination": "10.60.0.0/16", "gateway": "10.59.0.1"}],
    )
    kubectl = Kubectl(upstream_lab.admin_kubeconfig)
    with lab_pools.pooled(admin, "e2e-static", pool) as device_class:
        admin.apply(lab_pools.template("e2e-static", device_class, address="10.59.0.200"))
        admin.apply(lab_pools.template("e2e-outside", device_class, address="10.59.0.15"))
        try:
            lab_pods.run(admin, pods, "static-a", "e2e-static")
            lab_pods.wait_running(admin, "static-a")
            assert lab_pools.address(kubectl, "static-a") == "10.59.0.200/24"
            route = kubectl.exec("static-a", "ip", "route", "show", "10.60.0.0/16")
            assert "via 10.59.0.1 dev net1" in route.stdout, route.stdout + route.stderr
            assert lab_pools.held(admin, "e2e-static") == ["10.59.0.200"]

            lab_pods.run(admin, pods, "outside-b", "e2e-outside")
            code = "E_IPAM_STATIC_OUTSIDE_RESERVED"
            seen = wait_for(
                lambda: len(_event_with(admin, "outside-b", code)) >= 2,
                timeout=WAIT,
                interval=0.5,
                what=f"our and kubelet's Events with {code}",
            )
            assert seen, lab_pods.describe(admin, "outside-b")
            status = admin.get(r.PODS, "outside-b", NAMESPACE).get("status") or {}
            assert not any(
                (c.get("state") or {}).get("running") for c in status.get("containerStatuses") or []
            ), status
            assert lab_pools.held(admin, "e2e-static") == ["10.59.0.200"]
            lab_pods.remove(admin, "static-a", "outside-b")
            pods.clear()
            wait_for(
                lambda: lab_pools.held(admin, "e2e-static") == [], timeout=WAIT, what="released"
            )
        finally:
            for template in ("e2e-static", "e2e-outside"):
                with contextlib.suppress(NotFound):
                    admin.delete(r.RESOURCE_CLAIM_TEMPLATES, template, NAMESPACE)


def test_an_exhausted_pool_holds_the_pod_until_an_address_frees(
    upstream_lab: UpstreamLab, admin: Cluster, pods: list[str]
) -> None:
    pool = lab_pools.pool("e2e-tiny", "10.61.0.0/29", "10.61.0.2", "10.61.0.3")
    kubectl = Kubectl(upstream_lab.admin_kubeconfig)
    with lab_pools.pooled(admin, "e2e-tiny", pool) as device_class:
        admin.apply(lab_pools.template("e2e-tiny", device_class))
        try:
            for name in ("tiny-a", "tiny-b"):
                lab_pods.run(admin, pods, name, "e2e-tiny")
            lab_pods.wait_running(admin, "tiny-a", "tiny-b")
            first = {n: lab_pools.address(kubectl, n) for n in ("tiny-a", "tiny-b")}
            assert sorted(first.values()) == ["10.61.0.2/29", "10.61.0.3/29"], first
            lab_pods.run(admin, pods, "tiny-c", "e2e-tiny")
            code = "E_IPPOOL_EXHAUSTED"
            wait_for(
                lambda: _event_with(admin, "tiny-c", code),
                timeout=WAIT,
                interval=0.5,
                what=f"a {code} Event on the third Pod",
            )
            assert pod_phase(admin, "tiny-c") == "Pending"
            freed = first["tiny-a"]
            lab_pods.remove(admin, "tiny-a")
            lab_pods.wait_running(admin, "tiny-c")  # kubelet retried the sandbox
            assert lab_pools.address(kubectl, "tiny-c") == freed
            assert len(lab_pools.held(admin, "e2e-tiny")) == 2
            lab_pods.remove(admin, "tiny-b", "tiny-c")
            pods.clear()
            wait_for(lambda: lab_pools.held(admin, "e2e-tiny") == [], timeout=WAIT, what="released")
        finally:
            with contextlib.suppress(NotFound):
                admin.delete(r.RESOURCE_CLAIM_TEMPLATES, "e2e-tiny", NAMESPACE)


OTHER = "e2e-other"


def test_pods_in_two_namespaces_get_both_families_of_one_pool_and_ping_each_other(
    upstream_lab: UpstreamLab, admin: Cluster, pods: list[str]
) -> None:
    """One dual-stack pool, a Pod in the lab namespace and one in another: each claim reports
    one IPv4 and one IPv6 address of the pool (networkData), the Pod's network-status
    annotation carries them, and the Pods reach each other over net1 in both families."""
    pool = {
        "apiVersion": API_VERSION,
        "kind": "IPPool",
        "metadata": {"name": "e2e-dual"},
        "spec": {
            "subnets": [
                {"cidr": "10.62.0.0/24", "ranges": [{"start": "10.62.0.10", "end": "10.62.0.20"}]},
                {"cidr": "fd62::/64", "ranges": [{"start": "fd62::10", "end": "fd62::20"}]},
            ]
        },
    }
    kubectl = Kubectl(upstream_lab.admin_kubeconfig)
    admin.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OTHER}})
    with lab_pools.pooled(admin, "e2e-dual", pool) as device_class:
        admin.apply(lab_pools.template("e2e-dual", device_class))
        other = lab_pools.template("e2e-dual", device_class)
        other["metadata"]["namespace"] = OTHER
        admin.apply(other)
        b_manifest = pod("dual-b", "e2e-dual")
        b_manifest["metadata"]["namespace"] = OTHER
        try:
            lab_pods.run(admin, pods, "dual-a", "e2e-dual")
            admin.create(r.PODS, b_manifest, OTHER)
            lab_pods.wait_running(admin, "dual-a")
            wait_for(
                lambda: (
                    (admin.get(r.PODS, "dual-b", OTHER).get("status") or {}).get("phase")
                    == "Running"
                ),
                timeout=WAIT,
                what="dual-b Running",
            )
            a = wait_for(lambda: lab_pools.network_data(admin, NAMESPACE, "dual-a"), timeout=WAIT)
            b = wait_for(lambda: lab_pools.network_data(admin, OTHER, "dual-b"), timeout=WAIT)
            assert a is not None and b is not None
            for data in (a, b):
                families = sorted(ip.split("/")[0].count(":") > 0 for ip in data["ips"])
                assert data["interfaceName"] == "net1" and families == [False, True], data
            assert set(a["ips"]).isdisjoint(b["ips"]), (a, b)
            annotation = admin.get(r.PODS, "dual-b", OTHER)["metadata"]["annotations"]
            (entry,) = json.loads(annotation["k8s.v1.cni.cncf.io/network-status"])
            assert sorted(entry["ips"]) == sorted(ip.split("/")[0] for ip in b["ips"]), entry
            for address in (ip.split("/")[0] for ip in b["ips"]):
                ping = kubectl.exec("dual-a", "ping", "-c", "2", "-W", "3", address)
                assert ping.returncode == 0, (address, ping.stdout + ping.stderr)
        finally:
            with contextlib.suppress(NotFound):
                admin.delete(r.PODS, "dual-b", OTHER)
            wait_for(lambda: not admin.list(r.PODS, OTHER).items, timeout=WAIT, what="dual-b gone")
            lab_pods.remove(admin, *pods)
            pods.clear()
            wait_for(lambda: lab_pools.held(admin, "e2e-dual") == [], timeout=WAIT, what="released")
            for namespace in (NAMESPACE, OTHER):
                with contextlib.suppress(NotFound):
                    admin.delete(r.RESOURCE_CLAIM_TEMPLATES, "e2e-dual", namespace)
            with contextlib.suppress(NotFound):
                admin.delete(r.NAMESPACES, OTHER)
