"""What one node reports about one DeviceExposurePolicy (status conditions, design §5.2).

Conditions:

* ``Ready`` — True when the policy produced no error on this node;
* ``Conflict`` — True when an equal-priority policy gives the same persona to an item;
* ``Unsupported`` — True when the hardware cannot carry the exposure as written (invalid
  persona for the item, third compatibility domain, unrepresented or busy IOMMU group,
  reserved or oversized attributes);
* ``PendingDrain`` — True when a change waits for allocations to drain.

Policies are cluster-scoped; several nodes report on one policy, each into its own entry of
``status.nodes`` (agent/personas/status_report.py), and the controller aggregates the entries
into the top-level conditions (controller/plugin_status.py) — this module only computes one
node's entry, purely.
"""

from __future__ import annotations

from dmn.agent.personas.model import FindingCode, PersonaSet
from dmn.api.model import DiagnosticEntry
from dmn.api.policy import MAX_NODE_DIAGNOSTICS, NodeCondition, NodePolicyStatus

_UNSUPPORTED = frozenset(
    {
        FindingCode.E_POLICY_INVALID,
        FindingCode.E_THIRD_DOMAIN,
        FindingCode.E_ISOLATION_UNREPRESENTED,
        FindingCode.E_IOMMU_GROUP_BUSY,
        FindingCode.E_RESERVED_ATTRIBUTE,
        FindingCode.E_ATTRIBUTE_LIMIT,
    }
)
MAX_DIAGNOSTICS = MAX_NODE_DIAGNOSTICS


def policy_status(
    policy_name: str, personas: PersonaSet, generation: int | None, now: str, node_name: str
) -> NodePolicyStatus:
    """Node ``node_name``'s entry for the policy; ``now`` is an RFC 3339 timestamp (injected:
    this function reads no clock) used as every ``lastTransitionTime`` and as
    ``lastReportTime`` (the merge keeps the stored ones where nothing changed)."""
    mine = [f for f in personas.findings if f.policy == policy_name]
    exposed = sum(1 for p in personas.personas if p.policy == policy_name and not p.retained)
    codes = {f.code for f in mine}

    def condition(kind: str, true: bool, reason: str, message: str) -> NodeCondition:
        return NodeCondition.model_validate(
            {
                "type": kind,
                "status": "True" if true else "False",
                "observedGeneration": generation,
                "lastTransitionTime": now,
                "reason": reason,
                "message": message[:1024],
            }
        )

    errors = [f for f in mine if f.is_error]
    conflict = FindingCode.E_POLICY_CONFLICT in codes
    unsupported = sorted(c.value for c in codes & _UNSUPPORTED)
    pending = FindingCode.W_PENDING_DRAIN in codes
    conditions = [
        condition(
            "Ready",
            not errors,
            "Published" if not errors else errors[0].code.value,
            f"{exposed} devices published" if not errors else errors[0].message[:1024],
        ),
        condition(
            "Conflict",
            conflict,
            FindingCode.E_POLICY_CONFLICT.value if conflict else "NoConflict",
            "equal-priority policies expose the same persona" if conflict else "",
        ),
        condition(
            "Unsupported",
            bool(unsupported),
            unsupported[0] if unsupported else "Supported",
            ", ".join(unsupported),
        ),
        condition(
            "PendingDrain",
            pending,
            FindingCode.W_PENDING_DRAIN.value if pending else "NothingPending",
            "changes wait for allocations to drain" if pending else "",
        ),
    ]
    diagnostics = [
        DiagnosticEntry.model_validate(
            {"code": f.code.value, "path": f.item or f.device, "message": f.message[:2048]}
        )
        for f in mine[:MAX_DIAGNOSTICS]
    ]
    return NodePolicyStatus.model_validate(
        {
            "nodeName": node_name,
            "observedGeneration": generation,
            "conditions": [c.to_api() for c in conditions],
            "exposedDevices": exposed,
            "diagnostics": [d.to_api() for d in diagnostics] or None,
            "lastReportTime": now,
        }
    )
