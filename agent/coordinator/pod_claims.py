"""Which of this driver's ResourceClaims a Pod sandbox must attach (design §7.1, §7.3).

Kubelet preparation has no Pod; attachment does. The Pod is resolved by the runtime's
namespace/name and verified (UID, node, hostNetwork); claims count when reserved for that
Pod UID alone. A Pod with no claims of ours is distinguished from one whose claim of ours
is not reserved for it — only the former gets a no-op.

Fewer reads, the same decision (issue 15: listing the namespace's claims, reading the Pod
and reading the revision were a third of RunPodSandbox). The Pod is always read fresh (its
UID, node and hostNetwork decide), and so is every claim (``reservedFor`` authorizes). What
the informer cache saves is the namespace *list*, whose cost grows with every claim in the
namespace: when it holds the Pod under the runtime's UID with every claim reference
resolved (:meth:`.node_objects.NodeObjects.pod`; a Pod's claim references are immutable
for its UID), only the claims it references and those of ours the cache saw reserved for
it are read, one GET each. If the fresh Pod turns out to be another incarnation, the
namespace is listed and the decision is exactly the uncached one; without a usable cache
entry the namespace is listed, as before. Both feed the same check (:func:`_decide`). The
one thing a GET by name cannot see that a list saw is a claim of ours reserved for the Pod
that the Pod does not reference and the cache has not seen yet — the same lag
:meth:`~.node_objects.NodeObjects.proves_no_claims` already accepts (the scheduler only
reserves claims a Pod references). The revision comes from the cache when it holds exactly
the pinned one (:mod:`.claim_verifier`).

The Pod and the claims are independent fresh reads: with ``reads`` (an executor) the Pod's
GET is sent while the claims are read, so RunPodSandbox waits one round trip for both
instead of two in turn (they were a third of the agent's RunPodSandbox in
``benchmarks/pod_storm.py``'s profile). The reads and the decision are the same ones; a
failure of either read is reported exactly as before.
"""

from __future__ import annotations

from concurrent.futures import Executor, Future
from typing import Any

from dmn.agent.coordinator.node_objects import NodeObjects, referenced_claims
from dmn.agent.coordinator.verify import Refusal
from dmn.api.cluster import ApiFailure, Cluster, NotFound
from dmn.api.cluster import resources as r


def pod_claims(
    cluster: Cluster,
    driver: str,
    node_name: str,
    namespace: str,
    pod_name: str,
    pod_uid: str,
    objects: NodeObjects | None = None,
    reads: Executor | None = None,
) -> list[dict[str, Any]]:
    """Claims of this driver reserved for the Pod, after verifying the Pod itself.

    The Pod is resolved by the runtime's namespace/name and must have the runtime's
    UID, run on this node and not use the host network when it has claims of ours. A
    claim the Pod references that carries our results but is not reserved for it is
    refused (E_NOT_RESERVED): only a Pod with no claims of ours gets a no-op.
    ``reads``: the Pod is read on it while this thread reads the claims.
    """
    pod_read: Future[dict[str, Any]] | None = None
    if reads is not None:
        pod_read = reads.submit(cluster.get, r.PODS, pod_name, namespace)
    cached = objects.pod(namespace, pod_name, pod_uid) if objects is not None else None
    names: set[str] | None = None
    try:
        if cached is not None and objects is not None and referenced_claims(cached) is not None:
            names = _referenced(cached) | objects.reserved_ours(namespace, pod_uid)
            claims = _read_claims(cluster, namespace, sorted(names))
        else:
            claims = _list_claims(cluster, namespace)
        ours, reserved = _ours_reserved(claims, driver, pod_uid)
    except BaseException:
        if pod_read is not None:
            pod_read.cancel()  # or it finishes unused
        raise
    try:
        pod = (
            pod_read.result() if pod_read is not None else cluster.get(r.PODS, pod_name, namespace)
        )
    except NotFound as exc:
        if reserved:
            raise Refusal(
                "E_POD_NOT_FOUND", f"pod {namespace}/{pod_name} not found", retryable=True
            ) from exc
        return []
    except ApiFailure as exc:
        raise Refusal("E_API", f"reading pod: {exc}", retryable=True) from exc
    if names is not None and (pod.get("metadata") or {}).get("uid") != pod_uid:
        # the cache named the claims of another incarnation: decide on the namespace's
        # claims, exactly as without a cache
        ours, reserved = _ours_reserved(_list_claims(cluster, namespace), driver, pod_uid)
    elif names is not None and not _referenced(pod) <= names:
        more = _read_claims(cluster, namespace, sorted(_referenced(pod) - names))
        ours, reserved = _ours_reserved(claims + more, driver, pod_uid)
    return _decide(ours, reserved, pod, node_name, namespace, pod_name, pod_uid)


def _list_claims(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    try:
        return cluster.list(r.RESOURCE_CLAIMS, namespace).items
    except ApiFailure as exc:
        raise Refusal("E_API", f"listing claims: {exc}", retryable=True) from exc


def _read_claims(cluster: Cluster, namespace: str, names: list[str]) -> list[dict[str, Any]]:
    """Each named claim from the API server; one that does not exist is not listed (as a
    namespace list would not list it)."""
    out = []
    for name in names:
        try:
            out.append(cluster.get(r.RESOURCE_CLAIMS, name, namespace))
        except NotFound:
            continue
        except ApiFailure as exc:
            raise Refusal("E_API", f"reading claim {name}: {exc}", retryable=True) from exc
    return out


def _referenced(pod: dict[str, Any]) -> set[str]:
    """Every claim the Pod names: its own entries, the claims made from its templates, and
    the claim the scheduler made for its extended resources (status only)."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    return {
        str(x.get("resourceClaimName"))
        for x in [
            *(spec.get("resourceClaims") or []),
            *(status.get("resourceClaimStatuses") or []),
            status.get("extendedResourceClaimStatus") or {},
        ]
        if isinstance(x, dict) and x.get("resourceClaimName")
    }


def _ours_reserved(
    claims: list[dict[str, Any]], driver: str, pod_uid: str
) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """The claims carrying our results (by name), and those of them reserved for the Pod
    (refusing a claim reserved for more than one consumer)."""
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
    return ours, reserved


def _decide(
    ours: dict[str, dict[str, Any]],
    reserved: list[dict[str, Any]],
    pod: dict[str, Any],
    node_name: str,
    namespace: str,
    pod_name: str,
    pod_uid: str,
) -> list[dict[str, Any]]:
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    mine = [n for n in sorted(_referenced(pod)) if n in ours]
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
    order = _spec_order(pod)
    return sorted(
        reserved,
        key=lambda c: (order.get(str(c["metadata"]["name"]), len(order)), c["metadata"]["name"]),
    )


def _spec_order(pod: dict[str, Any]) -> dict[str, int]:
    """Claim name → position of its entry in ``spec.resourceClaims`` (a template's claim by
    the name ``status.resourceClaimStatuses`` records for that entry): the order a Pod's
    claims are attached in, which decides who keeps a contested interface name."""
    generated = {
        str(x.get("name")): str(x.get("resourceClaimName"))
        for x in (pod.get("status") or {}).get("resourceClaimStatuses") or []
        if x.get("resourceClaimName")
    }
    order: dict[str, int] = {}
    for i, entry in enumerate((pod.get("spec") or {}).get("resourceClaims") or []):
        name = entry.get("resourceClaimName") or generated.get(str(entry.get("name")))
        if name and str(name) not in order:
            order[str(name)] = i
    return order
