"""The node agent's real path for ``ip/pool-addresses`` on the embedded lab: a topology of
macvlan-cni (builtin root) and the ip-pool test plugin (an administrator's Operation step
on the root's interface), or macvlan-cni alone with its optional ``pool``; a Pod's
``net1`` gets an address of each family of the IPPool "dual" with no manual step, the
IPAllocation objects name the claim the agent verified and this node, and deleting the Pod
releases them and leaves the node's links as before."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest

from dmn.api.builtin_plugins import plugin_object
from dmn.api.cluster import resources as r
from dmn.interpreter.loader import load_plugins
from dmn.lab.cluster import LabCluster, LabError
from dmn.lab.demo import wait_settled
from dmn.lab.node import NODE_NAME
from dmn.lab.pod_demo import NAMESPACE, claim_template, pod_manifest
from dmn.lab.pods import LabPods
from dmn.lab.state_dir import StateDir
from tests.ipam.pools import pool, subnet, v4
from tests.lab.test_admin_plugin import _links
from tests.waiting import wait_for

pytestmark = pytest.mark.netns

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "tests" / "kernel" / "plugins" / "ip-pool" / "v1"
GROUP = "networking.dra-multi-network.schseba.github.io/v1alpha1"
TOPOLOGY = {
    "apiVersion": GROUP,
    "kind": "NetworkTopology",
    "metadata": {"name": "pooled-macvlan"},
    "spec": {
        "effectBudget": {
            "allow": ["share/hold-parent/v1", "linux/create-macvlan/v2", "ip/pool-addresses/v1"]
        },
        "steps": [
            {
                "id": "net1",
                "kind": "Allocation",
                "pluginRef": {"name": "macvlan-cni"},
                "config": {"mode": "bridge", "ifName": "net1", "mtu": 1500, "up": True},
            },
            {
                "id": "addr",
                "kind": "Operation",
                "pluginRef": {"name": "ip-pool"},
                "config": {},
                "inputs": {"interface": {"from": "net1.interface"}},
            },
        ],
    },
}


#: The same through macvlan-cni's own optional ``pool`` (its guarded ip/pool-addresses).
BUILTIN_TOPOLOGY = {
    "apiVersion": GROUP,
    "kind": "NetworkTopology",
    "metadata": {"name": "pooled-macvlan"},
    "spec": {
        "effectBudget": TOPOLOGY["spec"]["effectBudget"],  # type: ignore[index]
        "steps": [
            {
                "id": "net1",
                "kind": "Allocation",
                "pluginRef": {"name": "macvlan-cni"},
                "config": {
                    "mode": "bridge",
                    "ifName": "net1",
                    "mtu": 1500,
                    "up": True,
                    "pool": "dual",
                },
            }
        ],
    },
}


def _event(cluster: Any, pod: str, reason: str) -> dict[str, Any] | None:
    for event in cluster.list(r.EVENTS, NAMESPACE).items:
        involved = event.get("involvedObject") or {}
        if involved.get("name") == pod and event.get("reason") == reason:
            return dict(event)
    return None


def _network_status(cluster: Any, pod: str) -> list[dict[str, Any]] | None:
    meta = cluster.get(r.PODS, pod, NAMESPACE)["metadata"]
    value = (meta.get("annotations") or {}).get("k8s.v1.cni.cncf.io/network-status")
    return json.loads(value) if value else None


def _network_data(cluster: Any) -> dict[str, Any] | None:
    for claim in cluster.list(r.RESOURCE_CLAIMS, NAMESPACE).items:
        for entry in (claim.get("status") or {}).get("devices") or []:
            data = entry.get("networkData") or {}
            if data.get("ips"):
                return dict(data)
    return None


@pytest.mark.parametrize("topology", [TOPOLOGY, BUILTIN_TOPOLOGY], ids=["operation", "builtin"])
def test_a_pods_net1_gets_pool_addresses_from_the_agent(
    tmp_path: Path, topology: dict[str, Any]
) -> None:
    found, problems = load_plugins(str(PLUGIN))
    assert problems == []
    lab = LabCluster(StateDir(tmp_path / "lab"), links="netns")
    lab.start()
    try:
        cluster = lab.client()
        cluster.apply(plugin_object(found["ip-pool"]))
        route = {"destination": "10.58.0.0/16", "gateway": "10.56.0.1"}
        cluster.apply(
            pool(
                "dual",
                v4(routes=[route]),
                subnet("fd56::/64", ranges=[("fd56::10", "fd56::ff")]),
            )
        )
        cluster.apply(topology)
        (result,) = wait_settled(cluster, ["pooled-macvlan"], 60)
        assert result.ready == "True", result
        (device_class,) = result.device_classes
        cluster.apply(claim_template("pooled-macvlan", device_class))
        before = _links(lab)
        short = tempfile.TemporaryDirectory(prefix="dmnp-")
        pods = LabPods(lab, Path(short.name))
        pods.start()
        try:
            pods.run(pod_manifest("pooled-a", "pooled-macvlan"))
            shown = pods.exec(NAMESPACE, "pooled-a", ["ip", "-o", "addr", "show", "net1"])
            assert shown.returncode == 0, shown.stderr
            held = cluster.list(r.IP_ALLOCATIONS).items
            addresses = sorted(o["spec"]["address"] for o in held)
            assert len(addresses) == 2, held
            for address in addresses:
                assert f" {address}/" in shown.stdout, (address, shown.stdout)
            owners = {
                (o["spec"]["owner"]["claimNamespace"], o["spec"]["owner"]["nodeName"]) for o in held
            }
            assert owners == {(NAMESPACE, NODE_NAME)}
            claims = cluster.list(r.RESOURCE_CLAIMS, NAMESPACE).items
            uids = {c["metadata"]["uid"] for c in claims}
            assert {o["spec"]["owner"]["claimUID"] for o in held} <= uids
            # the claim tells the workload what it got: net1, its MAC and the addresses the
            # journal recorded (prefix lengths as on the link)
            cidrs = sorted(w.split()[3] for w in shown.stdout.splitlines() if " inet" in w)
            cidrs = [c for c in cidrs if c.split("/")[0] in addresses]
            link = pods.exec(NAMESPACE, "pooled-a", ["ip", "-o", "link", "show", "net1"])
            mac = link.stdout.split("link/ether ")[1].split()[0]
            data = wait_for(lambda: _network_data(cluster), timeout=15, what="networkData")
            assert data["interfaceName"] == "net1", data
            assert sorted(data["ips"]) == cidrs and len(cidrs) == 2, (data, shown.stdout)
            assert data["hardwareAddress"] == mac, data
            # and the Pod says so where tools written for Multus look
            status = wait_for(lambda: _network_status(cluster, "pooled-a"), timeout=15)
            assert [(e["interface"], sorted(e["ips"]), e["mac"]) for e in status] == [
                ("net1", addresses, mac)
            ], status
            routes = pods.exec(NAMESPACE, "pooled-a", ["ip", "route", "show", "10.58.0.0/16"])
            assert "via 10.56.0.1 dev net1" in routes.stdout, routes.stdout
            attached = wait_for(lambda: _event(cluster, "pooled-a", "Attached"), timeout=15)
            assert attached["type"] == "Normal", attached
            for address in addresses:
                assert f"{address}/" in attached["message"], attached["message"]
            pods.delete(NAMESPACE, "pooled-a")
            detached = wait_for(lambda: _event(cluster, "pooled-a", "Detached"), timeout=15)
            assert detached["type"] == "Normal", detached
            assert cluster.list(r.IP_ALLOCATIONS).items == []
            assert _links(lab) == before
        finally:
            pods.stop()
            short.cleanup()
    finally:
        lab.stop()


def _template(name: str, device_class: str, **config: Any) -> dict[str, Any]:
    """A claim template whose claims carry the workload's own WorkloadParameters."""
    doc = claim_template(name, device_class)
    parameters = {"apiVersion": GROUP, "kind": "WorkloadParameters", "config": config}
    doc["spec"]["spec"]["devices"]["config"] = [
        {
            "requests": ["net"],
            "opaque": {"driver": "dra-multi-network.schseba.github.io", "parameters": parameters},
        }
    ]
    return doc


