"""NodePrepare refuses a bad allocation with a stable reason code before any mutation.

Each case takes a claim the lab allocator allocated against the lab node's real slices,
bends one fact of its recorded allocation (through the status subresource, as a buggy
scheduler or a stale cache could), and asks the coordinator to prepare it: the refusal
names the code, and the journal holds no operation and no preparation afterwards.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from pyroute2 import IPRoute

from dmn.agent.coordinator import Refusal
from dmn.agent.coordinator.verify import driver_results, verify_allocation
from dmn.agent.protos import dra_v1_pb2, dra_v1_pb2_grpc
from dmn.api.cluster import resources as r
from dmn.api.identity import DRIVER
from dmn.lab.allocator.service import ClaimService
from dmn.lab.node import NODE_NAME
from tests.coordinator.lab_node import LabNode, lab_node

pytestmark = pytest.mark.netns

_names = itertools.count()
OTHER_DIGEST = "sha256:" + "ab" * 32


@pytest.fixture(scope="module")
def node() -> Iterator[LabNode]:
    with lab_node() as n:
        yield n


def allocated(node: LabNode) -> dict[str, Any]:
    return bent(node, lambda d: None)


def bent(
    node: LabNode, change: Callable[[dict[str, Any]], None], device_class: str = ""
) -> dict[str, Any]:
    """A fresh claim whose first recorded allocation is the allocator's answer, bent."""
    claim = node.claim(f"refuse-{next(_names)}", device_class=device_class)
    service = ClaimService(node.cluster, NODE_NAME)
    service.refresh()
    (allocation,) = service.allocator.allocate([claim])
    service.allocator.release(claim["metadata"]["uid"])
    allocation = copy.deepcopy(allocation)
    change(allocation["devices"])
    claim["status"] = {"allocation": allocation}
    stored: dict[str, Any] = node.cluster.replace(r.RESOURCE_CLAIMS, claim, status=True)
    return stored


def refused(node: LabNode, claim: dict[str, Any], uid: str | None = None) -> Refusal:
    meta = claim["metadata"]
    before = node.services.journal.operation_ids()
    with pytest.raises(Refusal) as info:
        node.services.preparation.prepare(meta["namespace"], meta["name"], uid or meta["uid"])
    assert node.services.journal.operation_ids() == before
    assert node.services.journal.preparations(meta["uid"]) == []
    return info.value


def params(devices: dict[str, Any]) -> dict[str, Any]:
    (cfg,) = devices["config"]
    p: dict[str, Any] = cfg["opaque"]["parameters"]
    return p


def test_wrong_revision_digest(node: LabNode) -> None:
    claim = bent(node, lambda d: params(d)["revisionRef"].update(digest=OTHER_DIGEST))
    err = refused(node, claim)
    assert (err.code, err.field) == ("E_REVISION_DIGEST", "revisionRef.digest")


def test_wrong_revision_uid(node: LabNode) -> None:
    claim = bent(node, lambda d: params(d)["revisionRef"].update(uid="not-the-uid"))
    assert refused(node, claim).code == "E_REVISION_UID"


def test_device_of_another_node(node: LabNode) -> None:
    claim = bent(node, lambda d: d["results"][0].update(pool="other-node"))
    err = refused(node, claim)
    assert err.code == "E_NOT_THIS_NODE"
    assert err.field == "status.allocation.devices.results[0]"


def test_device_this_node_does_not_publish(node: LabNode) -> None:
    claim = bent(node, lambda d: d["results"][0].update(device="inv-000000000000-macvlan"))
    assert refused(node, claim).code == "E_UNKNOWN_DEVICE"


def test_claim_origin_root_binding(node: LabNode) -> None:
    claim = bent(node, lambda d: d["config"][0].update(source="FromClaim"))
    assert refused(node, claim).code == "E_CLAIM_ORIGIN_CONFIG"


def test_contract_digest_not_the_revisions(node: LabNode) -> None:
    claim = bent(node, lambda d: params(d).update(pluginContractDigest=OTHER_DIGEST))
    assert refused(node, claim).code == "E_CONTRACT_MISMATCH"


def test_root_covered_twice(node: LabNode) -> None:
    def twice(d: dict[str, Any]) -> None:
        extra = copy.deepcopy(d["results"][0])
        extra["shareID"] = "0b2c1f4e-5d6a-4f00-9c1e-000000000002"
        d["results"].append(extra)

    assert refused(node, bent(node, twice)).code == "E_ROOT_COVERAGE"


def test_claim_uid_mismatch(node: LabNode) -> None:
    claim = allocated(node)
    assert refused(node, claim, uid="another-uid").code == "E_CLAIM_UID"


def test_unallocated_claim(node: LabNode) -> None:
    claim = node.claim(f"refuse-{next(_names)}")
    assert refused(node, claim).code == "E_NOT_ALLOCATED"


def test_revision_not_ready_is_refused(node: LabNode) -> None:
    claim = allocated(node)
    results = driver_results(claim, DRIVER)
    revision = node.cluster.get(r.NETWORK_TOPOLOGY_REVISIONS, node.revision)
    kw: dict[str, Any] = {
        "pool": NODE_NAME,
        "personas": node.services.devices.personas(),
        "plugins": node.services.attachments.claims.plugins,
    }
    uid = claim["metadata"]["uid"]
    for phase in ("Pending", "Failed", "Superseded"):
        revision["status"]["phase"] = phase
        with pytest.raises(Refusal) as info:
            verify_allocation(uid, results, revision, **kw)
        assert info.value.code == "E_REVISION_NOT_READY"
    # a prepared claim still attaches under the revision it was prepared with
    verified = verify_allocation(uid, results, revision, accept_superseded=True, **kw)
    assert verified.revision == node.revision


