"""RunPodSandbox's API reads with the informer cache (issue 15): fewer reads, same decisions.

Against the lab API server through the real list/watch. With the Pod cached under the
runtime's UID, :func:`pod_claims` reads the Pod and each claim by name and never lists the
namespace; every decision is the one it makes without a cache, and the same whether the Pod
is read while the claims are read (the agent's way, issue 15) or after them. Adversarial:
a cache frozen before the claim's reservation moved to another Pod, before the Pod was
deleted or recreated under another UID, or that never saw the Pod, still refuses exactly as
the uncached path does, because the Pod and the claims are always read fresh. The revision
cache answers only for the exact name, UID and digest the allocation pins.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

import pytest

from dmn.agent.coordinator.node_objects import NodeObjects
from dmn.agent.coordinator.pod_claims import pod_claims
from dmn.agent.coordinator.verify import Refusal
from dmn.api.cluster import Cluster, connect
from dmn.api.cluster import resources as r
from dmn.api.cluster.resources import Resource
from dmn.lab.apiserver import LabApiServer
from tests.coordinator.test_node_objects import DRIVER, NODE, claim, create_claim, pod
from tests.waiting import wait_for

pytestmark = pytest.mark.adversarial


class CountingCluster:
    """The real client, recording which reads the code under test makes."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.calls: list[tuple[str, str]] = []

    def get(self, res: Resource, name: str, namespace: str | None = None) -> Any:
        self.calls.append(("get", res.plural))
        return self.cluster.get(res, name, namespace)

    def list(self, res: Resource, namespace: str | None = None, **kw: Any) -> Any:
        self.calls.append(("list", res.plural))
        return self.cluster.list(res, namespace, **kw)


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with LabApiServer() as srv, Cluster(connect(url=srv.url)) as c:
        yield c


def outcome(
    cluster: Cluster | CountingCluster,
    name: str,
    uid: str,
    objects: NodeObjects | None,
) -> str | list[str]:
    """The claim names attached, or the refusal code: the same (asserted) with the Pod read
    while the claims are read, as the agent does, and with the reads in turn; the reads of
    the concurrent one go through ``cluster``."""
    plain = cluster.cluster if isinstance(cluster, CountingCluster) else cluster
    in_turn = _outcome(plain, name, uid, objects, None)
    with ThreadPoolExecutor(max_workers=2) as reads:
        concurrent = _outcome(cluster, name, uid, objects, reads)
    assert concurrent == in_turn
    return concurrent


def _outcome(
    cluster: Cluster | CountingCluster,
    name: str,
    uid: str,
    objects: NodeObjects | None,
    reads: ThreadPoolExecutor | None,
) -> str | list[str]:
    try:
        got = pod_claims(cast(Cluster, cluster), DRIVER, NODE, "default", name, uid, objects, reads)
    except Refusal as exc:
        return exc.code
    return [c["metadata"]["name"] for c in got]


def reserve(cluster: Cluster, name: str, *pod_uids: str) -> None:
    current = cluster.get(r.RESOURCE_CLAIMS, name, "default")
    current["status"]["reservedFor"] = [
        {"resource": "pods", "name": "x", "uid": u} for u in pod_uids
    ]
    cluster.replace(r.RESOURCE_CLAIMS, current, status=True)


def cached_objects(cluster: Cluster, *pods: dict[str, Any]) -> NodeObjects:
    objects = NodeObjects(cluster, NODE, DRIVER).start()
    assert objects.wait_synced(30)
    for p in pods:
        meta = p["metadata"]
        wait_for(
            lambda m=meta: objects.pod("default", m["name"], m["uid"]) is not None,  # type: ignore[misc]
            timeout=30,
            what=f"{meta['name']} cached",
        )
    return objects


def test_cached_pod_reads_each_claim_by_name_and_decides_as_without_cache(cluster: Cluster) -> None:
    refs = [{"name": "n", "resourceClaimName": "net"}, {"name": "g", "resourceClaimName": "gpu"}]
    p = cluster.create(r.PODS, pod("p", claims=refs), "default")
    uid = p["metadata"]["uid"]
    create_claim(cluster, claim("net", DRIVER, uid))
    create_claim(cluster, claim("gpu", "gpu.example.com", uid))
    create_claim(cluster, claim("unrelated", DRIVER, "someone-else"))
    objects = cached_objects(cluster, p)
    try:
        wait_for(lambda: objects.reserved_ours("default", uid) == {"net"}, timeout=30, what="net")
        counted = CountingCluster(cluster)
        assert outcome(counted, "p", uid, objects) == ["net"]
        # the Pod and the two claims it references, one GET each; no namespace list
        assert sorted(counted.calls) == [
            ("get", "pods"),
            ("get", "resourceclaims"),
            ("get", "resourceclaims"),
        ]
        assert outcome(cluster, "p", uid, None) == ["net"]
        # every refusal of the uncached path, through the cache
        for consumers, code in (
            (["another"], "E_NOT_RESERVED"),
            ([uid, "another"], "E_MULTIPLE_CONSUMERS"),
        ):
            reserve(cluster, "net", *consumers)
            assert outcome(cluster, "p", uid, objects) == code
            assert outcome(cluster, "p", uid, None) == code
        reserve(cluster, "net", uid)
        assert outcome(cluster, "p", "another-uid", objects) == "E_POD_UID"
        assert outcome(cluster, "p", "another-uid", None) == "E_POD_UID"
    finally:
        objects.stop()


