"""Validation status for NetworkPlugin and DeviceExposurePolicy objects.

A NetworkPlugin is checked whole by the language core (descriptor, every hook program,
contracts) and gets ``status.contractDigest``, a Ready condition and reason-coded
diagnostics. A DeviceExposurePolicy is validated against its strict model; the
controller owns only the ``Validated`` condition of its status (the node agents own the
rest), so it merges that one condition under optimistic concurrency.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from dmn.api.cluster import Cluster, NotFound
from dmn.api.cluster import resources as r
from dmn.controller.compile.plugin_sources import (
    Converted,
    StoredStateCache,
    cached_checked_plugin_object,
)
from dmn.controller.conditions import diagnostic_entries, set_condition, summary
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
        conds = set_condition(
            status.get("conditions"),
            "Validated",
            not diagnostics,
            "Valid" if not diagnostics else "Invalid",
            "policy is well-formed" if not diagnostics else summary(diagnostics),
            obj["metadata"].get("generation"),
        )
        if conds == status.get("conditions"):
            return
        status["conditions"] = conds
        obj["status"] = status
        self.cluster.replace(r.DEVICE_EXPOSURE_POLICIES, obj, status=True)
