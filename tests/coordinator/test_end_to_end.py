"""The whole node path with real parts: kubelet gRPC → coordinator → runner → kernel, and the
lab NRI runtime driving a real network namespace as the Pod sandbox.

A shared-macvlan topology compiled by the real controller, a claim allocated by the lab
allocator against the lab node's published slices (its links are a veth pair in the lab's
own namespace, which stands in for the node's host namespace), NodePrepareResources over
the DRA unix socket, RunPodSandbox over NRI: the macvlan child appears in the sandbox with
the topology's name and MTU and an address of the example IPPool macvlan-v4 (the agent
allocates it; the test adds none), and reaches a peer namespace standing in for the pool's
gateway over the parent, also through the pool's route. Container
creation is refused in a sandbox that is not Ready; unprepare is refused while attached;
RemovePodSandbox + NodeUnprepare leave the host exactly as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from pyroute2 import IPRoute

from dmn.agent.journal.records import AttachmentState, PreparationState
from dmn.agent.protos import dra_v1_pb2, dra_v1_pb2_grpc
from dmn.api.cluster import resources as r
from dmn.host.rtnetlink.links import all_links, by_name
from dmn.lab.allocator.service import ClaimService
from dmn.lab.node import NODE_NAME
from dmn.lab.runtime.nri_runtime import HookFailed, LabContainer, LabPod
from tests.coordinator.lab_node import LabNode, lab_node
from tests.kernel.scratch import netns_path, scratch_netns
from tests.kernel.world import add_address, ping

pytestmark = pytest.mark.netns


@pytest.fixture
def node() -> Iterator[LabNode]:
    with lab_node() as n:
        yield n


def snapshot(ns: str) -> dict[str, tuple[Any, ...]]:
    with IPRoute(netns=ns) as ipr:
        out = {}
        for link in all_links(ipr):
            full = by_name(ipr, link.name, with_addresses=True)
            assert full is not None
            out[link.name] = (full.alias, full.mtu, full.mac, full.up, full.kind, full.addresses)
        return out


def other_end(node: LabNode, device: str) -> tuple[str, str]:
    """(parent, its veth peer) for an allocated lab device."""
    persona = node.services.devices.personas().by_name()[device]
    facts = node.services.devices.link(persona.inventory_id)
    assert facts is not None and facts.ifname in ("lab0", "lab1")
    parent = facts.ifname
    return parent, "lab1" if parent == "lab0" else "lab0"


def dra(node: LabNode) -> Any:
    channel = grpc.insecure_channel(f"unix://{node.kubelet.dra_socket}")
    return channel, dra_v1_pb2_grpc.DRAPluginStub(channel)


def test_prepare_attach_gate_remove_unprepare(node: LabNode) -> None:
    claim = node.claim("c1-claim")
    pod = node.pod("c1-pod", "c1-claim")
    claim = _allocate(node, claim, pod)
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    _, peer = other_end(node, result["device"])
    uid = claim["metadata"]["uid"]
    pod_uid = pod["metadata"]["uid"]

    with scratch_netns("dmc1p") as peer_ns, scratch_netns("dmc1s") as sandbox:
        with IPRoute(netns=node.host_ns) as host:
            host.link("set", index=host.link_lookup(ifname=peer)[0], net_ns_fd=peer_ns)
        with IPRoute(netns=peer_ns) as ipr:
            # the pool's gateway (10.56.0.1), owning an address of the routed test subnet
            add_address(ipr, peer, "10.56.0.1/24")
            add_address(ipr, peer, "10.58.0.1/16")
        baseline = snapshot(node.host_ns)

        channel, stub = dra(node)
        with channel:
            ref = dra_v1_pb2.Claim(namespace="default", uid=uid, name="c1-claim")
            resp = stub.NodePrepareResources(dra_v1_pb2.NodePrepareResourcesRequest(claims=[ref]))
            got = resp.claims[uid]
            assert got.error == ""
            (dev,) = got.devices
            assert (dev.pool_name, dev.device_name, list(dev.request_names)) == (
                "lab-node",
                result["device"],
                ["net1"],
            )
            assert dev.share_id == result["shareID"]
            # the same claim again: the recorded result, nothing re-run
            again = stub.NodePrepareResources(dra_v1_pb2.NodePrepareResourcesRequest(claims=[ref]))
            assert again.claims[uid].devices[0].device_name == result["device"]
            (prep,) = node.services.journal.preparations(uid)
            assert prep.state is PreparationState.PREPARED and prep.revision.name == node.revision

            sb = LabPod("sb-1", pod_uid, "c1-pod", "default", netns_path(sandbox))
            commits = node.services.journal.commits
            node.runtime.run_pod_sandbox(sb)
            # two synced commits: the pool effect's before-image (the IPAllocation it creates
            # outlives a machine crash, so its intent is durable before the create) and
            # Ready; every other record before Ready describes links only
            assert node.services.journal.commits - commits == 2
            (held,) = node.cluster.list(r.IP_ALLOCATIONS).items
            assert held["spec"]["owner"]["claimUID"] == uid
            cidr = f"{held['spec']['address']}/24"
            with IPRoute(netns=sandbox) as ipr:
                net1 = by_name(ipr, "net1", with_addresses=True)
                assert net1 is not None and net1.kind == "macvlan" and net1.mtu == 1500
                assert net1.up and cidr in [a.cidr for a in net1.addresses], net1.addresses
            assert ping(sandbox, "10.56.0.1")
            assert ping(sandbox, "10.58.0.1")  # only through the pool's route via 10.56.0.1
            att = node.services.attachments.attachment(pod_uid, "sb-1")
            assert att is not None and att.state is AttachmentState.READY
            assert node.services.attachments.status.flush()  # status is written off the hook
            (nas,) = node.cluster.list(r.NETWORK_ATTACHMENT_STATUSES, "default").items
            assert nas["spec"]["revisionRef"]["name"] == node.revision
            assert (nas["spec"]["podUID"], nas["spec"]["sandboxID"]) == (pod_uid, "sb-1")
            assert nas["status"]["phase"] == "Ready"
            (status,) = node.cluster.get(r.RESOURCE_CLAIMS, "c1-claim", "default")["status"][
                "devices"
            ]
            assert (status["device"], status["shareID"]) == (result["device"], result["shareID"])
            # the MAC it was created with and the pool address its journal recorded
            assert status["networkData"] == {
                "interfaceName": "net1",
                "ips": [cidr],
                "hardwareAddress": net1.mac,
            }
            assert status["conditions"][0]["type"] == "Ready"
            assert nas["status"]["outputs"] == [
                {
                    "step": "net1",
                    "port": "interface",
                    "type": "KernelInterface/v1",
                    "shareID": result["shareID"],
                    "ready": True,
                    "description": {"ifName": "net1"},
                }
            ]

            # the Ready sandbox runs containers; another incarnation of the Pod does not (its
            # RunPodSandbox never reached us; attached late, its claims are in use by sb-1)
            node.runtime.create_container("sb-1", LabContainer("ctr-1", "sb-1", "app"))
            node.runtime.start_container("ctr-1")
            node.runtime.pods["sb-2"] = LabPod("sb-2", pod_uid, "c1-pod", "default", "")
            with pytest.raises(HookFailed, match="E_CLAIM_IN_USE"):
                node.runtime.create_container("sb-2", LabContainer("ctr-2", "sb-2", "app"))
            del node.runtime.pods["sb-2"]

            # unprepare while attached: a retryable per-claim error, nothing released
            req = dra_v1_pb2.NodeUnprepareResourcesRequest(claims=[ref])
            busy = stub.NodeUnprepareResources(req)
            assert "E_ATTACHED" in busy.claims[uid].error
            assert node.services.journal.preparations(uid)[0].state is PreparationState.PREPARED

            # kubelet's order: StopPodSandbox tears the network down, NodeUnprepare follows,
            # RemovePodSandbox (garbage collection) may come much later
            commits = node.services.journal.commits
            node.runtime.stop_pod_sandbox("sb-1")
            # two synced commits: the pool effect's undo intent (the release of an API object
            # a machine crash does not reset) and Removed (the removal is not all links now).
            # (a links-only attachment costs one and none: test_whole_link_handoff_and_return)
            assert node.services.journal.commits - commits == 2
            with IPRoute(netns=sandbox) as ipr:
                assert [x.name for x in all_links(ipr)] == ["lo"]
            assert node.cluster.list(r.IP_ALLOCATIONS).items == []  # the address released
            assert (
                node.services.attachments.attachment(pod_uid, "sb-1").state
                is AttachmentState.REMOVED
            )
            assert node.services.pins.list() == []
            # a stopped sandbox is never attached again, not even late
            with pytest.raises(HookFailed, match="E_ATTACHMENT_STATE"):
                node.runtime.create_container("sb-1", LabContainer("ctr-3", "sb-1", "app"))
            node.runtime.remove_pod_sandbox("sb-1")
            assert (
                node.services.attachments.attachment(pod_uid, "sb-1").state
                is AttachmentState.REMOVED
            )
            assert node.services.attachments.status.flush()
            (nas,) = node.cluster.list(r.NETWORK_ATTACHMENT_STATUSES, "default").items
            assert nas["status"]["phase"] == "Released"
            stored = node.cluster.get(r.RESOURCE_CLAIMS, "c1-claim", "default")["status"]
            assert "devices" not in stored and stored["allocation"] == claim["status"]["allocation"]

            done = stub.NodeUnprepareResources(req)
            assert done.claims[uid].error == ""
        assert node.services.journal.preparations(uid)[0].state is PreparationState.RELEASED
        assert snapshot(node.host_ns) == baseline


def _allocate(node: LabNode, claim: dict[str, Any], pod: dict[str, Any]) -> dict[str, Any]:
    """The lab scheduler's DRA step: allocate and reserve the claim for the Pod."""
    (updated,) = ClaimService(node.cluster, NODE_NAME).allocate([claim], pod=pod)
    return updated


