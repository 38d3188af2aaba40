"""RunPodSandbox and its neighbours through the lab NRI runtime and a real sandbox namespace.

Failure compensates (a foreign veth ``net1`` already in the sandbox: the hook fails, the child
and the pin are gone, the foreign link survives), a Pod without our claims passes, a claim
reserved for the Pod but never prepared refuses the sandbox, the host namespace is never a
sandbox, and a restarted agent keeps gating and cleans up from its journal alone.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from pyroute2 import IPRoute

from dmn.agent.coordinator import Refusal
from dmn.agent.journal.records import AttachmentState, PreparationState
from dmn.agent.kubelet.handler import ClaimRef
from dmn.api.cluster import resources as r
from dmn.host.rtnetlink.links import all_links, by_name
from dmn.lab.allocator.service import ClaimService
from dmn.lab.node import NODE_NAME
from dmn.lab.runtime.nri_runtime import HookFailed, LabContainer, LabNriRuntime, LabPod
from tests.coordinator.lab_node import WAIT, LabNode, lab_node
from tests.coordinator.test_end_to_end import snapshot
from tests.kernel.scratch import netns_path, scratch_netns

pytestmark = pytest.mark.netns

_n = itertools.count()


@pytest.fixture
def node() -> Iterator[LabNode]:
    with lab_node() as n:
        yield n


def claimed_pod(node: LabNode, prepare: bool = True) -> tuple[dict[str, Any], dict[str, Any]]:
    i = next(_n)
    claim = node.claim(f"att-claim-{i}")
    pod = node.pod(f"att-pod-{i}", f"att-claim-{i}")
    (claim,) = ClaimService(node.cluster, NODE_NAME).allocate([claim], pod=pod)
    if prepare:
        meta = claim["metadata"]
        assert node.services.preparation.prepare(meta["namespace"], meta["name"], meta["uid"])
    return claim, pod


def names(ns: str) -> list[str]:
    with IPRoute(netns=ns) as ipr:
        return sorted(x.name for x in all_links(ipr))


def test_connect_failure_compensates_and_refuses(node: LabNode) -> None:
    baseline = snapshot(node.host_ns)
    claim, pod = claimed_pod(node)
    uid, pod_uid = claim["metadata"]["uid"], pod["metadata"]["uid"]
    with scratch_netns("dmc1s") as sandbox:
        with IPRoute(netns=sandbox) as ipr:
            ipr.link("add", ifname="net1", kind="veth", peer="fpeer")  # not ours: name taken
        sb = LabPod("sb-fail", pod_uid, pod["metadata"]["name"], "default", netns_path(sandbox))
        with pytest.raises(HookFailed, match="E_NAME_TAKEN"):
            node.runtime.run_pod_sandbox(sb)
        att = node.services.attachments.attachment(pod_uid, "sb-fail")
        assert att is not None and att.state is AttachmentState.REMOVED and att.error
        assert names(sandbox) == ["fpeer", "lo", "net1"]
        with IPRoute(netns=sandbox) as ipr:
            foreign = by_name(ipr, "net1")
            assert foreign is not None and foreign.kind == "veth"
        assert node.services.pins.list() == []
        assert snapshot(node.host_ns) == baseline  # the created child went away again

        # the foreign link gone, the next sandbox of the Pod attaches
        with IPRoute(netns=sandbox) as ipr:
            ipr.link("del", index=ipr.link_lookup(ifname="net1")[0])
        sb2 = LabPod("sb-ok", pod_uid, pod["metadata"]["name"], "default", netns_path(sandbox))
        node.runtime.run_pod_sandbox(sb2)
        with IPRoute(netns=sandbox) as ipr:
            net1 = by_name(ipr, "net1")
            assert net1 is not None and net1.kind == "macvlan"
        node.runtime.remove_pod_sandbox("sb-ok")
        assert names(sandbox) == ["lo"]
    node.services.preparation.unprepare(uid)
    assert snapshot(node.host_ns) == baseline


def test_pod_without_our_claims_passes(node: LabNode) -> None:
    pod = node.pod(f"plain-{next(_n)}", "none")
    with scratch_netns("dmc1s") as sandbox:
        meta = pod["metadata"]
        sb = LabPod("sb-plain", meta["uid"], meta["name"], "default", netns_path(sandbox))
        node.runtime.run_pod_sandbox(sb)
        node.runtime.create_container("sb-plain", LabContainer("c-plain", "sb-plain", "app"))
        node.runtime.start_container("c-plain")
        assert names(sandbox) == ["lo"]
        assert node.services.attachments.attachment(pod["metadata"]["uid"], "sb-plain") is None
        node.runtime.remove_pod_sandbox("sb-plain")


def test_claim_reserved_but_not_prepared_refuses_the_sandbox(node: LabNode) -> None:
    _, pod = claimed_pod(node, prepare=False)
    with scratch_netns("dmc1s") as sandbox:
        sb = LabPod(
            "sb-np", pod["metadata"]["uid"], pod["metadata"]["name"], "default", netns_path(sandbox)
        )
        with pytest.raises(HookFailed, match="E_NOT_PREPARED"):
            node.runtime.run_pod_sandbox(sb)
        assert names(sandbox) == ["lo"]
    assert node.services.pins.list() == []


def test_host_namespace_is_never_a_sandbox(node: LabNode) -> None:
    claim, pod = claimed_pod(node)
    with pytest.raises(Refusal) as info:
        node.services.attachments.run_pod(
            "default",
            pod["metadata"]["name"],
            pod["metadata"]["uid"],
            "sb-host",
            f"/var/run/netns/{node.host_ns}",
        )
    assert info.value.code == "E_HOST_NETNS"
    node.services.preparation.unprepare(claim["metadata"]["uid"])


def test_restarted_agent_gates_and_cleans_up_from_its_journal(node: LabNode) -> None:
    baseline = snapshot(node.host_ns)
    claim, pod = claimed_pod(node)
    uid, pod_uid = claim["metadata"]["uid"], pod["metadata"]["uid"]
    with scratch_netns("dmc1s") as sandbox:
        sb = LabPod("sb-r", pod_uid, pod["metadata"]["name"], "default", netns_path(sandbox))
        node.runtime.run_pod_sandbox(sb)
        with pytest.raises(Refusal) as busy:
            node.services.preparation.unprepare(uid)
        assert busy.value.code == "E_ATTACHED" and busy.value.retryable

        fresh = node.restart_agent()
        fresh.attachments.gate(
            "default", pod["metadata"]["name"], pod_uid, "sb-r"
        )  # Ready survives the restart
        node.runtime.create_container("sb-r", LabContainer("c-r", "sb-r", "app"))
        with pytest.raises(Refusal, match="E_NOT_READY"):
            fresh.attachments.gate("default", pod["metadata"]["name"], pod_uid, "sb-other")
        node.runtime.stop_pod_sandbox("sb-r")
        node.runtime.remove_pod_sandbox("sb-r")
        assert names(sandbox) == ["lo"]
    fresh.preparation.unprepare(uid)
    assert fresh.journal.preparations(uid)[0].state is PreparationState.RELEASED
    assert fresh.pins.list() == []
    assert snapshot(node.host_ns) == baseline


def refused_pod(node: LabNode, pod: dict[str, Any], sandbox: str) -> str:
    meta = pod["metadata"]
    sb = LabPod(f"sb-{next(_n)}", meta["uid"], meta["name"], "default", netns_path(sandbox))
    with pytest.raises(HookFailed) as info:
        node.runtime.run_pod_sandbox(sb)
    assert names(sandbox) == ["lo"]
    return str(info.value)


def test_pod_checks_before_any_attachment(node: LabNode) -> None:
    with scratch_netns("dmc1s") as sandbox:
        # a claim of ours the Pod references but that is not reserved for it
        i = next(_n)
        claim = node.claim(f"att-claim-{i}")
        (claim,) = ClaimService(node.cluster, NODE_NAME).allocate([claim])
        pod = node.pod(f"att-pod-{i}", claim["metadata"]["name"])
        assert "E_NOT_RESERVED" in refused_pod(node, pod, sandbox)
        # reserved, but the Pod is bound elsewhere / uses the host network
        for kw, code in (
            ({"node_name": "other-node"}, "E_POD_NODE"),
            ({"host_network": True}, "E_HOST_NETWORK"),
        ):
            i = next(_n)
            claim = node.claim(f"att-claim-{i}")
            pod = node.pod(f"att-pod-{i}", claim["metadata"]["name"], **kw)
            (claim,) = ClaimService(node.cluster, NODE_NAME).allocate([claim], pod=pod)
            assert code in refused_pod(node, pod, sandbox)
    assert node.services.pins.list() == []
    assert node.services.journal.attachments() == []


def test_sandbox_the_runtime_forgot_is_cleaned_up_at_synchronize(node: LabNode) -> None:
    """A runtime that comes back without a sandbox (it died with the runtime) reports its
    full state through Synchronize; the agent removes that attachment through its pin."""
    baseline = snapshot(node.host_ns)
    claim, pod = claimed_pod(node)
    pod_uid = pod["metadata"]["uid"]
    with scratch_netns("dmc1s") as sandbox:
        sb = LabPod("sb-gone", pod_uid, pod["metadata"]["name"], "default", netns_path(sandbox))
        node.runtime.run_pod_sandbox(sb)
        assert names(sandbox) == ["lo", "net1"]
        node.runtime.shutdown()
        runtime = LabNriRuntime(node.runtime.socket_path, request_timeout=30.0)
        runtime.start()  # knows no pods
        try:
            assert runtime.wait_ready(1, WAIT)
            att = node.services.attachments.attachment(pod_uid, "sb-gone")
            assert att is not None and att.state is AttachmentState.REMOVED
            assert names(sandbox) == ["lo"]
            assert node.services.pins.list() == []
        finally:
            runtime.stop()
    node.services.preparation.unprepare(claim["metadata"]["uid"])
    assert snapshot(node.host_ns) == baseline


def test_repeated_callback_after_a_crash_before_ready_resumes(node: LabNode) -> None:
    """The journal as a crash between the last connect effect and the Ready commit leaves
    it (attachment Connecting, operations Completed): after an agent restart the sandbox's
    first CreateContainer resumes the recorded operations (the late attachment at the gate),
    creating nothing twice; a retry of the same sandbox's Run finds it Ready."""
    claim, pod = claimed_pod(node)
    pod_uid = pod["metadata"]["uid"]
    with scratch_netns("dmc1s") as sandbox:
        sb = LabPod("sb-crash", pod_uid, pod["metadata"]["name"], "default", netns_path(sandbox))
        node.runtime.run_pod_sandbox(sb)
        rec = node.services.attachments.attachment(pod_uid, "sb-crash")
        assert rec is not None
        rec.state = AttachmentState.CONNECTING
        with node.services.journal.batch() as b:
            b.put_attachment(rec)
        fresh = node.restart_agent()
        node.runtime.create_container("sb-crash", LabContainer("c-x", "sb-crash", "app"))
        again = fresh.attachments.attachment(pod_uid, "sb-crash")
        assert again is not None and again.state is AttachmentState.READY
        assert again.operations == rec.operations and again.incarnation == 0
        assert names(sandbox) == ["lo", "net1"]
        node.runtime.run_pod_sandbox(sb)  # the runtime retries the sandbox: already Ready
        node.runtime.create_container("sb-crash", LabContainer("c-y", "sb-crash", "app"))
        node.runtime.remove_pod_sandbox("sb-crash")
        assert names(sandbox) == ["lo"]
    fresh.preparation.unprepare(claim["metadata"]["uid"])


