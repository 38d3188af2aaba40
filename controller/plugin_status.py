"""Validation status for NetworkPlugin and DeviceExposurePolicy objects.

A NetworkPlugin is checked whole by the language core (descriptor, every hook program,
contracts) and gets ``status.contractDigest``, a Ready condition and reason-coded
diagnostics. A DeviceExposurePolicy is validated against its strict model; the
controller owns its whole status: the ``Validated`` condition and the aggregate of the node
agents' reports, which each agent writes into an annotation of its own Node
(:mod:`dmn.api.policy_report`) and the controller reads from its Node watch: ``Ready`` when
every reporting node is ready (``Unknown`` while none reports), ``Conflict``,
``Unsupported`` and ``PendingDrain`` when any node says so, the reporting and ready nodes
counted, ``exposedDevices`` summed, the nodes' diagnostics merged, and ``status.nodes``
listing the reports that need attention (at most :data:`~dmn.api.policy.MAX_LISTED_NODES`).
It writes them under optimistic concurrency. The policy so stays the same size whatever the
cluster's: every node's agent watches and reads it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dmn.api.cluster import Cluster, NotFound
from dmn.api.cluster import resources as r
from dmn.api.policy import MAX_LISTED_NODES
from dmn.api.policy_report import needs_attention, node_reports
from dmn.controller.compile.plugin_sources import (
    Converted,
    StoredStateCache,
    cached_checked_plugin_object,
)
from dmn.controller.conditions import (
    MAX_DIAGNOSTICS,
    diagnostic_entries,
    set_condition,
    summary,
)
from dmn.controller.policy_validation import policy_diagnostics
from dmn.controller.workqueue import RetryLater
from dmn.interpreter.diagnostics import has_errors
from dmn.opcodes.spec import OpcodeRegistry

log = logging.getLogger(__name__)


@dataclass
class PluginStatusReconciler:
    cluster: Cluster
    registry: OpcodeRegistry
    #: the language check of each stored plugin state (a resync re-checks every plugin)
    checked: StoredStateCache[Converted] = field(default_factory=StoredStateCache)

    def reconcile(self, name: str) -> None:
        try:
            obj = self.cluster.get(r.NETWORK_PLUGINS, name)
        except NotFound:
            return
        plugin, diagnostics = cached_checked_plugin_object(self.checked, obj, self.registry)
        ok = plugin is not None and not has_errors(diagnostics)
        generation = obj["metadata"].get("generation")
        status = obj.get("status") or {}
        conds = set_condition(
            status.get("conditions"),
            "Ready",
            ok,
            "Valid" if ok else "Invalid",
            "contract checked" if ok else summary(diagnostics),
            generation,
        )
        new = {
            "observedGeneration": generation,
            "conditions": conds,
            "contractDigest": plugin.contract_digest if ok and plugin is not None else None,
            "diagnostics": diagnostic_entries(diagnostics) or None,
        }
        if all(status.get(k) == v for k, v in new.items()):
            return
        self.cluster.patch(r.NETWORK_PLUGINS, name, {"status": new}, status=True)


#: node name → policy name → that node's entry (API form, ``nodeName`` set)
NodeReports = Mapping[str, Mapping[str, Mapping[str, Any]]]


def listed_node_reports(cluster: Cluster) -> NodeReports:
    """Every Node's policy reports, read by listing the Nodes (a controller without a Node
    watch; a report that cannot be read counts as none)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for node in cluster.list(r.NODES).items:
        entries, _ = node_reports(node)
        if entries:
            out[str(node["metadata"]["name"])] = entries
    return out


@dataclass
class PolicyStatusReconciler:
    cluster: Cluster
    #: every node's reports (the manager's Node watch; None until it has listed); unset:
    #: the Nodes are listed on each reconcile
    reports: Callable[[], NodeReports | None] | None = None

    def reconcile(self, name: str) -> None:
        try:
            obj = self.cluster.get(r.DEVICE_EXPOSURE_POLICIES, name)
        except NotFound:
            return
        reports = listed_node_reports(self.cluster) if self.reports is None else self.reports()
        if reports is None:
            # a count from no reports would say no node reports: wait for the whole view
            raise RetryLater("the Node watch has not listed yet")
        entries = sorted(
            (dict(per[name]) for per in reports.values() if name in per),
            key=lambda e: str(e.get("nodeName")),
        )
        diagnostics = policy_diagnostics(obj)
        status = dict(obj.get("status") or {})
        generation = obj["metadata"].get("generation")
        conds = set_condition(
            status.get("conditions"),
            "Validated",
            not diagnostics,
            "Valid" if not diagnostics else "Invalid",
            "policy is well-formed" if not diagnostics else summary(diagnostics),
            generation,
        )
        new = {**status, **aggregate_node_reports(conds, entries, generation)}
        new = {k: v for k, v in new.items() if v is not None}
        if new == {k: v for k, v in status.items() if v is not None}:
            return
        obj["status"] = new
        self.cluster.replace(r.DEVICE_EXPOSURE_POLICIES, obj, status=True)


