"""Writes what this node found about each DeviceExposurePolicy onto the policy, visibly.

Why: a policy conflict (two policies exposing one device as the same persona at equal
priority) silently removes the device from the node's slices. :func:`policy_status`
computes this node's view; this module makes it visible — as this node's own entry of the
policy's ``status.nodes`` (its ``Ready``, ``Conflict``, ``Unsupported`` and ``PendingDrain``
conditions, ``exposedDevices`` and the reason-coded diagnostics: code, the other policy in the
message, the device as the path). Every error finding is also a Warning Event on the policy,
with the reason code as the Event reason (repeats are counted by the recorder, not
duplicated). The controller aggregates the entries into the top-level fields and owns them.

Authority: a node's agent changes only the entry named after its own node; every other entry
stays as it is *and where it is* (the chart's ``dra-multi-network-node-policystatus``
admission policy compares the other entries in order with the stored ones, and refuses the
write otherwise), and nothing outside ``status.nodes`` changes.

Contract: best effort and idempotent — an entry that would not change is not written (a
condition keeps its ``lastTransitionTime`` while its status stays, the entry its
``lastReportTime`` while nothing in it changes), a write is a JSON patch of the node's own
index guarded by a test of the entry's name (or an append; the whole list under its
``resourceVersion`` only for a policy without one yet), and a failed test or a conflict
re-reads and merges again (a few times, then the next pass);
an API failure is logged, never raised (publication must not fail because a status write
did). A node writes an entry only for the policies that concern it (its node selector
matches the node's labels, or the policy has personas or findings here); it removes its
entry from the others.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any

from dmn.agent.personas.model import PersonaSet
from dmn.agent.personas.status import policy_status
from dmn.api.cluster import ApiFailure, Cluster, Conflict, Invalid, NotFound
from dmn.api.cluster import resources as r
from dmn.api.cluster.events import EventRecorder

log = logging.getLogger(__name__)

#: conditions the node agents own, in their entries; ``Validated`` and the top-level
#: aggregate belong to the controller
NODE_CONDITIONS = frozenset({"Ready", "Conflict", "Unsupported", "PendingDrain"})
#: writes of one entry per pass; a conflict (another node, or the controller, wrote the policy
#: meanwhile) re-reads and merges again
MAX_ATTEMPTS = 5


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


def merged_nodes(
    nodes: Sequence[Mapping[str, Any]], node_name: str, report: Mapping[str, Any] | None
) -> list[dict[str, Any]]:
    """``nodes`` (a policy's ``status.nodes``) with node ``node_name``'s entry replaced by
    ``report`` where it stands, appended when it had none, removed when ``report`` is None;
    every other entry kept as it is and in its place (pure)."""
    out: list[dict[str, Any]] = []
    placed = False
    for entry in nodes:
        if entry.get("nodeName") != node_name:
            out.append(dict(entry))
        elif report is not None and not placed:
            out.append(merged_entry(entry, report))
            placed = True
    if report is not None and not placed:
        out.append(merged_entry(None, report))
    return out


def report_policy_statuses(
    cluster: Cluster,
    recorder: EventRecorder | None,
    personas: PersonaSet,
    policy_objects: Iterable[Mapping[str, Any]],
    node_name: str,
    concerned: Collection[str],
    stored: Callable[[dict[str, Any]], None] | None = None,
) -> None:
    """Write this node's entry of each policy's status (``concerned``: the names of the
    policies whose node selector matches this node) and a Warning Event per error finding;
    ``stored`` gets each policy as a write returned it."""
    now = _now()
    here = set(concerned)
    here |= {f.policy for f in personas.findings if f.policy}
    here |= {p.policy for p in personas.personas if p.policy}
    for obj in policy_objects:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name", ""))
        report = None
        if name in here:
            generation = meta.get("generation")
            report = policy_status(name, personas, generation, now, node_name).to_api()
        try:
            written = write_node_entry(cluster, obj, node_name, report)
            if written is not None and stored is not None:
                stored(written)
        except ApiFailure as exc:
            log.warning("event=policy-status-failed policy=%s error=%s", name, exc)
        if recorder is None:
            continue
        for finding in personas.findings:
            if finding.policy == name and finding.is_error:
                where = finding.item or finding.device
                message = f"{finding.message} (device {where})" if where else finding.message
                recorder.record(obj, "Warning", finding.code.value, message)


#: :func:`entry_patch`'s answer when the own entry cannot be patched in place: the whole
#: ``status.nodes`` is written under the ``resourceVersion`` it was merged onto
WHOLE_LIST = "whole-list"


def entry_patch(
    status: Mapping[str, Any], node_name: str, report: Mapping[str, Any] | None
) -> list[dict[str, Any]] | str | None:
    """The JSON patch that puts ``report`` as node ``node_name``'s entry of a policy whose
    status was read as ``status`` (None: nothing to change; :data:`WHOLE_LIST`: no patch
    fits, write the merged list). Pure.

    Why a patch: every node writes its own entry of the same few objects, all at once after
    a policy change. A whole-list write carries the ``resourceVersion`` it merged onto, so
    of N nodes writing together all but one conflict, re-read and write again — about N²/2
    requests, and some nodes give up after :data:`MAX_ATTEMPTS`. A patch of one index is
    applied by the API server onto the object as stored, whatever others wrote meanwhile;
    its ``test`` of the entry's name at that index keeps it from landing on another node's
    entry when an earlier one was removed (then the patch fails and the entry is merged
    again onto a fresh read). Appending needs no test: only this node writes its name."""
    current = list(status.get("nodes") or [])
    merged = merged_nodes(current, node_name, report)
    if merged == current:
        return None
    mine = [i for i, e in enumerate(current) if e.get("nodeName") == node_name]
    if "nodes" not in status or len(mine) > 1:
        return WHOLE_LIST
    if not mine:
        return [{"op": "add", "path": "/status/nodes/-", "value": merged[-1]}]
    (index,) = mine
    guard = {"op": "test", "path": f"/status/nodes/{index}/nodeName", "value": node_name}
    if report is None:
        return [guard, {"op": "remove", "path": f"/status/nodes/{index}"}]
    return [guard, {"op": "replace", "path": f"/status/nodes/{index}", "value": merged[index]}]


def write_node_entry(
    cluster: Cluster, obj: Mapping[str, Any], node_name: str, report: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """Put ``report`` as node ``node_name``'s entry of the policy ``obj`` (None: remove it)
    through the status subresource: a JSON patch of that entry (:func:`entry_patch`), or
    the merged list under ``obj``'s resourceVersion when no patch fits; a failed patch or a
    conflict re-reads and merges again. The policy as the write stored it (None: nothing to
    change, or the policy is gone); :class:`ApiFailure` when the API refused it or the
    retries did not stop."""
    name = str((obj.get("metadata") or {}).get("name", ""))
    for attempt in range(MAX_ATTEMPTS):
        status = dict(obj.get("status") or {})
        patch = entry_patch(status, node_name, report)
        if patch is None:
            return None
        try:
            if patch == WHOLE_LIST:
                nodes = merged_nodes(list(status.get("nodes") or []), node_name, report)
                if nodes:
                    status["nodes"] = nodes
                else:
                    status.pop("nodes", None)
                return cluster.replace(
                    r.DEVICE_EXPOSURE_POLICIES, {**obj, "status": status}, status=True
                )
            return cluster.patch(
                r.DEVICE_EXPOSURE_POLICIES, name, patch, patch_type="json", status=True
            )
        except (Conflict, Invalid):
            if attempt + 1 == MAX_ATTEMPTS:
                raise
            try:
                obj = cluster.get(r.DEVICE_EXPOSURE_POLICIES, name)
            except NotFound:
                return None
        except NotFound:
            return None
    return None
