"""A topology with Operation steps: two whole-link roots bonded, a VLAN on the bond.

The revision's order runs ``left``, ``right`` (host-cni roots moving the lab node's two
links into the sandbox), then ``uplink`` (bond-cni, members wired from both roots'
``interface`` exports) and ``tenant`` (vlan-cni on the bond's export). On this host kernel
(no bonding) the bond step fails: the hook is refused with the executor's reason, the two
moved roots come back, the host is exactly as before — which proves the topological order
and the input wiring up to the kernel. The kernel-lab variant (``kernel_lab`` marker) runs
the same path inside the VM whose kernel has bonding and 802.1Q and checks the links.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from pyroute2 import IPRoute

from dmn.agent.journal.records import AttachmentState
from dmn.host.rtnetlink.links import all_links, by_name
from dmn.lab.allocator.service import ClaimService
from dmn.lab.demo import wait_settled
from dmn.lab.node import NODE_NAME
from dmn.lab.runtime.nri_runtime import HookFailed, LabPod
from tests.coordinator.lab_node import WAIT, LabNode, lab_node
from tests.coordinator.test_end_to_end import snapshot
from tests.kernel.scratch import netns_path, scratch_netns
from tests.kernel_lab.guest import GUEST_ENV

BOND_TOPOLOGY = {
    "apiVersion": "networking.dra-multi-network.schseba.github.io/v1alpha1",
    "kind": "NetworkTopology",
    "metadata": {"name": "c1-bond"},
    "spec": {
        "effectBudget": {
            "allow": [
                "linux/link-move/v1",
                "linux/link-configure/v1",
                "linux/create-bond/v1",
                "linux/attach-master/v1",
                "linux/create-vlan/v1",
            ]
        },
        "steps": [
            {
                "id": "left",
                "kind": "Allocation",
                "pluginRef": {"name": "host-cni"},
                "config": {"mode": "kernel", "ifName": "vleft", "mtu": 1500, "up": True},
            },
            {
                "id": "right",
                "kind": "Allocation",
                "pluginRef": {"name": "host-cni"},
                "config": {"mode": "kernel", "ifName": "vright", "mtu": 1500, "up": True},
            },
            {
                "id": "uplink",
                "kind": "Operation",
                "pluginRef": {"name": "bond-cni"},
                "inputs": {"members": [{"from": "left.interface"}, {"from": "right.interface"}]},
                "config": {
                    "ifName": "bond0",
                    "mtu": 1500,
                    "up": True,
                    "mode": "active-backup",
                    "monitorIntervalMs": 100,
                    "failOverMac": "active",
                },
            },
            {
                "id": "tenant",
                "kind": "Operation",
                "pluginRef": {"name": "vlan-cni"},
                "inputs": {"parent": {"from": "uplink.interface"}},
                "config": {"ifName": "tenant100", "mtu": 1500, "up": True, "vlanId": 100},
            },
        ],
    },
}


@pytest.fixture
def node() -> Iterator[LabNode]:
    with lab_node() as n:
        yield n


def bonded_claim(node: LabNode) -> tuple[dict[str, Any], dict[str, Any]]:
    node.cluster.apply(BOND_TOPOLOGY)
    (topo,) = wait_settled(node.cluster, ["c1-bond"], WAIT)
    assert topo.ready == "True", topo
    left, right = sorted(topo.device_classes)
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c1-bond-claim", "namespace": "default"},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "left", "exactly": {"deviceClassName": left, "count": 1}},
                    {"name": "right", "exactly": {"deviceClassName": right, "count": 1}},
                ]
            }
        },
    }
    claim = node.cluster.create(node_resources().RESOURCE_CLAIMS, body, "default")
    pod = node.pod("c1-bond-pod", "c1-bond-claim")
    (claim,) = ClaimService(node.cluster, NODE_NAME).allocate([claim], pod=pod)
    return claim, pod


def node_resources() -> Any:
    from dmn.api.cluster import resources

    return resources


def names(ns: str) -> list[str]:
    with IPRoute(netns=ns) as ipr:
        return sorted(x.name for x in all_links(ipr))


def bonding_available() -> bool:
    return os.path.isdir("/sys/module/bonding") or os.path.exists("/sys/class/net/bonding_masters")


@pytest.mark.netns
def test_operation_steps_run_in_order_and_a_failure_returns_the_roots(node: LabNode) -> None:
    if bonding_available():
        pytest.skip("this kernel has bonding; the kernel-lab variant covers success")
    baseline = snapshot(node.host_ns)
    claim, pod = bonded_claim(node)
    meta, pmeta = claim["metadata"], pod["metadata"]
    devices = node.services.preparation.prepare("default", meta["name"], meta["uid"])
    assert sorted(d.request for d in devices) == ["left", "right"]
    with scratch_netns("dmc1s") as sandbox:
        sb = LabPod("sb-bond", pmeta["uid"], pmeta["name"], "default", netns_path(sandbox))
        with pytest.raises(HookFailed, match="E_NETLINK_95: step uplink"):
            node.runtime.run_pod_sandbox(sb)
        att = node.services.attachments.attachment(pmeta["uid"], "sb-bond")
        assert att is not None and att.state is AttachmentState.REMOVED
        assert [op.rsplit("-", 1)[1] for op in att.operations] == [
            "left",
            "right",
            "uplink",
            "tenant",
        ]
        assert names(sandbox) == ["lo"]
    assert snapshot(node.host_ns) == baseline  # both roots back under their own names
    node.services.preparation.unprepare(meta["uid"])
    assert snapshot(node.host_ns) == baseline


@pytest.fixture
def guest_loopback() -> None:
    """The kernel-lab guest boots with its loopback down; the lab API server listens on
    127.0.0.1. Only ever inside the disposable VM (its own root namespace)."""
    if os.environ.get(GUEST_ENV):
        with IPRoute() as ipr:
            ipr.link("set", index=ipr.link_lookup(ifname="lo")[0], state="up")


@pytest.mark.kernel_lab
def test_bond_and_vlan_over_two_roots_in_the_kernel_lab(
    guest_loopback: None, node: LabNode
) -> None:
    baseline = snapshot(node.host_ns)
    claim, pod = bonded_claim(node)
    meta, pmeta = claim["metadata"], pod["metadata"]
    node.services.preparation.prepare("default", meta["name"], meta["uid"])
    with scratch_netns("dmc1s") as sandbox:
        sb = LabPod("sb-bond", pmeta["uid"], pmeta["name"], "default", netns_path(sandbox))
        node.runtime.run_pod_sandbox(sb)
        assert names(sandbox) == ["bond0", "lo", "tenant100", "vleft", "vright"]
        with IPRoute(netns=sandbox) as ipr:
            bond, vlan = by_name(ipr, "bond0"), by_name(ipr, "tenant100")
            assert bond is not None and bond.kind == "bond"
            assert vlan is not None and vlan.kind == "vlan" and vlan.lower == bond.index
            for member in ("vleft", "vright"):
                m = by_name(ipr, member)
                assert m is not None and m.master == bond.index
        node.runtime.stop_pod_sandbox("sb-bond")
        node.runtime.remove_pod_sandbox("sb-bond")
        assert names(sandbox) == ["lo"]
    node.services.preparation.unprepare(meta["uid"])
    assert snapshot(node.host_ns) == baseline