#: node names one aggregate condition's message lists before "and N more"
NAMES_SHOWN = 8


def _nodes_named(names: list[str]) -> str:
    shown = ", ".join(names[:NAMES_SHOWN])
    return shown + (f" and {len(names) - NAMES_SHOWN} more" if len(names) > NAMES_SHOWN else "")


def aggregate_node_reports(
    conditions: list[dict[str, Any]] | None,
    nodes: Sequence[Mapping[str, Any]],
    generation: int | None,
) -> dict[str, Any]:
    """The status the node reports ``nodes`` (every reporting node's entry, by node name)
    add up to (pure): ``conditions`` with ``Ready``, ``Conflict``, ``Unsupported`` and
    ``PendingDrain`` set from every entry (each condition's ``observedGeneration`` the
    oldest generation a node reported on: a node behind the policy shows there), the
    reporting and ready nodes counted, ``exposedDevices`` summed, the nodes' diagnostics
    merged (each distinct one once, at most 64) and ``nodes`` the entries that need
    attention (:func:`~dmn.api.policy_report.needs_attention`, at most
    :data:`~dmn.api.policy.MAX_LISTED_NODES`); ``observedGeneration`` is the generation the
    controller validated."""
    by_type: dict[str, list[tuple[str, Mapping[str, Any]]]] = {}
    for entry in nodes:
        for cond in entry.get("conditions") or []:
            by_type.setdefault(str(cond.get("type")), []).append((str(entry["nodeName"]), cond))
    seen = [e.get("observedGeneration") for e in nodes]
    oldest = min((g for g in seen if isinstance(g, int)), default=None)
    conds = conditions
    ready = by_type.get("Ready", [])
    not_ready = [(n, c) for n, c in ready if c.get("status") != "True"]
    if not nodes:
        conds = set_condition(
            conds, "Ready", None, "NoNodeReports", "no node reports on this policy", generation
        )
    elif not_ready:
        first = not_ready[0][1]
        message = (
            f"not ready on {len(not_ready)} of {len(nodes)} nodes "
            f"({_nodes_named([n for n, _ in not_ready])}): {first.get('message', '')}"
        )
        conds = set_condition(
            conds, "Ready", False, str(first.get("reason") or "NotReady"), message, oldest
        )
    else:
        conds = set_condition(
            conds, "Ready", True, "Published", f"ready on {len(nodes)} nodes", oldest
        )
    defaults = {
        "Conflict": "NoConflict",
        "Unsupported": "Supported",
        "PendingDrain": "NothingPending",
    }
    for kind, quiet in defaults.items():
        holding = [(n, c) for n, c in by_type.get(kind, []) if c.get("status") == "True"]
        if holding:
            first = holding[0][1]
            message = (
                f"on {len(holding)} of {len(nodes)} nodes "
                f"({_nodes_named([n for n, _ in holding])}): {first.get('message', '')}"
            )
            conds = set_condition(conds, kind, True, str(first.get("reason")), message, oldest)
        else:
            conds = set_condition(conds, kind, False, quiet, "", oldest)
    merged: list[dict[str, Any]] = []
    for entry in nodes:
        for diag in entry.get("diagnostics") or []:
            if diag not in merged and len(merged) < MAX_DIAGNOSTICS:
                merged.append(dict(diag))
    listed = [dict(e) for e in nodes if needs_attention(e, generation)][:MAX_LISTED_NODES]
    return {
        "observedGeneration": generation,
        "conditions": conds,
        "reportingNodes": len(nodes),
        "readyNodes": sum(1 for _, c in ready if c.get("status") == "True"),
        "exposedDevices": sum(int(e.get("exposedDevices") or 0) for e in nodes),
        "diagnostics": merged or None,
        "nodes": listed or None,
    }