def test_whole_link_handoff_and_return(node: LabNode) -> None:
    """host-cni kernel mode: the allocated link itself moves into the sandbox under the
    topology's name and MTU, and comes back to the host unchanged after removal."""
    claim = node.claim("c1-kernel-claim", device_class=node.kernel_class())
    pod = node.pod("c1-kernel-pod", "c1-kernel-claim")
    claim = _allocate(node, claim, pod)
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    parent, peer = other_end(node, result["device"])
    uid, pod_uid = claim["metadata"]["uid"], pod["metadata"]["uid"]
    with scratch_netns("dmc1p") as peer_ns, scratch_netns("dmc1s") as sandbox:
        with IPRoute(netns=node.host_ns) as host:
            host.link("set", index=host.link_lookup(ifname=peer)[0], net_ns_fd=peer_ns)
        with IPRoute(netns=peer_ns) as ipr:
            add_address(ipr, peer, "10.94.0.1/24")
        baseline = snapshot(node.host_ns)
        channel, stub = dra(node)
        with channel:
            ref = dra_v1_pb2.Claim(namespace="default", uid=uid, name="c1-kernel-claim")
            resp = stub.NodePrepareResources(dra_v1_pb2.NodePrepareResourcesRequest(claims=[ref]))
            assert resp.claims[uid].error == ""
            assert resp.claims[uid].devices[0].share_id == ""
            sb = LabPod("sb-k", pod_uid, "c1-kernel-pod", "default", netns_path(sandbox))
            commits = node.services.journal.commits
            node.runtime.run_pod_sandbox(sb)
            # one synced commit (Ready): every record before it describes links only
            assert node.services.journal.commits - commits == 1
            with IPRoute(netns=sandbox) as ipr:
                net2 = by_name(ipr, "net2")
                assert net2 is not None and net2.kind == "veth" and net2.mtu == 1400
                add_address(ipr, "net2", "10.94.0.2/24")
            with IPRoute(netns=node.host_ns) as host:
                assert by_name(host, parent) is None  # handed off whole
            assert ping(sandbox, "10.94.0.1")
            commits = node.services.journal.commits
            node.runtime.stop_pod_sandbox("sb-k")
            # no synced commit: fence, Removing, Undone and Removed describe links only, which
            # a machine crash resets too (the start-up resolves that boot's attachment)
            assert node.services.journal.commits - commits == 0
            node.runtime.remove_pod_sandbox("sb-k")
            with IPRoute(netns=sandbox) as ipr:
                assert [x.name for x in all_links(ipr)] == ["lo"]
            req = dra_v1_pb2.NodeUnprepareResourcesRequest(claims=[ref])
            assert stub.NodeUnprepareResources(req).claims[uid].error == ""
        assert snapshot(node.host_ns) == baseline  # name, alias, MTU, MAC, state, addresses