@pytest.mark.parametrize("spec", [{"nodeName": "n2"}, {"hostNetwork": True}])
def test_pod_checks_hold_through_the_cache(cluster: Cluster, spec: dict[str, Any]) -> None:
    body = pod("p", claims=[{"name": "n", "resourceClaimName": "net"}])
    body["spec"].update(spec)
    p = cluster.create(r.PODS, body, "default")
    uid = p["metadata"]["uid"]
    create_claim(cluster, claim("net", DRIVER, uid))
    objects = NodeObjects(cluster, NODE, DRIVER).start()
    try:
        assert objects.wait_synced(30)
        code = "E_POD_NODE" if "nodeName" in spec else "E_HOST_NETWORK"
        assert outcome(cluster, "p", uid, objects) == code
        assert outcome(cluster, "p", uid, None) == code
    finally:
        objects.stop()


def test_a_frozen_cache_never_outvotes_the_api_server(cluster: Cluster) -> None:
    """The cache stops (it lags forever) while it still says the claim is reserved for the
    Pod; then the API server changes. Every answer is the uncached one."""
    refs = [{"name": "n", "resourceClaimName": "net"}]
    p = cluster.create(r.PODS, pod("p", claims=refs), "default")
    uid = p["metadata"]["uid"]
    create_claim(cluster, claim("net", DRIVER, uid))
    objects = cached_objects(cluster, p)
    wait_for(lambda: objects.reserved_ours("default", uid) == {"net"}, timeout=30, what="net")
    objects.stop()
    # the reservation moved to another Pod: refused, though the cache says reserved
    reserve(cluster, "net", "another-pod")
    assert objects.reserved_ours("default", uid) == {"net"}
    assert outcome(cluster, "p", uid, objects) == "E_NOT_RESERVED"
    # reserved for the Pod again, then the Pod is deleted (gracefully: still readable, as
    # today; then for good): the claim still names its UID
    reserve(cluster, "net", uid)
    cluster.delete(r.PODS, "p", "default")
    assert outcome(cluster, "p", uid, objects) == outcome(cluster, "p", uid, None)
    cluster.delete(r.PODS, "p", "default", grace_period_seconds=0)
    assert objects.pod("default", "p", uid) is not None  # the frozen cache still has it
    assert outcome(cluster, "p", uid, objects) == "E_POD_NOT_FOUND"
    assert outcome(cluster, "p", uid, None) == "E_POD_NOT_FOUND"
    # recreated under another UID (a new incarnation that does not reference the claim):
    # the runtime's old UID is refused as without a cache
    cluster.create(r.PODS, pod("p"), "default")
    counted = CountingCluster(cluster)
    assert outcome(counted, "p", uid, objects) == "E_POD_UID"
    assert ("list", "resourceclaims") in counted.calls  # decided on the namespace's claims
    assert outcome(cluster, "p", uid, None) == "E_POD_UID"
    # a claim that is gone: nothing of ours is reserved, the uncached answer is the same
    cluster.delete(r.RESOURCE_CLAIMS, "net", "default")
    assert outcome(cluster, "p", uid, objects) == outcome(cluster, "p", uid, None)


def test_a_pod_the_cache_never_saw_is_read_and_the_namespace_listed(cluster: Cluster) -> None:
    objects = NodeObjects(cluster, NODE, DRIVER).start()
    try:
        assert objects.wait_synced(30)
        objects.stop()  # frozen before the Pod exists
        p = cluster.create(r.PODS, pod("p", claims=[{"name": "n", "resourceClaimName": "net"}]))
        uid = p["metadata"]["uid"]
        create_claim(cluster, claim("net", DRIVER, uid))
        counted = CountingCluster(cluster)
        assert outcome(counted, "p", uid, objects) == ["net"]
        assert sorted(counted.calls) == [("get", "pods"), ("list", "resourceclaims")]
    finally:
        objects.stop()


