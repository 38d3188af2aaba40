"""Node capability: what a node's agent can run, and which revisions that makes it eligible for.

Why (design §9.3): a revision pins the executor contracts it was compiled against (each
opcode it uses, each builtin plugin it names). A node whose agent runs other contracts —
an older build during a rollout, or no agent at all — would refuse the claim at
NodePrepare, after the scheduler had already placed the Pod there. So the agent reports
what it runs on its Node (:data:`ANNOTATION`, one bounded JSON object), the controller
checks the report is fresh and the agent's Pod Ready, and labels the Node with one
:func:`label_key` per *requirement* it satisfies; admission gives each Pod of ours a
required node affinity on the keys of the revisions it uses. A requirement is the set of
contracts a revision needs, so the many revisions that need the same ones share one label.

The labels are scheduling hints. They lag the truth by up to one refresh; the node's own
checks (NodePrepare's verification, the NRI gates) stay authoritative. Everything here is
data in, decision out: no I/O, no clock (callers pass ``now`` as epoch seconds).
"""

from __future__ import annotations

import calendar
import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from dmn.api.identity import DRIVER
from dmn.interpreter.canonical_json import sha256_digest

#: Node annotation holding the agent's report (written only by that node's agent).
ANNOTATION = f"{DRIVER}/node-capabilities"
#: Prefix of the Node labels the controller publishes (value "true"), one per requirement.
LABEL_PREFIX = f"capable.{DRIVER}"
#: Report format version; a report of another version is not understood (not eligible).
REPORT_VERSION = 1
#: Longest report accepted, in bytes of its JSON text.
MAX_REPORT_BYTES = 16 * 1024
#: How often the agent rewrites its report, unless configured otherwise.
DEFAULT_REFRESH_S = 30.0
#: A report is current for this many refresh periods after it was written.
EXPIRY_PERIODS = 3
#: Clock skew tolerated between a node and the controller (a report "from the future").
MAX_SKEW_S = 60.0
#: Longest refresh period a report may claim (so a report cannot make itself immortal).
MAX_REFRESH_S = 600.0
#: Hex digits of a requirement digest in a label key (the key's name part).
KEY_LEN = 16


@dataclass(frozen=True)
class Requirement:
    """The contracts a revision needs from a node's agent."""

    opcodes: tuple[tuple[str, str], ...]  # (opcode name, short contract digest)
    builtins: tuple[tuple[str, str], ...]  # (builtin plugin name, contract digest)

    def to_json(self) -> dict[str, Any]:
        return {"opcodes": dict(self.opcodes), "builtins": dict(self.builtins)}

    @property
    def key(self) -> str:
        """The label key that marks a node able to run this requirement."""
        digest = sha256_digest(self.to_json()).removeprefix("sha256:")
        return f"{LABEL_PREFIX}/{digest[:KEY_LEN]}"


@dataclass(frozen=True)
class CapabilityReport:
    """One node agent's report (see the module docstring)."""

    node: str
    boot_id: str
    agent_version: str
    observed_at: float  # epoch seconds
    refresh_s: float
    nri_registered: bool
    nri_synchronized: bool
    opcodes: Mapping[str, str]
    builtins: Mapping[str, str]

    def to_annotation(self) -> str:
        """The annotation value (compact JSON, keys sorted)."""
        body = {
            "v": REPORT_VERSION,
            "node": self.node,
            "bootID": self.boot_id,
            "agentVersion": self.agent_version,
            "observedAt": format_time(self.observed_at),
            "refreshSeconds": self.refresh_s,
            "nri": {"registered": self.nri_registered, "synchronized": self.nri_synchronized},
            "opcodes": dict(sorted(self.opcodes.items())),
            "builtins": dict(sorted(self.builtins.items())),
        }
        return json.dumps(body, sort_keys=True, separators=(",", ":"))

    def expires_at(self) -> float:
        return self.observed_at + EXPIRY_PERIODS * min(self.refresh_s, MAX_REFRESH_S)

    def satisfies(self, requirement: Requirement) -> bool:
        """The agent runs every contract the requirement names, digest for digest."""
        return all(self.opcodes.get(n) == d for n, d in requirement.opcodes) and all(
            self.builtins.get(n) == d for n, d in requirement.builtins
        )


