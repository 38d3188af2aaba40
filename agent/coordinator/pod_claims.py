"""Which of this driver's ResourceClaims a Pod sandbox must attach (seed 000 §9.2, §10.2).

Kubelet preparation has no Pod; attachment does. The Pod is resolved by the runtime's
namespace/name and verified (UID, node, hostNetwork); claims count when reserved for that
Pod UID alone. A Pod with no claims of ours is distinguished from one whose claim of ours
is not reserved for it — only the former gets a no-op.
"""

from __future__ import annotations

from typing import Any

from dmn.agent.coordinator.verify import Refusal
from dmn.api.cluster import ApiFailure, Cluster, NotFound
from dmn.api.cluster import resources as r


def pod_claims(
    cluster: Cluster, driver: str, node_name: str, namespace: str, pod_name: str, pod_uid: str
) -> list[dict[str, Any]]:
    """Claims of this driver reserved for the Pod, after verifying the Pod itself.

    The Pod is resolved by the runtime's namespace/name and must have the runtime's
    UID, run on this node and not use the host network when it has claims of ours. A
    claim the Pod references that carries our results but is not reserved for it is
    refused (E_NOT_RESERVED): only a Pod with no claims of ours gets a no-op.
    """
    try:
        claims = cluster.list(r.RESOURCE_CLAIMS, namespace).items
    except ApiFailure as exc:
        raise Refusal("E_API", f"listing claims: {exc}", retryable=True) from exc
    ours: dict[str, dict[str, Any]] = {}
    reserved: list[dict[str, Any]] = []
    for c in claims:
        status = c.get("status") or {}
        results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
        if not any(x.get("driver") == driver for x in results):
            continue
        ours[str(c["metadata"]["name"])] = c
        consumers = status.get("reservedFor") or []
        if not any(x.get("uid") == pod_uid for x in consumers):
            continue
        if len(consumers) != 1:
            raise Refusal(
                "E_MULTIPLE_CONSUMERS",
                f"claim {c['metadata']['name']} is reserved for {len(consumers)} consumers",
                "status.reservedFor",
            )
        reserved.append(c)
    try:
        pod = cluster.get(r.PODS, pod_name, namespace)
    except NotFound as exc:
        if reserved:
            raise Refusal(
                "E_POD_NOT_FOUND", f"pod {namespace}/{pod_name} not found", retryable=True
            ) from exc
        return []
    except ApiFailure as exc:
        raise Refusal("E_API", f"reading pod: {exc}", retryable=True) from exc
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    referenced = {
        str(x.get("resourceClaimName"))
        for x in [
            *(spec.get("resourceClaims") or []),
            *((pod.get("status") or {}).get("resourceClaimStatuses") or []),
        ]
        if x.get("resourceClaimName")
    }
    mine = [n for n in sorted(referenced) if n in ours]
    if not reserved and not mine:
        return []
    if meta.get("uid") != pod_uid:
        raise Refusal("E_POD_UID", f"pod {namespace}/{pod_name} is not uid {pod_uid}")
    if spec.get("nodeName") != node_name:
        raise Refusal("E_POD_NODE", f"pod {namespace}/{pod_name} is not bound to this node")
    if spec.get("hostNetwork"):
        raise Refusal("E_HOST_NETWORK", "a hostNetwork Pod cannot take network claims")
    names = {str(c["metadata"]["name"]) for c in reserved}
    for name in mine:
        if name not in names:
            raise Refusal("E_NOT_RESERVED", f"claim {name} is not reserved for this Pod")
    return sorted(reserved, key=lambda c: str(c["metadata"]["name"]))
