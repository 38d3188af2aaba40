"""Writes what this node found about each DeviceExposurePolicy where the controller reads it.

Why: a policy conflict (two policies exposing one device as the same persona at equal
priority) silently removes the device from the node's slices. :func:`policy_status`
computes this node's view; this module makes it visible — as this node's entries in the
annotation :data:`~dmn.api.policy_report.ANNOTATION` of its own Node (one entry per policy
that concerns the node: its ``Ready``, ``Conflict``, ``Unsupported`` and ``PendingDrain``
conditions, ``exposedDevices`` and the reason-coded diagnostics: code, the other policy in
the message, the device as the path). Every error finding is also a Warning Event on the
policy, with the reason code as the Event reason (repeats are counted by the recorder, not
duplicated). The controller turns the reports of every node into the policy's status.

Why not the policy itself: every node's agent watches and reads the policies, so a policy
holding one entry per node grew with the cluster and each node's write reached every node
(nodes² events and bytes per cluster-wide change, design §5.2). The Node annotation is
written by its node alone (the chart's ``dra-multi-network-node-capabilities`` admission
policy, as for the capability report) and read by the controller alone.

Contract: best effort and idempotent — an entry that would not change is not rewritten (a
condition keeps its ``lastTransitionTime`` while its status stays, the entry its
``lastReportTime`` while nothing in it changes), and nothing is written when the annotation
would stay as it is. The write is a merge patch of the one annotation key. An API failure
is logged, never raised (publication must not fail because a status write did). A node
reports only on the policies that concern it (its node selector matches the node's labels,
or the policy has personas or findings here); a policy it no longer reports on, or one that
is gone, drops out of the annotation.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from dmn.agent.personas.model import PersonaSet
from dmn.agent.personas.status import policy_status
from dmn.api.cluster import ApiFailure, Cluster
from dmn.api.cluster import resources as r
from dmn.api.cluster.events import EventRecorder
from dmn.api.policy_report import ANNOTATION, PolicyReportError, decode_reports, encode_reports

log = logging.getLogger(__name__)

#: conditions the node agents own, in their entries; ``Validated`` and the top-level
#: aggregate belong to the controller
NODE_CONDITIONS = frozenset({"Ready", "Conflict", "Unsupported", "PendingDrain"})


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _content(entry: Mapping[str, Any]) -> Any:
    """What a report says, without its times (equal content: nothing to write)."""
    return (
        entry.get("observedGeneration"),
        sorted(
            (
                str(c.get("type")),
                str(c.get("status")),
                str(c.get("reason")),
                str(c.get("message")),
                c.get("observedGeneration"),
            )
            for c in entry.get("conditions") or []
        ),
        entry.get("exposedDevices") or 0,
        [
            (str(d.get("code")), str(d.get("path") or ""), str(d.get("message")))
            for d in entry.get("diagnostics") or []
        ],
    )


def merged_entry(previous: Mapping[str, Any] | None, report: Mapping[str, Any]) -> dict[str, Any]:
    """``report`` with the times ``previous`` (the stored entry) keeps: a condition's
    ``lastTransitionTime`` while its status stays, and the whole stored entry while the
    report says the same (pure)."""
    if previous is not None and _content(previous) == _content(report):
        return dict(previous)
    old = {c.get("type"): c for c in (previous or {}).get("conditions") or []}
    conditions = []
    for cond in report.get("conditions") or []:
        before = old.get(cond.get("type"))
        if before is not None and before.get("status") == cond.get("status"):
            cond = {**cond, "lastTransitionTime": before.get("lastTransitionTime")}
        conditions.append(cond)
    return {**report, "conditions": conditions}


def stored_entries(node_name: str, value: str | None) -> dict[str, dict[str, Any]]:
    """The entries the node's annotation ``value`` holds (nothing when it holds none or
    cannot be read: every entry is then written afresh, with new times)."""
    if value is None:
        return {}
    try:
        return decode_reports(node_name, value)
    except PolicyReportError as exc:
        log.warning("event=policy-report-unreadable node=%s error=%s", node_name, exc)
        return {}


def policy_entries(
    personas: PersonaSet,
    policy_objects: Iterable[Mapping[str, Any]],
    node_name: str,
    concerned: Collection[str],
    previous: Mapping[str, Mapping[str, Any]],
    now: str,
) -> dict[str, dict[str, Any]]:
    """This node's entry for each policy that concerns it (``concerned``: the names of the
    policies whose node selector matches this node; a policy with personas or findings here
    concerns it too), each merged onto its ``previous`` entry so the times stay while
    nothing changed (pure)."""
    here = set(concerned)
    here |= {f.policy for f in personas.findings if f.policy}
    here |= {p.policy for p in personas.personas if p.policy}
    out: dict[str, dict[str, Any]] = {}
    for obj in policy_objects:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name", ""))
        if not name or name not in here:
            continue
        report = policy_status(name, personas, meta.get("generation"), now, node_name).to_api()
        out[name] = merged_entry(previous.get(name), report)
    return out


def report_policy_statuses(
    cluster: Cluster,
    recorder: EventRecorder | None,
    personas: PersonaSet,
    policy_objects: Iterable[Mapping[str, Any]],
    node_name: str,
    concerned: Collection[str],
    stored: str | None,
) -> str | None:
    """Write this node's policy entries into its Node's annotation (``stored``: the value
    the Node holds as this pass read it) and a Warning Event per error finding; returns the
    value the Node holds afterwards as far as this call knows (``stored`` when the write
    failed or was not needed)."""
    policies = list(policy_objects)
    entries = policy_entries(
        personas, policies, node_name, concerned, stored_entries(node_name, stored), _now()
    )
    encoded = encode_reports(node_name, entries)
    if encoded.trimmed:
        log.warning("event=policy-report-trimmed node=%s policies=%s",
                    node_name, ",".join(encoded.trimmed))  # fmt: skip
    value = stored
    if encoded.value != stored:
        body = {"metadata": {"annotations": {ANNOTATION: encoded.value}}}
        try:
            cluster.patch(r.NODES, node_name, body)
            value = encoded.value
        except ApiFailure as exc:
            log.warning("event=policy-status-failed node=%s error=%s", node_name, exc)
    if recorder is not None:
        for obj in policies:
            name = str((obj.get("metadata") or {}).get("name", ""))
            for finding in personas.findings:
                if finding.policy == name and finding.is_error:
                    where = finding.item or finding.device
                    message = f"{finding.message} (device {where})" if where else finding.message
                    recorder.record(obj, "Warning", finding.code.value, message)
    return value
