"""The informer cache's proof that a Pod has no claim of ours (issue 13, deliverable 7).

Against the lab API server through the real list/watch: what the cache may prove (a Pod
with no claim references; one whose every referenced claim is cached and not ours) and
what it must not (unknown Pod, another UID, a claim of ours referenced or reserved for the
Pod, a referenced claim not cached yet, a template claim without its generated name).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from dmn.agent.coordinator.node_objects import NodeObjects, referenced_claims
from dmn.api.cluster import Cluster, connect
from dmn.api.cluster import resources as r
from dmn.lab.apiserver import LabApiServer
from tests.waiting import wait_for

DRIVER = "dra-multi-network.schseba.github.io"
NODE = "n1"


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with LabApiServer() as srv, Cluster(connect(url=srv.url)) as c:
        yield c


def pod(name: str, node: str = NODE, claims: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "a", "image": "x"}],
            "resourceClaims": claims or [],
        },
    }


def claim(name: str, driver: str, reserved_for: str = "") -> dict[str, Any]:
    status: dict[str, Any] = {
        "allocation": {
            "devices": {"results": [{"request": "r", "driver": driver, "pool": "p", "device": "d"}]}
        }
    }
    if reserved_for:
        status["reservedFor"] = [{"resource": "pods", "name": "x", "uid": reserved_for}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "r",
                        "exactly": {
                            "deviceClassName": "c",
                            "allocationMode": "ExactCount",
                            "count": 1,
                        },
                    }
                ]
            }
        },
        "status": status,
    }


def create_claim(cluster: Cluster, body: dict[str, Any]) -> None:
    """Create, then write the status (a create drops it, as on a real API server)."""
    created = cluster.create(r.RESOURCE_CLAIMS, body, "default")
    created["status"] = body["status"]
    cluster.replace(r.RESOURCE_CLAIMS, created, status=True)


def test_what_the_cache_proves_and_what_it_must_not(cluster: Cluster) -> None:
    objects = NodeObjects(cluster, NODE, DRIVER).start()
    try:
        assert objects.wait_synced(30)
        plain = cluster.create(r.PODS, pod("plain"), "default")
        elsewhere = cluster.create(r.PODS, pod("elsewhere", node="n2"), "default")
        create_claim(cluster, claim("gpu", "gpu.example.com"))
        other = cluster.create(
            r.PODS, pod("other", claims=[{"name": "g", "resourceClaimName": "gpu"}]), "default"
        )
        ours_pod = cluster.create(
            r.PODS, pod("ours", claims=[{"name": "n", "resourceClaimName": "net"}]), "default"
        )
        pending = cluster.create(
            r.PODS, pod("pending", claims=[{"name": "n", "resourceClaimName": "later"}]), "default"
        )
        uid = {p["metadata"]["name"]: p["metadata"]["uid"] for p in (plain, other, ours_pod)}

        def proves(name: str, pod_uid: str) -> bool:
            return objects.proves_no_claims("default", name, pod_uid)

        wait_for(lambda: proves("plain", uid["plain"]), timeout=30, what="plain proven")
        wait_for(lambda: proves("other", uid["other"]), timeout=30, what="other proven")
        assert not proves("plain", "another-uid")  # the runtime's UID must match
        assert not proves("elsewhere", elsewhere["metadata"]["uid"])  # not this node's Pod
        assert not proves("unknown", "u")
        assert not proves("pending", pending["metadata"]["uid"])  # its claim is not cached
        # cached but not allocated yet: unknown (its allocation may be ours), never proven
        cluster.create(r.RESOURCE_CLAIMS, claim("later", DRIVER), "default")  # status dropped
        wait_for(lambda: ("default", "later") in objects._claims, timeout=30, what="later cached")
        assert not objects._claims[("default", "later")].allocated
        assert not proves("pending", pending["metadata"]["uid"])
        # the referenced claim appears and is ours: never proven
        create_claim(cluster, claim("net", DRIVER))
        wait_for(
            lambda: (
                objects._claims.get(("default", "net")) is not None
                and objects._claims[("default", "net")].ours
            ),
            timeout=30,
            what="the claim of ours cached",
        )
        assert not proves("ours", uid["ours"])
        # a claim of ours reserved for a Pod that does not reference it: never proven
        create_claim(cluster, claim("stray", DRIVER, uid["plain"]))
        wait_for(lambda: not proves("plain", uid["plain"]), timeout=30, what="stray seen")
        cluster.delete(r.RESOURCE_CLAIMS, "stray", "default")
        wait_for(lambda: proves("plain", uid["plain"]), timeout=30, what="stray gone")
    finally:
        objects.stop()


def test_template_claims_count_once_their_name_is_known() -> None:
    templated = pod("t", claims=[{"name": "n", "resourceClaimTemplateName": "tmpl"}])
    assert referenced_claims(templated) is None  # unknown, not "none"
    templated["status"] = {"resourceClaimStatuses": [{"name": "n", "resourceClaimName": "t-n"}]}
    assert referenced_claims(templated) == ["t-n"]
    assert referenced_claims(pod("p")) == []


@pytest.mark.adversarial
def test_an_extended_resource_claim_is_referenced_and_an_unbound_pod_proves_nothing(
    cluster: Cluster,
) -> None:
    """A Pod that asks for a DRA-backed extended resource (``resources.limits``) has no
    ``spec.resourceClaims``: the scheduler names the claim it made only in
    ``status.extendedResourceClaimStatus``, before it binds. That claim is referenced, and
    a cached version of the Pod from before its binding proves nothing (it may predate the
    status write): both would otherwise let RunPodSandbox pass without the network."""
    extended = pod("x")
    extended["status"] = {
        "extendedResourceClaimStatus": {
            "resourceClaimName": "x-extended-resources-abcde",
            "requestMappings": [
                {"containerName": "a", "resourceName": "example.com/net", "requestName": "r"}
            ],
        }
    }
    assert referenced_claims(extended) == ["x-extended-resources-abcde"]
    objects = NodeObjects(cluster, NODE, DRIVER).start()
    try:
        assert objects.wait_synced(30)
        unbound = cluster.create(r.PODS, pod("unbound", node=""), "default")
        bound = cluster.create(r.PODS, pod("bound"), "default")
        wait_for(
            lambda: objects.proves_no_claims("default", "bound", bound["metadata"]["uid"]),
            timeout=30,
            what="a bound Pod without claims proven",
        )
        assert not objects.proves_no_claims("default", "unbound", unbound["metadata"]["uid"])
    finally:
        objects.stop()