def test_whole_link_refused_while_a_share_of_it_is_prepared(node: LabNode) -> None:
    """The node re-checks what the allocator's compatibility counters should prevent: a
    link handed off whole while a macvlan share of it is held (design §7.1 item 5)."""
    shared = allocated(node)
    meta = shared["metadata"]
    assert node.services.preparation.prepare(meta["namespace"], meta["name"], meta["uid"])
    (result,) = shared["status"]["allocation"]["devices"]["results"]
    parent = node.services.devices.personas().by_name()[result["device"]].inventory_id
    (share,) = node.services.journal.shares(parent)
    assert (share.claim_uid, share.share_id) == (meta["uid"], result["shareID"])

    kernel_class = node.kernel_class()
    kernel = next(
        p.name
        for p in node.services.devices.personas().personas
        if p.inventory_id == parent and p.plugin == "host-cni"
    )
    claim = bent(node, lambda d: d["results"][0].update(device=kernel), kernel_class)
    assert refused(node, claim).code == "E_SHARED_BUSY"

    node.services.preparation.unprepare(meta["uid"])
    assert node.services.journal.shares(parent) == []


def test_link_that_changed_identity_is_refused(node: LabNode) -> None:
    """A link found under the scanned name but with another MAC is not the device that was
    published: no handle is made from a name alone."""
    claim = allocated(node)
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    persona = node.services.devices.personas().by_name()[result["device"]]
    facts = node.services.devices.link(persona.inventory_id)
    assert facts is not None and facts.mac
    with IPRoute(netns=node.host_ns) as ipr:
        index = ipr.link_lookup(ifname=facts.ifname)[0]
        ipr.link("set", index=index, address="02:00:00:00:c1:01")
        try:
            assert refused(node, claim).code == "E_DEVICE_IDENTITY"
        finally:
            ipr.link("set", index=index, address=facts.mac)


def test_one_bad_claim_never_fails_the_kubelet_batch(node: LabNode) -> None:
    good = allocated(node)
    meta = good["metadata"]
    refs = [
        dra_v1_pb2.Claim(namespace="default", uid=meta["uid"], name=meta["name"]),
        dra_v1_pb2.Claim(namespace="default", uid="no-such-uid", name="no-such-claim"),
    ]
    with grpc.insecure_channel(f"unix://{node.kubelet.dra_socket}") as channel:
        stub = dra_v1_pb2_grpc.DRAPluginStub(channel)
        resp = stub.NodePrepareResources(dra_v1_pb2.NodePrepareResourcesRequest(claims=refs))
        assert resp.claims[meta["uid"]].error == ""
        assert len(resp.claims[meta["uid"]].devices) == 1
        assert resp.claims["no-such-uid"].error.startswith("E_CLAIM_NOT_FOUND")
        req = dra_v1_pb2.NodeUnprepareResourcesRequest(claims=refs[:1])
        assert stub.NodeUnprepareResources(req).claims[meta["uid"]].error == ""


def test_refusals_become_events_on_the_claim_and_metrics(node: LabNode) -> None:
    from prometheus_client import REGISTRY

    claim = bent(node, lambda d: params(d)["revisionRef"].update(digest=OTHER_DIGEST))
    meta = claim["metadata"]
    labels = {"request": "NodePrepareResources", "code": "E_REVISION_DIGEST"}
    before = REGISTRY.get_sample_value("dmn_refusals_total", labels) or 0.0
    ref = dra_v1_pb2.Claim(namespace=meta["namespace"], uid=meta["uid"], name=meta["name"])
    with grpc.insecure_channel(f"unix://{node.kubelet.dra_socket}") as channel:
        stub = dra_v1_pb2_grpc.DRAPluginStub(channel)
        req = dra_v1_pb2.NodePrepareResourcesRequest(claims=[ref])
        resp = stub.NodePrepareResources(req)
    assert resp.claims[meta["uid"]].error.startswith("E_REVISION_DIGEST")
    assert REGISTRY.get_sample_value("dmn_refusals_total", labels) == before + 1
    assert node.agent.reporter.flush()
    events = [
        e
        for e in node.cluster.list(r.EVENTS, namespace=meta["namespace"]).items
        if e["involvedObject"].get("uid") == meta["uid"]
    ]
    (event,) = events
    assert event["type"] == "Warning" and event["reason"] == "E_REVISION_DIGEST"
    assert event["involvedObject"]["kind"] == "ResourceClaim"
    assert event["message"].startswith("NodePrepareResources: E_REVISION_DIGEST")


def test_readiness_conditions_are_honest(node: LabNode) -> None:
    ready = node.agent.readiness_conditions()
    assert ready["journal-writable"]() == (True, "")
    assert ready["api-reachable"]() == (True, "")
    # no kubelet runs in the lab: nothing confirmed the registration, and readiness says so
    assert ready["kubelet-registered"]() == (
        False,
        "the kubelet has not confirmed the plugin registration",
    )
    assert node.agent.liveness_conditions()["journal-writable"]() == (True, "")