def test_new_incarnation_never_takes_over_a_live_attachment(node: LabNode) -> None:
    claim, pod = claimed_pod(node)
    meta = pod["metadata"]
    with scratch_netns("dmc1s") as old, scratch_netns("dmc1s") as new:
        node.runtime.run_pod_sandbox(
            LabPod("sb-old", meta["uid"], meta["name"], "default", netns_path(old))
        )
        sb_new = LabPod("sb-new", meta["uid"], meta["name"], "default", netns_path(new))
        with pytest.raises(HookFailed, match="E_CLAIM_IN_USE"):
            node.runtime.run_pod_sandbox(sb_new)
        assert names(new) == ["lo"] and names(old) == ["lo", "net1"]
        node.runtime.stop_pod_sandbox("sb-old")  # the network is torn down at Stop
        assert names(old) == ["lo"]
        node.runtime.run_pod_sandbox(sb_new)
        assert names(new) == ["lo", "net1"] and names(old) == ["lo"]
        node.runtime.remove_pod_sandbox("sb-old")  # a no-op: the tombstone stays
        assert names(new) == ["lo", "net1"]
        node.runtime.remove_pod_sandbox("sb-new")
    node.services.preparation.unprepare(claim["metadata"]["uid"])


def test_claim_with_two_consumers_refuses_the_sandbox(node: LabNode) -> None:
    """This project's profile is one Pod per claim; which reservedFor entry is first does
    not matter."""
    i = next(_n)
    claim = node.claim(f"att-claim-{i}")
    pod = node.pod(f"att-pod-{i}", claim["metadata"]["name"])
    other = node.pod(f"att-other-{i}", claim["metadata"]["name"])
    service = ClaimService(node.cluster, NODE_NAME)
    service.refresh()
    (allocation,) = service.allocator.allocate([claim])
    consumers = [
        {"resource": "pods", "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]}
        for p in (other, pod)
    ]
    claim["status"] = {"allocation": allocation, "reservedFor": consumers}
    node.cluster.replace(r.RESOURCE_CLAIMS, claim, status=True)
    with scratch_netns("dmc1s") as sandbox:
        meta = pod["metadata"]
        sb = LabPod("sb-two", meta["uid"], meta["name"], "default", netns_path(sandbox))
        with pytest.raises(HookFailed, match="E_MULTIPLE_CONSUMERS"):
            node.runtime.run_pod_sandbox(sb)
        assert names(sandbox) == ["lo"]
    # the refusal is a Warning Event on the Pod, reason = the code
    assert node.agent.reporter.flush()
    events = [
        e
        for e in node.cluster.list(r.EVENTS, namespace="default").items
        if e["involvedObject"].get("uid") == pod["metadata"]["uid"]
    ]
    assert [(e["type"], e["reason"], e["involvedObject"]["kind"]) for e in events] == [
        ("Warning", "E_MULTIPLE_CONSUMERS", "Pod")
    ]
    assert events[0]["message"].startswith("RunPodSandbox: E_MULTIPLE_CONSUMERS")


def test_unprepare_after_a_runtime_restart_tears_down_the_stopped_sandbox(
    node: LabNode,
) -> None:
    """containerd announces no StopPodSandbox/RemovePodSandbox for sandboxes from before its
    restart (lab runtime ``restore``). kubelet's NodeUnprepare after the Pod's deletion is
    refused while the runtime still has the sandbox's namespace mounted; once the runtime
    removed it (what it does at Stop), the unprepare tears the attachment down from the
    journal and releases the claim."""
    baseline = snapshot(node.host_ns)
    claim, pod = claimed_pod(node)
    meta, pod_uid = claim["metadata"], pod["metadata"]["uid"]
    ref = ClaimRef(meta["namespace"], meta["uid"], meta["name"])
    assert node.agent.dra is not None
    with scratch_netns("dmc1t") as sandbox:
        sb = LabPod("sb-restored", pod_uid, pod["metadata"]["name"], "default", netns_path(sandbox))
        node.runtime.run_pod_sandbox(sb)
        node.runtime.shutdown()
        runtime = LabNriRuntime(node.runtime.socket_path, request_timeout=30.0)
        runtime.restore([sb], [])
        runtime.start()
        try:
            assert runtime.wait_ready(1, WAIT)
            runtime.stop_pod_sandbox("sb-restored")  # the runtime stops it, tells nobody
            assert runtime.wait_event("unannounced", WAIT) is not None
            (refused,) = node.agent.dra.unprepare([ref]).values()
            assert refused.error and refused.error.startswith("E_ATTACHED"), refused
            assert names(sandbox) == ["lo", "net1"]
        finally:
            runtime.stop()
    # the runtime's namespace mount is gone now (our pin keeps the namespace itself)
    (done,) = node.agent.dra.unprepare([ref]).values()
    assert not done.error, done
    att = node.services.attachments.attachment(pod_uid, "sb-restored")
    assert att is not None and att.state is AttachmentState.REMOVED
    assert node.services.pins.list() == []
    (prep,) = node.services.journal.preparations(meta["uid"])
    assert prep.state is PreparationState.RELEASED
    assert snapshot(node.host_ns) == baseline


def test_two_claims_of_one_class_get_distinct_names_in_the_pods_order(node: LabNode) -> None:
    """Both claims' topology says ``ifName: net1``: the claim the Pod lists first keeps it,
    the other becomes ``net2`` (the Pod's order, not the claims' names, decides), the
    claims' status says so, and removal takes both away."""
    baseline = snapshot(node.host_ns)
    first, second = node.claim("zz-first"), node.claim("aa-second")
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "two-claims", "namespace": "default"},
        "spec": {
            "nodeName": NODE_NAME,
            "containers": [{"name": "app", "image": "busybox"}],
            "resourceClaims": [
                {"name": "a", "resourceClaimName": "zz-first"},
                {"name": "b", "resourceClaimName": "aa-second"},
            ],
        },
    }
    pod = node.cluster.create(r.PODS, body, "default")
    claims = ClaimService(node.cluster, NODE_NAME).allocate([first, second], pod=pod)
    for c in claims:
        meta = c["metadata"]
        assert node.services.preparation.prepare(meta["namespace"], meta["name"], meta["uid"])
    pod_uid = pod["metadata"]["uid"]
    with scratch_netns("dmc2n") as sandbox:
        sb = LabPod("sb-two", pod_uid, "two-claims", "default", netns_path(sandbox))
        node.runtime.run_pod_sandbox(sb)
        assert names(sandbox) == ["lo", "net1", "net2"]
        assert node.services.attachments.status.flush()
        reported = {
            c["metadata"]["name"]: c["status"]["devices"][0]["networkData"]["interfaceName"]
            for c in node.cluster.list(r.RESOURCE_CLAIMS, "default").items
            if c["metadata"]["name"] in ("zz-first", "aa-second")
        }
        assert reported == {"zz-first": "net1", "aa-second": "net2"}
        node.runtime.stop_pod_sandbox("sb-two")
        node.runtime.remove_pod_sandbox("sb-two")
        assert names(sandbox) == ["lo"]
    for c in claims:
        node.services.preparation.unprepare(c["metadata"]["uid"])
    assert snapshot(node.host_ns) == baseline