class ReportError(ValueError):
    """A capability annotation that is not a report of this format; the message says why."""


def format_time(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def parse_time(value: Any) -> float | None:
    """Epoch seconds of an RFC 3339 UTC timestamp with whole seconds (as Kubernetes writes
    them, e.g. a condition's ``lastTransitionTime``), None for anything else."""
    if not isinstance(value, str):
        return None
    try:
        return float(calendar.timegm(time.strptime(value, "%Y-%m-%dT%H:%M:%SZ")))
    except (ValueError, OverflowError):
        return None


def _parse_time(value: Any) -> float:
    parsed = parse_time(value)
    if parsed is None:
        shown = value[:40] if isinstance(value, str) else type(value).__name__
        raise ReportError(f"observedAt {shown!r} is not RFC 3339 UTC seconds")
    return parsed


def _names(value: Any, what: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and len(k) <= 253 and len(v) <= 80
        for k, v in value.items()
    ):
        raise ReportError(f"{what} is not a map of names to digests")
    return dict(value)


def annotation_object(
    value: Any, max_bytes: int, version: int, error: type[ValueError]
) -> dict[str, Any]:
    """The JSON object of a versioned report annotation (``{"v": version, ...}``, at most
    ``max_bytes``); ``error`` for anything else, never another exception (the node reports
    share this framing: this module's and :mod:`dmn.api.policy_report`'s)."""
    if not isinstance(value, str):
        raise error("the annotation is not a string")
    if len(value.encode("utf-8", "surrogatepass")) > max_bytes:
        raise error(f"the report is longer than {max_bytes} bytes")
    try:
        body = json.loads(value)
    except (ValueError, RecursionError) as exc:
        raise error("the report is not JSON") from exc
    if not isinstance(body, dict):
        raise error("the report is not a JSON object")
    if body.get("v") != version:
        raise error(f"report version {str(body.get('v'))[:20]!r} is not {version}")
    return body


def parse_report(value: Any) -> CapabilityReport:
    """The report an annotation value holds; :class:`ReportError` for anything else
    (never another exception, whatever the value: a tenant may have written it)."""
    body = annotation_object(value, MAX_REPORT_BYTES, REPORT_VERSION, ReportError)
    nri = body.get("nri")
    refresh = body.get("refreshSeconds")
    strings = {k: body.get(k) for k in ("node", "bootID", "agentVersion")}
    if not all(isinstance(v, str) and 0 < len(v) <= 253 for v in strings.values()):
        raise ReportError("node, bootID and agentVersion must be non-empty strings")
    if not isinstance(nri, dict) or not all(
        isinstance(nri.get(k), bool) for k in ("registered", "synchronized")
    ):
        raise ReportError("nri must hold the booleans registered and synchronized")
    if isinstance(refresh, bool) or not isinstance(refresh, (int, float)) or not refresh > 0:
        raise ReportError("refreshSeconds must be a positive number")
    return CapabilityReport(
        node=str(strings["node"]),
        boot_id=str(strings["bootID"]),
        agent_version=str(strings["agentVersion"]),
        observed_at=_parse_time(body.get("observedAt")),
        refresh_s=float(refresh),
        nri_registered=bool(nri["registered"]),
        nri_synchronized=bool(nri["synchronized"]),
        opcodes=_names(body.get("opcodes"), "opcodes"),
        builtins=_names(body.get("builtins"), "builtins"),
    )


def revision_requirement(revision: Mapping[str, Any]) -> Requirement | None:
    """The requirement of a NetworkTopologyRevision object; None when the revision does not
    pin its opcode contracts one by one (compiled before they were recorded): admission
    then adds no affinity for it and the node's own checks alone decide."""
    spec = revision.get("spec")
    if not isinstance(spec, Mapping):
        return None
    opcodes = spec.get("opcodeContracts")
    if not isinstance(opcodes, Mapping):
        return None
    builtins: list[tuple[str, str]] = []
    for pin in spec.get("plugins") or ():
        if not isinstance(pin, Mapping):
            continue
        if _implementation_type(pin) == "Builtin":
            builtins.append((str(pin.get("name")), str(pin.get("contractDigest"))))
    return Requirement(
        opcodes=tuple(sorted((str(k), str(v)) for k, v in opcodes.items())),
        builtins=tuple(sorted(builtins)),
    )


def _implementation_type(pin: Mapping[str, Any]) -> Any:
    """``spec.implementation.type`` of a locked plugin: its ``descriptor`` is the plugin's
    JSON form, the NetworkPlugin document under ``descriptor`` beside its programs."""
    node: Any = pin.get("descriptor")
    for key in ("descriptor", "spec", "implementation"):
        node = node.get(key) if isinstance(node, Mapping) else None
    return node.get("type") if isinstance(node, Mapping) else None


@dataclass(frozen=True)
class NodeVerdict:
    """Which capability labels a node should carry, and why not others (for logs/Events)."""

    keys: frozenset[str]
    reason: str  # "" when the report is current


def node_verdict(
    node: Mapping[str, Any],
    requirements: Iterable[Requirement],
    now: float,
    agent_ready: bool | None,
) -> NodeVerdict:
    """The labels ``node`` earns: none unless its report parses, names this node, is
    current (written at most :data:`EXPIRY_PERIODS` refreshes ago and not from the future),
    says NRI is registered and synchronized, and the agent's Pod is Ready (``agent_ready``;
    None when the caller does not know agent Pods, as in the embedded lab); then one key per
    requirement the report satisfies."""
    meta = node.get("metadata") if isinstance(node.get("metadata"), Mapping) else {}
    assert isinstance(meta, Mapping)
    name = meta.get("name")
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), Mapping) else {}
    assert isinstance(annotations, Mapping)
    raw = annotations.get(ANNOTATION)
    if raw is None:
        return NodeVerdict(frozenset(), "no capability report")
    try:
        report = parse_report(raw)
    except ReportError as exc:
        return NodeVerdict(frozenset(), f"capability report not understood: {exc}")
    if report.node != name:
        return NodeVerdict(frozenset(), f"the report names node {report.node[:63]!r}")
    if report.observed_at > now + MAX_SKEW_S:
        return NodeVerdict(frozenset(), "the report is from the future")
    if now > report.expires_at():
        return NodeVerdict(frozenset(), f"the report expired at {format_time(report.expires_at())}")
    if not (report.nri_registered and report.nri_synchronized):
        return NodeVerdict(frozenset(), "the agent's NRI plugin is not registered and synchronized")
    if agent_ready is False:
        return NodeVerdict(frozenset(), "the agent's Pod is not Ready")
    keys = frozenset(req.key for req in requirements if report.satisfies(req))
    return NodeVerdict(keys, "")


def capability_labels(node: Mapping[str, Any]) -> dict[str, str]:
    """The capability labels a Node carries now."""
    labels = (node.get("metadata") or {}).get("labels") or {}
    return {
        k: v for k, v in labels.items() if isinstance(k, str) and k.startswith(LABEL_PREFIX + "/")
    }


def label_patch(node: Mapping[str, Any], keys: Iterable[str]) -> dict[str, Any] | None:
    """A JSON merge patch making the Node's capability labels exactly ``keys`` (other labels
    untouched), or None when they already are."""
    current = capability_labels(node)
    wanted = {k: "true" for k in keys}
    if current == wanted:
        return None
    changes: dict[str, Any] = {k: None for k in current if k not in wanted}
    changes.update({k: v for k, v in wanted.items() if current.get(k) != v})
    return {"metadata": {"labels": changes}}
