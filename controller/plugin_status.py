"""Validation status for NetworkPlugin and DeviceExposurePolicy objects.

A NetworkPlugin is checked whole by the language core (descriptor, every hook program,
contracts) and gets ``status.contractDigest``, a Ready condition and reason-coded
diagnostics. A DeviceExposurePolicy is validated against its strict model; the
controller owns every top-level field of its status: the ``Validated`` condition and the
aggregate of the node agents' reports in ``status.nodes`` (each agent owns its node's entry
there and nothing else): ``Ready`` when every reporting node is ready (``Unknown`` while none
reports), ``Conflict``, ``Unsupported`` and ``PendingDrain`` when any node says so,
``exposedDevices`` summed and the nodes' diagnostics merged. It writes them under optimistic
concurrency and never changes ``status.nodes``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dmn.api.cluster import Cluster, NotFound
from dmn.api.cluster import resources as r
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


@dataclass
class PolicyStatusReconciler:
    cluster: Cluster

    def reconcile(self, name: str) -> None:
        try:
            obj = self.cluster.get(r.DEVICE_EXPOSURE_POLICIES, name)
        except NotFound:
            return
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
        new = {**status, **aggregate_node_reports(conds, status.get("nodes") or [], generation)}
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
    """The top-level status the node reports add up to (pure): ``conditions`` with
    ``Ready``, ``Conflict``, ``Unsupported`` and ``PendingDrain`` set from every entry of
    ``status.nodes`` (each condition's ``observedGeneration`` the oldest generation a node
    reported on: a node behind the policy shows there), ``exposedDevices`` summed and the
    nodes' diagnostics merged (each distinct one once, at most 64); ``observedGeneration``
    is the generation the controller validated."""
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
    return {
        "observedGeneration": generation,
        "conditions": conds,
        "exposedDevices": sum(int(e.get("exposedDevices") or 0) for e in nodes),
        "diagnostics": merged or None,
    }