@pytest.mark.adversarial
def test_a_workload_sets_its_static_address_and_name_and_nothing_else(tmp_path: Path) -> None:
    """macvlan-cni declares ``ifName`` and ``address`` workload-settable: a claim asking for
    10.56.0.240 (reserved range) and ``fast0`` gets exactly that; one asking for an address
    of the dynamic range is refused with the allocator's code on the Pod, one setting the
    administrator's ``mtu`` with E_WORKLOAD_PARAMETER on the claim; neither leaves anything."""
    lab = LabCluster(StateDir(tmp_path / "lab"), links="netns")
    lab.start()
    try:
        cluster = lab.client()
        cluster.apply(pool("dual", v4(), subnet("fd56::/64", ranges=[("fd56::10", "fd56::ff")])))
        cluster.apply(BUILTIN_TOPOLOGY)
        (result,) = wait_settled(cluster, ["pooled-macvlan"], 60)
        assert result.ready == "True", result
        (device_class,) = result.device_classes
        cluster.apply(_template("static", device_class, address="10.56.0.240", ifName="fast0"))
        cluster.apply(_template("dynamic-range", device_class, address="10.56.0.50"))
        cluster.apply(_template("admin-field", device_class, mtu=9000))
        before = _links(lab)
        short = tempfile.TemporaryDirectory(prefix="dmnw-")
        pods = LabPods(lab, Path(short.name))
        pods.start()
        try:
            pods.run(pod_manifest("static-a", "static"))
            shown = pods.exec(NAMESPACE, "static-a", ["ip", "-o", "-4", "addr", "show", "fast0"])
            assert " 10.56.0.240/24 " in shown.stdout, shown.stdout + shown.stderr
            held = {o["spec"]["address"] for o in cluster.list(r.IP_ALLOCATIONS).items}
            assert "10.56.0.240" in held and len(held) == 2, held
            for name, template, code in (
                ("dyn-b", "dynamic-range", "E_IPAM_STATIC_OUTSIDE_RESERVED"),
                ("adm-c", "admin-field", "E_WORKLOAD_PARAMETER"),
            ):
                with pytest.raises(LabError):
                    pods.run(pod_manifest(name, template))
                seen = wait_for(
                    lambda code=code: code in json.dumps(cluster.list(r.EVENTS, NAMESPACE).items),
                    timeout=30,
                    what=f"an Event with {code}",
                )
                assert seen
                pods.delete(NAMESPACE, name)
            held = {o["spec"]["address"] for o in cluster.list(r.IP_ALLOCATIONS).items}
            assert "10.56.0.50" not in held and len(held) == 2, held
            pods.delete(NAMESPACE, "static-a")
            assert cluster.list(r.IP_ALLOCATIONS).items == []
            assert _links(lab) == before
        finally:
            pods.stop()
            short.cleanup()
    finally:
        lab.stop()
