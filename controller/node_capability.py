"""Node capability labels: which Nodes may receive Pods of which revisions (design §9.3).

For one Node, the reconciler reads the agent's report (:mod:`dmn.api.node_capability`),
the requirements of every revision the controller knows, and — when the controller was
told which Pods are the agents (``agent_selector``) — whether that node's agent Pod is
Ready. It then makes the Node's ``capable.<driver>/<digest>`` labels exactly the
requirements a current report satisfies; every other label is left alone.

The expiry policy, stated once: a report is current for three of its refresh periods; an
agent Pod counts as not Ready once its Ready condition has been False for ``grace``
seconds (a restart of a few seconds does not make new Pods unschedulable), and at once
when the node has no agent Pod. A Node that loses its labels keeps the Pods it runs
(the affinity is IgnoredDuringExecution); new Pods of ours wait in the scheduler until it
earns them again. The reconcile returns False while some label may expire later, so the
manager looks again after one resync.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from dmn.api.cluster import Cluster, NotFound
from dmn.api.cluster import resources as r
from dmn.api.node_capability import (
    Requirement,
    capability_labels,
    label_patch,
    node_verdict,
    parse_time,
    revision_requirement,
)

log = logging.getLogger(__name__)

DEFAULT_GRACE_S = 60.0

Obj = dict[str, Any]


@dataclass(frozen=True)
class AgentPods:
    """Where the node agents' Pods are: a namespace and a label selector."""

    namespace: str
    selector: str


def agent_ready(pods: Iterable[Mapping[str, Any]], node: str, now: float, grace: float) -> bool:
    """Whether ``node``'s agent counts as Ready (pure): some agent Pod bound to it is Ready,
    or has been not Ready for less than ``grace`` seconds."""
    for pod in pods:
        if (pod.get("spec") or {}).get("nodeName") != node:
            continue
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        for cond in (pod.get("status") or {}).get("conditions") or ():
            if cond.get("type") != "Ready":
                continue
            if cond.get("status") == "True":
                return True
            since = parse_time(cond.get("lastTransitionTime"))
            if since is not None and now - since < grace:
                return True
    return False


class NodeCapabilityReconciler:
    """Converges one Node's capability labels (see the module contract)."""

    def __init__(
        self,
        cluster: Cluster,
        revisions: Callable[[], Iterable[Mapping[str, Any]]],
        agent_pods: Callable[[], Iterable[Mapping[str, Any]]] | None = None,
        grace: float = DEFAULT_GRACE_S,
        clock: Callable[[], float] = time.time,
        node: Callable[[str], Obj | None] | None = None,
    ) -> None:
        """``revisions``: every NetworkTopologyRevision (the watch's cache);
        ``agent_pods``: the agents' Pods, or None when the controller does not know them
        (the embedded lab runs its agent as a process); then the report alone decides;
        ``node``: a Node as the watch holds it (None: read it from the API). A held copy
        that lags can only cost a label patch that changes nothing: the patch sets each key
        it names to what the verdict wants."""
        self.cluster = cluster
        self.revisions = revisions
        self.agent_pods = agent_pods
        self.grace = grace
        self.clock = clock
        self.node = node
        self._reasons: dict[str, str] = {}

    def requirements(self) -> set[Requirement]:
        found: set[Requirement] = set()
        for revision in self.revisions():
            req = revision_requirement(revision)
            if req is not None:
                found.add(req)
        return found

    def reconcile(self, name: str) -> bool:
        """Make Node ``name``'s labels match; False while they may expire later."""
        node = self.node(name) if self.node is not None else None
        if node is None:
            try:
                node = self.cluster.get(r.NODES, name)
            except NotFound:
                self._reasons.pop(name, None)
                return True
        now = self.clock()
        ready = None
        if self.agent_pods is not None:
            ready = agent_ready(self.agent_pods(), name, now, self.grace)
        verdict = node_verdict(node, self.requirements(), now, ready)
        if verdict.reason != self._reasons.get(name):
            log.info("event=node-capability node=%s eligible=%d reason=%r",
                     name, len(verdict.keys), verdict.reason)  # fmt: skip
            self._reasons[name] = verdict.reason
        patch = label_patch(node, verdict.keys)
        if patch is not None:
            self.cluster.patch(r.NODES, name, patch)
            log.info(
                "event=node-capability-labels node=%s labels=%s",
                name,
                ",".join(sorted(verdict.keys)) or "-",
            )
        return not verdict.keys and not capability_labels(node)
