"""The project's Prometheus metrics, defined once, on the process's default registry.

Instrumentation sits at boundaries so the core stays pure: the journal store (commit latency,
operation and effect outcomes, which is where every effect's state change becomes durable),
the kubelet/NRI adapters (refusals), the NRI plugin (connections), slice publication, and the
controller's work queue (reconciles). Label values are bounded: hooks, plugin names, opcode
names and reason codes come from the program's own vocabulary, never from tenant input.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

PREFIX = "dmn"

#: Hook programs run by the runner (prepare, connect) and their undo (unprepare, remove),
#: from the intent commit to the terminal commit of the operation, by plugin.
HOOK_DURATION = Histogram(
    f"{PREFIX}_hook_duration_seconds",
    "Time from an operation's intent to its terminal journal commit, by hook and plugin.",
    ["hook", "plugin", "outcome"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
EFFECTS = Counter(
    f"{PREFIX}_effects_total",
    "Effects that reached Applied, Undone or Quarantined in the journal, by opcode.",
    ["opcode", "state"],
)
JOURNAL_COMMIT = Histogram(
    f"{PREFIX}_journal_commit_duration_seconds",
    "Latency of one durable (synced) journal commit.",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
)
JOURNAL_COMMIT_FAILURES = Counter(
    f"{PREFIX}_journal_commit_failures_total", "Journal commits that raised."
)
REFUSALS = Counter(
    f"{PREFIX}_refusals_total",
    "Requests the node agent refused or failed, by request and reason code.",
    ["request", "code"],
)
PUBLISHED_SLICES = Gauge(
    f"{PREFIX}_published_resourceslices", "ResourceSlices this node agent last published."
)
PUBLISHED_DEVICES = Gauge(
    f"{PREFIX}_published_devices", "Devices in the ResourceSlices this node agent last published."
)
RECONCILES = Counter(
    f"{PREFIX}_reconciles_total",
    "Controller reconciles, by kind and result (ok, retry, error).",
    ["kind", "result"],
)
NRI_CONNECTS = Counter(
    f"{PREFIX}_nri_connections_total", "Connections the NRI plugin made to the runtime."
)
NRI_RECONNECTS = Counter(
    f"{PREFIX}_nri_reconnects_total",
    "NRI connections after the first one (the runtime restarted or the connection was lost).",
)
EVENTS_RECORDED = Counter(
    f"{PREFIX}_kubernetes_events_total",
    "Kubernetes Events written, by involved kind and reason.",
    ["kind", "reason"],
)