def test_a_cached_pod_with_an_unnamed_generated_claim_lists_the_namespace(cluster: Cluster) -> None:
    body = pod("t", claims=[{"name": "n", "resourceClaimTemplateName": "tmpl"}])
    t = cluster.create(r.PODS, body, "default")
    uid = t["metadata"]["uid"]
    create_claim(cluster, claim("t-n", DRIVER, uid))
    objects = cached_objects(cluster, t)
    try:
        counted = CountingCluster(cluster)
        # which claim the template generated is unknown to the cache: the namespace is listed
        assert outcome(counted, "t", uid, objects) == outcome(cluster, "t", uid, None)
        assert sorted(counted.calls) == [("get", "pods"), ("list", "resourceclaims")]
    finally:
        objects.stop()


def test_revision_cache_answers_only_for_the_pinned_identity(cluster: Cluster) -> None:
    objects = NodeObjects(cluster, NODE, DRIVER)
    objects._revisions_synced.set()
    rev = {"metadata": {"name": "rev-a", "uid": "u1"}, "spec": {"digest": "sha256:aa"}}
    objects._revision_event("ADDED", rev)
    assert objects.revision("rev-a", "u1", "sha256:aa") is rev
    assert objects.revision("rev-a", "u2", "sha256:aa") is None  # another incarnation
    assert objects.revision("rev-a", "u1", "sha256:bb") is None  # another content
    assert objects.revision("rev-b", "u1", "sha256:aa") is None
    objects._revision_event("DELETED", rev)
    assert objects.revision("rev-a", "u1", "sha256:aa") is None
    objects._revision_event("ADDED", rev)
    objects._revisions_synced.clear()  # a failed informer proves nothing
    assert objects.revision("rev-a", "u1", "sha256:aa") is None


def test_prepare_and_attach_take_the_pinned_revision_from_the_cache_only_when_it_would_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """:class:`ClaimVerifier` with ``cached``: the informer's copy of the exact pinned
    revision serves when its phase is one the check accepts (Ready; also Superseded for an
    attachment); a cached copy whose phase would refuse is never used — the API server's
    copy decides — and without ``cached`` the API server is always asked."""
    from types import SimpleNamespace

    from dmn.agent.coordinator import claim_verifier
    from dmn.agent.coordinator.claim_verifier import ClaimVerifier
    from dmn.agent.coordinator.config import NodeConfig
    from dmn.agent.coordinator.verify import revision_usable

    def rev(phase: str) -> dict[str, Any]:
        ready = [{"type": "Ready", "status": "True"}] if phase == "Ready" else []
        return {
            "metadata": {"name": "rev-a", "uid": "u1"},
            "spec": {"digest": "sha256:aa"},
            "status": {"phase": phase, "conditions": ready},
        }

    fresh = rev("Ready")
    ref = SimpleNamespace(name="rev-a", uid="u1", digest="sha256:aa")
    result = SimpleNamespace(root=SimpleNamespace(revision_ref=ref))
    monkeypatch.setattr(claim_verifier, "driver_results", lambda claim, driver: [result])

    def check(uid: str, results: Any, revision: Any, **kw: Any) -> Any:
        if not revision_usable(revision, kw.get("accept_superseded", False)):
            raise Refusal("E_REVISION_NOT_READY", "not ready")
        return revision

    monkeypatch.setattr(claim_verifier, "verify_allocation", check)

    class Cache:
        copy: dict[str, Any] | None = None

        def revision(self, name: str, uid: str, digest: str) -> dict[str, Any] | None:
            return self.copy if (name, uid, digest) == ("rev-a", "u1", "sha256:aa") else None

    class Api:
        reads = 0

        def get(self, res: Resource, name: str, namespace: str | None = None) -> Any:
            self.reads += 1
            return fresh

    cache, api = Cache(), Api()
    devices = SimpleNamespace(personas=lambda: {})
    verifier = ClaimVerifier(
        NodeConfig(NODE, "node-uid", state_dir=Path("/nonexistent")),
        cast(Cluster, api),
        cast(Any, devices),
        {},
        cast(NodeObjects, cache),
    )
    claim_obj = {"metadata": {"uid": "c1"}}
    for cached_phase, superseded_ok, reads, served in (
        ("Ready", False, 0, "cache"),  # a prepare: one round trip fewer
        ("Superseded", False, 1, "api"),  # would refuse: the API server decides
        ("Failed", False, 1, "api"),
        ("Superseded", True, 0, "cache"),  # an attachment of a prepared claim accepts it
        ("Pending", True, 1, "api"),
    ):
        cache.copy, api.reads = rev(cached_phase), 0
        got = verifier.verify(claim_obj, accept_superseded=superseded_ok, cached=True)
        assert api.reads == reads
        assert got is (cache.copy if served == "cache" else fresh)
    cache.copy, api.reads = rev("Ready"), 0
    assert verifier.verify(claim_obj) is fresh and api.reads == 1  # not cached: always asked
    cache.copy, fresh = None, rev("Superseded")
    with pytest.raises(Refusal) as info:
        verifier.verify(claim_obj, cached=True)  # nothing cached: the API server's refusal
    assert info.value.code == "E_REVISION_NOT_READY"
