"""A node's reports on the DeviceExposurePolicies, carried in one annotation on its own Node.

Why (design §5.2): every node's agent reports what it made of each policy that concerns it
(its ``Ready``, ``Conflict``, ``Unsupported`` and ``PendingDrain`` conditions, the personas
it exposes, reason-coded diagnostics). Those reports used to be entries of the policy's own
``status.nodes``, so the policy — which every node's agent watches and reads — grew with the
cluster, and a change every node reported on cost nodes² watch events and bytes. The report
now lives where only its node writes it and only the controller reads it: annotation
:data:`ANNOTATION` of the node's own Node (the chart's admission policy lets exactly that
node's agent write it, as for the capability report). The controller turns the reports into
the policy's status: counts and aggregate conditions over every node, and the entries of the
nodes that need attention (:func:`needs_attention`), bounded.

Everything here is pure: an annotation value in, entries out, and back. The decoder never
raises on what it is given (a copied or hand-written annotation is refused as a whole, with
a reason) and identity is the Node's name, never a name the report carries.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from dmn.api.identity import DRIVER
from dmn.api.node_capability import annotation_object
from dmn.api.policy import NodePolicyStatus

#: Node annotation holding the node's policy reports (written only by that node's agent).
ANNOTATION = f"{DRIVER}/policy-status"
#: Report format version; a report of another version is not understood.
REPORT_VERSION = 1
#: Longest annotation value, in bytes of its JSON text. A Node's annotations share 256 KiB;
#: the capability report takes at most 16 KiB of it.
MAX_REPORT_BYTES = 64 * 1024
#: Longest policy name (a Kubernetes object name).
MAX_NAME = 253


class PolicyReportError(ValueError):
    """An annotation value that is not a report of this node (its message says why)."""


@dataclass(frozen=True)
class Encoded:
    """An annotation value and the policies whose diagnostics were left out to fit it."""

    value: str
    trimmed: tuple[str, ...] = ()


def _body(node: str, entries: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    return {
        "v": REPORT_VERSION,
        "node": node,
        "policies": {
            name: {k: v for k, v in entry.items() if k != "nodeName"}
            for name, entry in sorted(entries.items())
        },
    }


def _text(body: Mapping[str, Any]) -> str:
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def encode_reports(node: str, entries: Mapping[str, Mapping[str, Any]]) -> Encoded:
    """The annotation value for node ``node``'s ``entries`` (policy name → entry in the API
    form of :class:`NodePolicyStatus`; a ``nodeName`` in it is dropped: the Node names the
    reporter). Over :data:`MAX_REPORT_BYTES`, diagnostics are left out of the largest
    entries first (their conditions still say what holds); should even that not fit, the
    entries of the last policies by name are left out, and those policies count the node
    as not reporting."""
    body = _body(node, entries)
    policies: dict[str, dict[str, Any]] = body["policies"]
    trimmed: list[str] = []

    def size(name: str) -> int:  # what the entry adds to the text: key, colon, comma
        return len(_text({name: policies[name]}).encode()) - 1

    total = len(_text(body).encode())
    by_size = sorted(policies, key=lambda n: (-size(n), n))
    for name in by_size:
        if total <= MAX_REPORT_BYTES:
            break
        if "diagnostics" in policies[name]:
            before = size(name)
            del policies[name]["diagnostics"]
            total -= before - size(name)
            trimmed.append(name)
    for name in sorted(policies, reverse=True):
        if total <= MAX_REPORT_BYTES:
            break
        total -= size(name)
        del policies[name]
        trimmed.append(name)
    while len(_text(body).encode()) > MAX_REPORT_BYTES and policies:  # the count was short
        name = max(policies)
        del policies[name]
        trimmed.append(name)
    return Encoded(_text(body), tuple(sorted(set(trimmed))))


def decode_reports(node: str, value: Any) -> dict[str, dict[str, Any]]:
    """The entries (policy name → entry with ``nodeName`` = ``node``, in API form) that
    annotation ``value`` of Node ``node`` holds; :class:`PolicyReportError` for anything
    that is not a well-formed report of this very node (never another exception)."""
    body = annotation_object(value, MAX_REPORT_BYTES, REPORT_VERSION, PolicyReportError)
    if body.get("node") != node:
        raise PolicyReportError("the report names another node")
    policies = body.get("policies")
    if not isinstance(policies, dict):
        raise PolicyReportError("policies is not a JSON object")
    out: dict[str, dict[str, Any]] = {}
    for name, entry in policies.items():
        if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME:
            raise PolicyReportError("a policy name is not a name")
        if not isinstance(entry, dict):
            raise PolicyReportError(f"the entry of policy {name[:60]!r} is not an object")
        try:
            model = NodePolicyStatus.model_validate({**entry, "nodeName": node})
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ()))
            raise PolicyReportError(
                f"the entry of policy {name[:60]!r} is invalid at {where[:80]}: "
                f"{str(first.get('msg'))[:120]}"
            ) from None
        out[name] = model.to_api()
    return out


def node_reports(node: Mapping[str, Any]) -> tuple[dict[str, dict[str, Any]], str | None]:
    """The entries Node object ``node`` carries, and why none are taken (None: the report
    was read, or the Node has none)."""
    meta = node.get("metadata") or {}
    name = meta.get("name")
    value = (meta.get("annotations") or {}).get(ANNOTATION)
    if value is None or not isinstance(name, str):
        return {}, None
    try:
        return decode_reports(name, value), None
    except PolicyReportError as exc:
        return {}, str(exc)


#: the conditions that, True, make a node's entry one to show
TROUBLE = ("Conflict", "Unsupported", "PendingDrain")


def needs_attention(entry: Mapping[str, Any], generation: int | None) -> bool:
    """Whether a node's entry is one an administrator needs to see (pure): not Ready, a
    conflict, unsupported hardware or a pending drain, diagnostics, or a report on an older
    generation of the policy than ``generation``."""
    conds = {c.get("type"): c.get("status") for c in entry.get("conditions") or ()}
    if conds.get("Ready") != "True" or any(conds.get(t) == "True" for t in TROUBLE):
        return True
    if entry.get("diagnostics"):
        return True
    seen = entry.get("observedGeneration")
    return generation is not None and isinstance(seen, int) and seen < generation
