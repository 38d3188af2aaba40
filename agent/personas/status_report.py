"""Writes what this node found about each DeviceExposurePolicy onto the policy, visibly.

Why: a policy conflict (two policies exposing one device as the same persona at equal
priority) silently removes the device from the node's slices. :func:`policy_status`
computes this node's view; this module makes it visible — the node-owned conditions
(``Ready``, ``Conflict``, ``Unsupported``, ``PendingDrain``), ``exposedDevices`` and the
reason-coded diagnostics (code, the other policy in the message, the device as the path)
are merged into ``status`` (the controller's ``Validated`` condition is kept as it is),
and every error finding is also a Warning Event on the policy, with the reason code as the
Event reason (repeats are counted by the recorder, not duplicated).

Contract: best effort and idempotent — a status that would not change is not written, a
condition keeps its ``lastTransitionTime`` while its status stays, and an API failure is
logged, never raised (publication must not fail because a status write did). One node's
view: with several nodes the last writer's view is shown (no per-node merge yet).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from dmn.agent.personas.model import PersonaSet
from dmn.agent.personas.status import policy_status
from dmn.api.cluster import ApiFailure, Cluster
from dmn.api.cluster import resources as r
from dmn.api.cluster.events import EventRecorder

log = logging.getLogger(__name__)

#: conditions the node agents own; everything else (``Validated``) belongs to the controller
NODE_CONDITIONS = frozenset({"Ready", "Conflict", "Unsupported", "PendingDrain"})


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def merged_status(current: Mapping[str, Any], computed: Mapping[str, Any]) -> dict[str, Any]:
    """``current`` with the node-owned parts replaced by ``computed`` (pure)."""
    old = {c.get("type"): c for c in current.get("conditions") or []}
    conditions = [
        c for c in current.get("conditions") or [] if c.get("type") not in NODE_CONDITIONS
    ]
    for cond in computed.get("conditions") or []:
        previous = old.get(cond.get("type"))
        if previous is not None and previous.get("status") == cond.get("status"):
            cond = {**cond, "lastTransitionTime": previous.get("lastTransitionTime")}
        conditions.append(cond)
    return {
        **current,
        "conditions": conditions,
        "exposedDevices": computed.get("exposedDevices"),
        "diagnostics": computed.get("diagnostics"),
    }


def report_policy_statuses(
    cluster: Cluster,
    recorder: EventRecorder | None,
    personas: PersonaSet,
    policy_objects: Iterable[Mapping[str, Any]],
) -> None:
    """Write each policy's node-owned status and a Warning Event per error finding."""
    now = _now()
    for obj in policy_objects:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name", ""))
        computed = policy_status(name, personas, meta.get("generation"), now).to_api()
        current = dict(obj.get("status") or {})
        status = merged_status(current, computed)
        try:
            if _comparable(status) != _comparable(current):
                body = {**obj, "status": status}
                cluster.replace(r.DEVICE_EXPOSURE_POLICIES, body, status=True)
        except ApiFailure as exc:
            log.warning("event=policy-status-failed policy=%s error=%s", name, exc)
        if recorder is None:
            continue
        for finding in personas.findings:
            if finding.policy == name and finding.is_error:
                where = finding.item or finding.device
                message = f"{finding.message} (device {where})" if where else finding.message
                recorder.record(obj, "Warning", finding.code.value, message)


def _comparable(status: Mapping[str, Any]) -> Any:
    return (
        sorted(
            (str(c.get("type")), str(c.get("status")), str(c.get("reason")), str(c.get("message")))
            for c in status.get("conditions") or []
        ),
        status.get("exposedDevices"),
        status.get("diagnostics"),
    )
