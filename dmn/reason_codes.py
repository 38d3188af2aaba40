"""The registry of every reason code the program emits: what it means and what to do.

Reason codes are public API (CLI output, admission responses, topology and attachment status,
Kubernetes Events, metrics labels, logs). This table is the single place that explains them;
``docs/reason-codes.md`` is generated from it (``dmn generate``), and a test scans the source
for every code literal and fails when one is missing here or an entry is no longer emitted.
Codes that carry a number (``E_NETLINK_<errno>``) are registered as patterns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ReasonCode:
    code: str
    area: str
    meaning: str
    action: str


DOC = "documents"
TOPO = "topology compiler"
ADMIT = "controller and webhook"
AGENT = "node agent"
EXEC = "executors"
RUN = "runner and journal"
INV = "inventory and slices"
CLI = "command line and lab"
IPAM = "IP address management"
MULTUS = "Multus automatic mode"


def _r(code: str, area: str, meaning: str, action: str) -> ReasonCode:
    return ReasonCode(code, area, meaning, action)


REGISTRY: tuple[ReasonCode, ...] = (
    # ---- documents: loader, document models, checker (dmn lint, webhook, compiler)
    _r(
        "E_SCHEMA",
        DOC,
        "A document, config or field has the wrong shape, type or value "
        "(missing required field, value out of range, wrong enum).",
        "Fix the field the diagnostic points at; `dmn schema KIND` shows the allowed shape.",
    ),
    _r(
        "E_UNKNOWN_FIELD",
        DOC,
        "A field that the document kind or the plugin's configSchema does not define.",
        "Remove or rename the field (check its spelling and nesting).",
    ),
    _r(
        "E_DUPLICATE_KEY",
        DOC,
        "The same key appears twice in one YAML mapping.",
        "Keep one of the two keys.",
    ),
    _r(
        "E_SYNTAX",
        DOC,
        "A YAML document, guard, reference or CEL expression does not parse.",
        "Fix the expression at the reported column.",
    ),
    _r(
        "E_CEL_TYPE",
        DOC,
        "A CEL device selector names a variable, field or function the DRA device "
        "environment does not have, applies an operator or function to the wrong types, "
        "or does not evaluate to a bool; the API server would refuse it.",
        "Use only `device.driver`, `device.allowMultipleAllocations`, "
        "`device.attributes[domain].id` and `device.capacity[domain].id` with the functions "
        "Kubernetes' CEL environment provides, and make the expression a bool.",
    ),
    _r(
        "E_CEL_COST",
        DOC,
        "A CEL device selector's estimated worst-case cost exceeds Kubernetes' limit for "
        "device selectors (1,000,000 units, about 0.1 s); it is refused before it ever runs.",
        "Nest fewer comprehensions (`all`, `exists`, `map`, `filter`) over lists, or "
        "iterate over shorter literal lists.",
    ),
    _r(
        "E_UNKNOWN_OPCODE",
        DOC,
        "An effect names an opcode that does not exist.",
        "Use a name from `dmn opcodes`.",
    ),
    _r(
        "E_EFFECT_DENIED",
        DOC,
        "An effect (or a step's program) uses an opcode the plugin's "
        "allowedEffects or the topology's effectBudget does not grant.",
        "Add the opcode to allowedEffects / spec.effectBudget.allow if it is intended.",
    ),
    _r(
        "E_WRONG_HOOK",
        DOC,
        "An opcode is used in a hook it may not run in.",
        "Move the effect to the hook `dmn opcodes NAME` lists.",
    ),
    _r(
        "E_REF_UNRESOLVED",
        DOC,
        "A reference names a port, effect, step or plugin that does "
        "not exist (or an input whose producing step has not run on the node).",
        "Point the reference at an existing name; check the plugin is installed.",
    ),
    _r(
        "E_REF_FORWARD",
        DOC,
        "A reference points at an effect that runs later.",
        "Reorder the effects so every reference points backwards.",
    ),
    _r(
        "E_PORT_TYPE",
        DOC,
        "A handle of the wrong type or link type is wired to a port.",
        "Wire an output of the port's type (`dmn opcodes NAME` lists port types).",
    ),
    _r(
        "E_CARDINALITY",
        DOC,
        "A port receives fewer or more handles than its minItems/maxItems.",
        "Wire the number of handles the port declares.",
    ),
    _r(
        "E_ACCESS",
        DOC,
        "A handle does not grant the access an input needs, or exclusive access is used twice.",
        "Use a handle whose grant includes the access.",
    ),
    _r(
        "E_PARAM_TYPE",
        DOC,
        "An opcode parameter is missing, of the wrong type or out of "
        "bounds for some config the schema allows.",
        "Fix the parameter or narrow configSchema so every allowed config binds.",
    ),
    _r(
        "E_PARAM_CONFLICT",
        DOC,
        "A parameter is both written literally and bound from config.",
        "Keep one of parameters / parameterBindings for the field.",
    ),
    _r(
        "E_DUPLICATE_ID",
        DOC,
        "Two effects or two topology steps share an id.",
        "Give each one a unique id.",
    ),
    _r(
        "E_EXPORT_MISSING",
        DOC,
        "An output the descriptor declares (and turns on for this config) is not exported.",
        "Export the output from the last hook program.",
    ),
    _r(
        "E_EXPORT_TYPE",
        DOC,
        "An export's handle type differs from the declared output.",
        "Export a handle of the declared type.",
    ),
    _r(
        "E_EXPORT_UNDECLARED",
        DOC,
        "A program exports a port the descriptor does not declare.",
        "Declare the output in spec.outputs or drop the export.",
    ),
    _r(
        "E_NO_RECOVERY",
        DOC,
        "An effect asks for a recovery strategy its opcode does not support.",
        "Pick a strategy `dmn opcodes NAME` lists.",
    ),
    _r(
        "E_BUDGET",
        DOC,
        "A limit is exceeded (effects per program, steps, roots, size).",
        "Split the work or remove steps.",
    ),
    _r(
        "E_SHARED_PARENT_MUTATION",
        DOC,
        "A program would configure, move or reset a shared parent it only holds a share of.",
        "Act only on the child created from the share.",
    ),
    _r(
        "E_CYCLE",
        TOPO,
        "Topology steps depend on each other in a cycle.",
        "Break the cycle in the steps' inputs.",
    ),
    _r(
        "E_ROOT_COVERAGE",
        TOPO,
        "A topology has no Allocation root, or a claim covers a root more than once.",
        "Add an Allocation step / request each root's class once.",
    ),
    _r(
        "E_FAMILY_CONFLICT",
        DOC,
        "Two effects on one device belong to incompatible families "
        "(or a parent already carries children of another kind).",
        "Use one child kind per parent.",
    ),
    _r(
        "E_RESET_DOMAIN_BUSY",
        DOC,
        "A PCI reset's domain is not quiescent.",
        "Drain the other functions of the reset domain first.",
    ),
    _r(
        "E_IFNAME",
        DOC,
        "An interface name is invalid, reserved (lo, eth0) or used twice in one Pod.",
        "Choose a distinct name of 1-15 characters from [A-Za-z0-9_.-].",
    ),
    _r(
        "E_PREDICATE",
        DOC,
        "An effect names a precondition or postcondition its opcode does not define.",
        "Use the predicates `dmn opcodes NAME` lists.",
    ),
    _r(
        "E_GUARD_TYPE",
        DOC,
        "A `when`/requiredWhen guard compares values of different types "
        "or reads a config field that does not exist.",
        "Fix the guard against configSchema.",
    ),
    _r(
        "E_PATTERN",
        DOC,
        "A configSchema pattern is not a regular expression RE2 accepts "
        "(no backreferences or lookaround; matching is linear-time).",
        "Rewrite the pattern in RE2 syntax.",
    ),
    _r(
        "E_LIMIT",
        DOC,
        "A document exceeds a loader bound (size, nesting depth, node count, aliases, digits).",
        "Make the document smaller or flatter.",
    ),
    _r(
        "E_EMPTY",
        DOC,
        "The input holds no document (an empty file, or only comments).",
        "Point the command at a file with a document.",
    ),
    _r(
        "E_IO",
        CLI,
        "A file or directory could not be read or written.",
        "Check the path and permissions.",
    ),
    _r(
        "E_NAME_INVALID",
        ADMIT,
        "A name, namespace, API group or version that cannot be one segment of a request "
        "path (`.`, `..`, `/`, `%`, control characters, empty, over 253 characters); "
        "refused before any request is sent, so it cannot address another object.",
        "Use the object's real name (a DNS subdomain: lowercase letters, digits, `-`, `.`).",
    ),
    _r(
        "E_ADMISSION_MALFORMED",
        ADMIT,
        "The admission webhook received a request it does not understand: not JSON, nested "
        "too deep, an unknown kind or operation, or a field of the wrong type. It is denied.",
        "Nothing to do for requests from kube-apiserver; anything else is a misrouted or "
        "hostile caller. Check the webhook registration if real reviews are refused.",
    ),
    _r(
        "E_ADMISSION_FAILED",
        ADMIT,
        "The admission webhook could not finish validating (the cluster could not be read, "
        "or an internal error); the request is denied, never admitted unvalidated.",
        "Retry; if it persists, read the controller's log for the failure.",
    ),
    _r(
        "E_POD_REVISION_MIXED",
        ADMIT,
        "A Pod's claims (or extended resources) use DeviceClasses of two different revisions "
        "of one topology; the Pod is denied, naming the claim field.",
        "Use classes of one revision: the topology's stable class, or the per-revision "
        "classes of its newest Ready revision only.",
    ),
    _r(
        "E_POD_NRI_REQUIREMENT",
        ADMIT,
        "A Pod that uses a network of this driver does not list the driver's NRI plugin in "
        "its `required-plugins.noderesource.dev/pod` annotation (or a container-scoped one, "
        "which overrides it), or the value is not a YAML list of names. Without it containerd "
        "would create its containers while the node agent is down.",
        "Let the mutating webhook add it (remove a malformed value), or add the plugin name "
        "to the list yourself.",
    ),
    _r(
        "E_POD_NRI_REQUIREMENT_REMOVED",
        ADMIT,
        "A Pod update removes the driver's NRI plugin from a required-plugins annotation "
        "that named it.",
        "Keep the plugin in the annotation; delete and recreate the Pod to change it.",
    ),
    _r(
        "E_POD_NODE_CAPABILITY",
        ADMIT,
        "A created Pod that uses a network of this driver has a required node affinity term "
        "(or none at all) that does not require the `capable.dra-multi-network.schseba."
        "github.io/<digest>` label of each revision it uses (`operator: Exists`), so the "
        "scheduler could place it on a node whose agent cannot run those revisions. The "
        "mutating webhook adds these expressions; this means the Pod was created around it.",
        "Let the mutating webhook run (check the `dra-multi-network-pods` registration and "
        "that a controller replica serves), or add the expressions the message names to "
        "every term of `requiredDuringSchedulingIgnoredDuringExecution`.",
    ),
    _r(
        "E_POD_NODE_BYPASS",
        ADMIT,
        "A created Pod that uses a network of this driver sets `spec.nodeName` to a Node "
        "that does not exist or lacks the capability label of a revision it uses (its node "
        "agent is down, stale or runs other executor contracts). Binding by name skips the "
        "scheduler, so it may not skip this check.",
        "Leave `spec.nodeName` empty and let the scheduler pick a capable node, or bring the "
        "named node's agent up to a build that runs the revision (its Node then gets the "
        "label within one capability refresh).",
    ),
    _r(
        "E_CONFLICT",
        ADMIT,
        "An existing object conflicts with what would be created "
        "(never overwritten), or an update raced another writer.",
        "Delete or rename the conflicting object; retried automatically for update races.",
    ),
    _r(
        "E_NO_MATCHING_DEVICES",
        ADMIT,
        "A DeviceClass of a Ready topology selects no device any node publishes, so its "
        "claims cannot be scheduled (NetworkTopology condition DevicesMatched).",
        "Expose a device with the root's plugin and mode through a DeviceExposurePolicy, "
        "resolve policy conflicts, or relax the step's hardwareSelectors; "
        "`status.deviceMatches` has the count per class.",
    ),
    _r(
        "E_SELECTOR_ERROR",
        ADMIT,
        "A DeviceClass selector of a topology fails with a CEL runtime error on a published "
        "device; the scheduler aborts every allocation attempt that reaches that device.",
        'Guard the step\'s hardwareSelectors (`has(...)`, `"x" in device.attributes[...]`) '
        "so a device without the attribute is simply not selected.",
    ),
    _r("E_USAGE", CLI, "Bad command-line arguments.", "See the command's --help."),
    # ---- node agent refusals (NodePrepare, RunPodSandbox, CreateContainer, removal)
    _r(
        "E_ADMIN_ACCESS",
        AGENT,
        "The claim requests adminAccess, which this driver does not support.",
        "Remove adminAccess from the ResourceClaim.",
    ),
    _r(
        "E_ALLOCATION_CHANGED",
        AGENT,
        "A prepared claim now has a different allocation.",
        "Delete and recreate the claim; the old preparation is undone first.",
    ),
    _r(
        "E_ALLOCATION_MODE",
        AGENT,
        "The claim uses an allocation mode the initial profile "
        "refuses (All, count > 1 for a request or a firstAvailable alternative, a "
        "firstAvailable result that names no alternative of the request).",
        "Request exactly one device per request or per firstAvailable alternative.",
    ),
    _r(
        "E_API",
        AGENT,
        "A Kubernetes API call failed (retried).",
        "Check API server health and the agent's RBAC; it retries by itself.",
    ),
    _r(
        "E_API_UNREACHABLE",
        AGENT,
        "The API server could not be reached at start.",
        "Check --url/--kubeconfig and network policy to the API server.",
    ),
    _r(
        "E_ATTACHED",
        AGENT,
        "A claim cannot be unprepared while a live attachment uses it.",
        "Delete the Pod first; unprepare is retried by kubelet.",
    ),
    _r(
        "E_DEVICE_METADATA",
        AGENT,
        "A claim's KEP-5304 device metadata file or its CDI spec (--device-metadata) could "
        "not be written or removed, or another claim's file is at its path (retryable).",
        "Check the agent's kubelet plugin and CDI directories; a file of another claim of the "
        "same name goes when that claim is unprepared, a foreign file is never overwritten.",
    ),
    _r(
        "E_ATTACHMENT",
        AGENT,
        "An attachment failed; its status carries the underlying code.",
        "Read the attachment status and the Pod's Events for the underlying code.",
    ),
    _r(
        "E_ATTACHMENT_STATE",
        AGENT,
        "The sandbox's attachment is in a state that does not allow the request.",
        "Wait for the previous operation to finish or remove the Pod.",
    ),
    _r(
        "E_CLAIM_IN_USE",
        AGENT,
        "The claim is already attached to another sandbox.",
        "Use one claim per Pod (a claim reserved for one consumer).",
    ),
    _r(
        "E_CLAIM_NOT_FOUND",
        AGENT,
        "The ResourceClaim does not exist.",
        "Check the Pod's resourceClaims; the claim may have been deleted.",
    ),
    _r(
        "E_CLAIM_ORIGIN_CONFIG",
        AGENT,
        "The claim carries opaque config for this driver that did not come from its DeviceClass.",
        "Remove driver config from the claim itself.",
    ),
    _r(
        "E_CLAIM_CONFIG",
        AGENT,
        "The claim configures this driver with something other than one valid "
        "WorkloadParameters per request (another kind, a class-origin one, a bad value type, "
        "or a field set twice).",
        "Configure only WorkloadParameters in the claim; everything else is the topology's.",
    ),
    _r(
        "E_CLAIM_UID",
        AGENT,
        "The claim's UID differs from the one kubelet asked for (recreated under the same name).",
        "Nothing: the request refers to an old object.",
    ),
    _r(
        "E_CLEANUP_INCOMPLETE",
        AGENT,
        "Undo of a claim's recorded effects did not finish (retried).",
        "Check quarantined effects with `dmn journal show`; see the agent log.",
    ),
    _r(
        "E_CONNECT_FAILED",
        AGENT,
        "A connect program failed and was rolled back.",
        "Read the Pod's Events for the effect's code; fix the topology or node and retry.",
    ),
    _r(
        "E_CONTRACT_MISMATCH",
        AGENT,
        "The plugin contract on the node differs from the one the revision locked.",
        "Upgrade the node agent or the NetworkPlugin to match.",
    ),
    _r(
        "E_DEVICE_GONE",
        AGENT,
        "The allocated device has no kernel link on this node any more.",
        "Check the hardware; the agent republishes its devices.",
    ),
    _r(
        "E_DEVICE_IDENTITY",
        AGENT,
        "The allocated device's identity no longer matches what was published.",
        "Let the agent republish; reallocate the claim.",
    ),
    _r(
        "E_HOST_NETNS",
        AGENT,
        "The runtime offered the host network namespace as a sandbox.",
        "Pods with network claims must not use hostNetwork.",
    ),
    _r(
        "E_HOST_NETWORK",
        AGENT,
        "A hostNetwork Pod asked for network claims.",
        "Remove hostNetwork or the claims.",
    ),
    _r(
        "E_INTERNAL",
        AGENT,
        "An unexpected error in one claim (a bug); other claims continue.",
        "Report it with the agent log lines carrying the claim id.",
    ),
    _r(
        "E_READINESS_STALE",
        AGENT,
        "The agent's readiness report is older than the probe allows "
        "(the agent is hung or stopped).",
        "Check the agent's log; restart it if it hangs.",
    ),
    _r(
        "E_AGENT_NOT_READY",
        AGENT,
        "The node agent is not ready: kubelet has not registered the plugin, the NRI runtime "
        "is not connected, or the journal is not open and writable (the message names which).",
        "Check the kubelet plugin directories, the runtime's NRI socket and the state dir.",
    ),
    _r(
        "E_JOURNAL",
        AGENT,
        "The journal could not be opened or written.",
        "Check the state directory's disk, permissions and free space.",
    ),
    _r(
        "E_JOURNAL_CORRUPT",
        RUN,
        "A journal record cannot be decoded.",
        "Keep the state directory for analysis; do not delete it while effects are recorded.",
    ),
    _r(
        "E_HOOK_DEADLINE",
        AGENT,
        "An NRI hook outlived its deadline (the runtime was already answered): it attached "
        "nothing, and undid what it had started.",
        "Look for what made the hook slow (API server, a slow executor, the node lock). A "
        "refused sandbox is retried by kubelet; one the runtime started anyway (containerd "
        "does after its own NRI timeout) is attached at its first CreateContainer.",
    ),
    _r(
        "E_JOURNAL_FAILED",
        AGENT,
        "The journal refuses writes because an earlier commit failed.",
        "Free space or fix the disk, then restart the agent so that recovery runs.",
    ),
    _r(
        "E_JOURNAL_HELD",
        AGENT,
        "Another agent process holds the journal.",
        "Run one agent per node; stop the other process.",
    ),
    _r(
        "E_JOURNAL_MISSING",
        RUN,
        "No journal exists in the given state directory.",
        "Check --state-dir.",
    ),
    _r(
        "E_JOURNAL_NOT_QUARANTINED",
        RUN,
        "dmn journal resolve named no Quarantined effect (unknown operation or effect, or "
        "one that is not Quarantined); nothing was changed.",
        "Check the operation and effect with dmn journal show.",
    ),
    _r(
        "E_JOURNAL_SCHEMA",
        RUN,
        "The journal was written by an incompatible version.",
        "Run the agent version that wrote it, or follow the upgrade notes.",
    ),
    _r(
        "E_JOURNAL_WRITE",
        AGENT,
        "A journal commit failed (no space left, I/O error).",
        "Free space or fix the disk, then restart the agent so that recovery runs.",
    ),
    _r(
        "E_KUBECONFIG",
        AGENT,
        "The kubeconfig file does not exist or cannot be used.",
        "Fix --kubeconfig.",
    ),
    _r(
        "E_MIXED_REVISIONS",
        AGENT,
        "One claim's results reference more than one topology revision.",
        "Recreate the claim from one DeviceClass set.",
    ),
    _r(
        "E_MULTIPLE_CONSUMERS",
        AGENT,
        "A claim is reserved for more than one Pod.",
        "Use a ResourceClaimTemplate or one Pod per claim.",
    ),
    _r(
        "E_NETNS_GONE",
        AGENT,
        "The sandbox's network namespace disappeared.",
        "The Pod is being torn down; nothing to do.",
    ),
    _r(
        "E_NODE_NOT_FOUND",
        AGENT,
        "The Node object for --node-name does not exist or has no UID.",
        "Check --node-name (defaults to the hostname).",
    ),
    _r(
        "E_NOT_ALLOCATED",
        AGENT,
        "The claim has no allocation yet.",
        "Wait for the scheduler; check the claim's DeviceClass exists.",
    ),
    _r(
        "E_NOT_PREPARED",
        AGENT,
        "A sandbox needs a claim this node has not prepared.",
        "Check kubelet's NodePrepareResources result for the claim.",
    ),
    _r(
        "E_NOT_PUBLISHED",
        AGENT,
        "This node has not published its devices yet.",
        "Wait for the agent's ResourceSlices; retry.",
    ),
    _r(
        "E_NOT_READY",
        AGENT,
        "A container start was refused because its sandbox's networks are not Ready.",
        "Read the sandbox's earlier refusal in the Pod's Events.",
    ),
    _r(
        "E_NOT_RESERVED",
        AGENT,
        "The claim is not reserved for this Pod.",
        "Check the claim's status.reservedFor.",
    ),
    _r(
        "E_NOT_THIS_NODE",
        AGENT,
        "The allocated device is not in this node's pool.",
        "Reallocate the claim; check nodeSelector and slices.",
    ),
    _r(
        "E_NO_NETNS",
        AGENT,
        "The runtime supplied no network namespace for the sandbox.",
        "Check the container runtime's NRI configuration.",
    ),
    _r(
        "E_PERSONA_MISMATCH",
        AGENT,
        "The allocated device's persona differs from what the root's plugin and mode need.",
        "Check DeviceExposurePolicies and the DeviceClass.",
    ),
    _r(
        "E_PIN_MISSING",
        AGENT,
        "A sandbox lost its namespace pin.",
        "Remove the Pod; check that nothing unmounts the agent's state directory.",
    ),
    _r(
        "E_PLUGIN_UNSUPPORTED",
        AGENT,
        "The node agent cannot run this plugin or persona yet (for example VFIO, RDMA).",
        "Use a supported plugin; see the README's status.",
    ),
    _r("E_POD_NODE", AGENT, "The Pod is not bound to this node.", "Nothing: a stale request."),
    _r("E_POD_NOT_FOUND", AGENT, "The Pod does not exist (retried).", "Nothing if it was deleted."),
    _r(
        "E_POD_UID",
        AGENT,
        "The Pod's UID differs from the sandbox's.",
        "Nothing: the Pod was recreated under the same name.",
    ),
    _r(
        "E_PREPARE_FAILED",
        AGENT,
        "A root's prepare program failed and was rolled back.",
        "Read the claim's Events for the effect's code.",
    ),
    _r(
        "E_RESERVED",
        AGENT,
        "A device is held exclusively by another claim (or the journal reserves it).",
        "Wait for the other claim to be released.",
    ),
    _r(
        "E_REVISION_DIGEST",
        AGENT,
        "The revision's digest differs from the one the DeviceClass pinned.",
        "Recreate the claim against the current DeviceClass.",
    ),
    _r(
        "E_REVISION_NOT_FOUND",
        AGENT,
        "The pinned NetworkTopologyRevision does not exist.",
        "Check the topology's status; revisions in use are kept by a finalizer.",
    ),
    _r(
        "E_REVISION_NOT_READY",
        AGENT,
        "The pinned revision is not Ready.",
        "Read the NetworkTopology's status and Events.",
    ),
    _r(
        "E_REVISION_UID",
        AGENT,
        "The revision was recreated under the same name.",
        "Recreate the claim.",
    ),
    _r(
        "E_ROOT_CONFIG",
        AGENT,
        "The DeviceClass's root config for this driver is invalid.",
        "Let the controller regenerate the DeviceClass (do not edit it).",
    ),
    _r(
        "E_SHARE",
        AGENT,
        "A shared allocation's shareID does not match its sharing.",
        "Reallocate the claim.",
    ),
    _r(
        "E_SHARED_BUSY",
        AGENT,
        "An exclusive allocation targets a parent that still has shares.",
        "Wait for the shared claims to be released.",
    ),
    _r(
        "E_STARTED_WITHOUT_NETWORK",
        AGENT,
        "A sandbox of a Pod with our claims already had a container when the agent first "
        "saw it (the runtime created it while no plugin held it): that container ran "
        "without the Pod's networks, so the sandbox is never attached late.",
        "Delete the Pod so that a new sandbox gets its networks; enable containerd's NRI "
        "default validator (see the operator guide) so that containers wait for the agent.",
    ),
    # ---- executors (node effects)
    _r("E_ENV", EXEC, "An executor was called without its environment (a bug).", "Report it."),
    _r(
        "E_FOREIGN_MASTER",
        EXEC,
        "A bond member already has a master we did not set.",
        "Release the link from its current master.",
    ),
    _r(
        "E_LINK_CHANGED",
        EXEC,
        "A link is no longer the one captured before the effect.",
        "The effect is refused; check what else manages the link.",
    ),
    _r(
        "E_IDENTITY_MISMATCH",
        EXEC,
        "The recorded ifindex of a link the journal owns holds a link with other kernel-set "
        "facts (kind, lower device, permanent MAC, parent device; a representor's switch ID "
        "and port name): a tenant may have replaced it. The effect is quarantined; nothing "
        "was moved, renamed, reconfigured or deleted.",
        "Inspect the namespace (`dmn journal show` names the ifindex); put the link back or "
        "remove the impostor by hand, then `dmn journal resolve` the effect.",
    ),
    _r(
        "E_IDENTITY_UNRECORDED",
        EXEC,
        "The journal record was written before link identities were recorded, so ownership "
        "cannot be proven; the effect is quarantined rather than guessed.",
        "Check the link by hand (name and alias are only hints), clean it up, then "
        "`dmn journal resolve` the effect.",
    ),
    _r(
        "E_ADDRESS_EXISTS",
        EXEC,
        "The link already has an address ip/addresses would add (or it appeared while "
        "adding); an address the effect did not add is never adopted. Nothing was changed.",
        "Remove the address from the plugin's parameters or find what else configures the link.",
    ),
    _r(
        "E_ADDRESS_NOT_OWNED",
        EXEC,
        "Undo of ip/addresses left an address in place it cannot prove it added: its kernel "
        "creation stamp differs from the recorded one (someone deleted and re-added it), or "
        "it is the IPv4 primary of a secondary address that is not ours. The addresses "
        "proven ours were deleted; the effect is quarantined.",
        "Inspect the link (`dmn journal show` names the addresses), remove what is not "
        "wanted by hand, then `dmn journal resolve` the effect.",
    ),
    _r(
        "E_ROUTE_EXISTS",
        EXEC,
        "A route with the destination, table and metric of a route ip/routes would add "
        "exists (or appeared while adding); a route the effect did not add is never adopted "
        "(an identical route through the same gateway out of another of the Pod's links is "
        "shared instead). Nothing was changed.",
        "Choose another metric or table, or find what else configures the sandbox's routes.",
    ),
    _r(
        "E_ROUTE_NOT_OWNED",
        EXEC,
        "Undo of ip/routes left a route in place that has the recorded key but other "
        "attributes (gateway, source, link, scope or protocol): someone changed it. The "
        "routes proven ours were deleted; the effect is quarantined.",
        "Inspect the sandbox's routes (`dmn journal show` names the route), remove what is "
        "not wanted by hand, then `dmn journal resolve` the effect.",
    ),
    _r(
        "E_NOT_CARRIED",
        EXEC,
        "ip/carried-host-config was given an interface whose move recorded no host "
        "addresses and routes (a linux/link-move/v1 without carryHostConfig, or another "
        "effect's handle). Nothing was changed.",
        "Bind the effect's interface from the move's output and set the move's "
        "carryHostConfig to true (host-cni: carryHostAddresses).",
    ),
    _r(
        "E_CARRY_TOO_LARGE",
        EXEC,
        "A link to be moved with carryHostConfig holds more host addresses (32) or routes "
        "through it (64) than a move carries; it is refused rather than carried in part. "
        "Nothing was changed.",
        "Move the link without carrying its host configuration and address the Pod's "
        "interface from the plugin's addresses and routes (or an IPPool) instead.",
    ),
    _r(
        "E_RULE_EXISTS",
        EXEC,
        "A policy routing rule of the family holds a priority ip/rules would use (or one "
        "appeared while adding); a rule the effect did not add is never adopted. Nothing was "
        "changed.",
        "Choose other priorities or find what else configures the sandbox's rules.",
    ),
    _r(
        "E_RULE_NOT_OWNED",
        EXEC,
        "Undo of ip/rules left a rule in place that holds a recorded priority with other "
        "attributes: someone changed it. The rules proven ours were deleted; the effect is "
        "quarantined.",
        "Inspect the sandbox's rules (`dmn journal show` names the rule), remove what is not "
        "wanted by hand, then `dmn journal resolve` the effect.",
    ),
    _r(
        "E_NEIGHBOUR_EXISTS",
        EXEC,
        "The link has a permanent or no-ARP neighbour entry for an address ip/neighbours "
        "would add (or one appeared while adding); an entry the effect did not add is never "
        "adopted. Nothing was changed.",
        "Remove the entry from the plugin's parameters or find what else configures the link.",
    ),
    _r(
        "E_NEIGHBOUR_NOT_OWNED",
        EXEC,
        "Undo of ip/neighbours left an entry in place that has another MAC address or state "
        "than recorded: someone changed it. The entries proven ours were deleted; the effect "
        "is quarantined.",
        "Inspect the link's neighbours (`dmn journal show` names the entry), remove what is "
        "not wanted by hand, then `dmn journal resolve` the effect.",
    ),
    _r(
        "E_IFINDEX_TAKEN",
        EXEC,
        "No free ifindex could be chosen for a link about to be created (eight random picks "
        "were taken).",
        "Retry; if it persists, report it with the namespace's link count.",
    ),
    _r(
        "E_LINK_LOST",
        EXEC,
        "A link this driver created cannot be found.",
        "Recovery quarantines it if needed; see `dmn journal show`.",
    ),
    _r(
        "E_LINK_NOT_FOUND",
        EXEC,
        "The handle's link does not exist.",
        "Check the device; the agent republishes its inventory.",
    ),
    _r(
        "E_MTU_EXCEEDS_PARENT",
        EXEC,
        "A child's MTU is larger than its parent's.",
        "Lower the child's mtu or raise the parent's.",
    ),
    _r(
        "E_MTU_MISMATCH",
        EXEC,
        "A bond member's MTU differs from the bond's.",
        "Give members and bond the same mtu.",
    ),
    _r(
        "E_NAME_TAKEN",
        EXEC,
        "The interface name is already used in the target namespace.",
        "Choose another ifName.",
    ),
    _r(
        "E_NETNS_ENTER",
        EXEC,
        "Entering a network namespace failed.",
        "The Pod is probably gone; check the agent log.",
    ),
    _r(
        "E_NETNS_MISMATCH",
        EXEC,
        "A namespace path no longer holds the recorded namespace.",
        "The effect is refused; the sandbox was replaced.",
    ),
    _r(
        "E_NETNS_UNKNOWN",
        EXEC,
        "A namespace identity is not one the call knows.",
        "The effect is refused (a stale record).",
    ),
    _r(
        "E_NOT_OWNED",
        EXEC,
        "The link was not created by this driver (ownership is proven "
        "from the journal, never from names).",
        "Nothing: foreign links are never touched.",
    ),
    _r(
        "E_NOT_SAME_SANDBOX",
        EXEC,
        "Two handles of one effect are in different namespaces.",
        "Wire handles from the same Pod.",
    ),
    _r(
        "E_NO_SANDBOX",
        EXEC,
        "An opcode that needs the verified sandbox ran without one.",
        "Use it only in connect programs.",
    ),
    _r(
        "E_OWNERSHIP_CONFLICT",
        EXEC,
        "More than one link claims the same ownership alias.",
        "Remove the duplicate link by hand after checking `dmn journal show`.",
    ),
    _r("E_PORT", EXEC, "An executor input got the wrong number of handles (a bug).", "Report it."),
    _r(
        "E_SCOPE",
        EXEC,
        "A handle is in the wrong namespace for the opcode.",
        "Check the program's wiring with `dmn explain`.",
    ),
    _r(
        "E_VLAN_TAKEN",
        EXEC,
        "The VLAN already exists on the parent.",
        "Choose another vlanId or remove the existing VLAN link.",
    ),
    _r(
        "E_NETLINK",
        EXEC,
        "A netlink read failed (no errno to report).",
        "Read the message; check the device still exists.",
    ),
    _r(
        "E_VF_NOT_FOUND",
        EXEC,
        "The PF reports no settings for the VF.",
        "Check the PF's sriov_numvfs; the agent republishes its devices.",
    ),
    _r(
        "E_VF_MAPPING",
        EXEC,
        "The handle's VF is not (or no longer) that VF of its PF.",
        "The VF changed since allocation; reallocate the claim.",
    ),
    _r(
        "E_PF_NOT_FOUND",
        EXEC,
        "The VF's PF is not in the host namespace.",
        "Check the PF; it must stay in the host namespace.",
    ),
    _r(
        "E_PF_CHANGED",
        EXEC,
        "The recorded PF is gone (its VFs with it); nothing is written.",
        "Check the PF by hand; nothing was written.",
    ),
    _r(
        "E_REPRESENTOR_MAPPING",
        EXEC,
        "The representor could not be proven to belong to the "
        "handle's VF (switch ID and port name).",
        "Check the eswitch; the effect is refused.",
    ),
    _r(
        "E_BRIDGE_GRANT",
        EXEC,
        "The bridge alias has no allowedHostBridges grant, or the granted bridge is missing, "
        "has no VLAN filtering, another MAC (a new incarnation) or is down.",
        "Fix the policy grant or the bridge; the effect is refused.",
    ),
    _r(
        "E_WORKLOAD_PARAMETER",
        AGENT,
        "The claim's WorkloadParameters set a field its root plugin does not declare "
        "workloadSettable, or a value the plugin's configSchema rejects.",
        "Set only the plugin's workload-settable fields (dmn explain shows them), with valid "
        "values.",
    ),
    _r(
        "E_VLAN_DENIED",
        EXEC,
        "A requested VLAN is not permitted by the approved bridge's (or uplink's) grant.",
        "Use a granted VLAN or extend the policy's vlans.",
    ),
    _r(
        "E_UPLINK_GRANT",
        EXEC,
        "The uplink alias has no allowedHostBridges[].uplinks[] grant on that bridge, or the "
        "granted uplink is missing or its netdev is on another device than the granted one.",
        "Fix the policy's uplink grant (name, alias, device address) or the uplink.",
    ),
    _r(
        "E_UPLINK_NOT_PORT",
        EXEC,
        "The granted uplink exists but is not a port of the approved bridge.",
        "Enslave the uplink to the approved bridge, or fix the grant.",
    ),
    _r(
        "E_UPLINK_VLAN_CHANGED",
        EXEC,
        "A driver-created VLAN on a shared uplink has flags (PVID, untagged) someone else set "
        "since; its last reference's removal is refused and the effect stays Quarantined.",
        "Decide who owns the VLAN; restore the tagged entry or resolve the effect "
        "(dmn journal resolve) and remove the VLAN by hand.",
    ),
    _r(
        "E_UPLINK_VLAN_IN_USE",
        EXEC,
        "The last reference to a driver-created uplink VLAN was released, but another port of "
        "the bridge (or the bridge itself) still uses that VLAN; it stays, the effect Quarantined.",
        "Remove the foreign port's VLAN or resolve the effect (dmn journal resolve).",
    ),
    _r(
        "E_REFERENCES_UNAVAILABLE",
        EXEC,
        "An executor that keeps shared references in the journal was given no journal records "
        "view in its environment (a node wiring fault, not an input error).",
        "Run the effect through the node agent, which provides the view.",
    ),
    _r(
        "E_OVS_BRIDGE_GRANT",
        EXEC,
        "The OVS bridge alias has no grant, or the granted bridge is not in OVSDB or was "
        "replaced (another Bridge row UUID than the one recorded).",
        "Fix the policy grant or the bridge; the effect is refused.",
    ),
    _r(
        "E_OVS_PORT_EXISTS",
        EXEC,
        "OVSDB already has a Port or Interface row under the representor's name that the "
        "journal did not record as created by this effect; it is never adopted.",
        "Remove the foreign port by hand if it is stale; nothing was written.",
    ),
    _r(
        "E_OVSDB",
        EXEC,
        "The node's ovsdb-server could not be reached, refused a transaction, or "
        "ovs-vswitchd did not apply it before the deadline.",
        "Check ovsdb-server and ovs-vswitchd on the node; the journal says what was committed.",
    ),
    _r(
        "E_DRIVER_NOT_ALLOWED",
        EXEC,
        "The driver a PCI function is to be bound to is not in the exposure policy's "
        "allowedDrivers.",
        "Add the driver to the policy's hardware.allowedDrivers or choose another.",
    ),
    _r(
        "E_FUNCTION_BUSY",
        EXEC,
        "The PCI function is in use: one of its netdevices is up, or its VFIO group is open "
        "(unbinding would block until the holder closes it).",
        "Stop the user of the function (or of its VFIO group) first; nothing was changed.",
    ),
    _r(
        "E_NO_IOMMU_GROUP",
        EXEC,
        "The PCI function has no IOMMU group, so it cannot be isolated for VFIO.",
        "Enable the IOMMU (intel_iommu=on / amd_iommu=on) on the node.",
    ),
    _r(
        "E_SYSFS",
        EXEC,
        "A sysfs read of a PCI function failed.",
        "Read the message; check the function still exists.",
    ),
    _r(
        "E_SYSFS_WRITE",
        EXEC,
        "A sysfs write (driver_override, bind/unbind, drivers_probe, reset, an IPoIB mode or "
        "MTU) failed or did not take; the message carries the errno or what was read back.",
        "Read the message; check `dmn journal show` for what was recorded.",
    ),
    _r(
        "E_SYSFS_VIEW",
        EXEC,
        "No sysfs showing the sandbox's network namespace could be mounted (or, in tests, "
        "none was recorded for it); the netdev's sysfs attributes cannot be reached.",
        "Read the message (the failing mount/setns call and its errno); the agent needs "
        "CAP_SYS_ADMIN to mount sysfs.",
    ),
    _r(
        "E_NOT_INFINIBAND",
        EXEC,
        "The handle's netdev is not an IPoIB interface of a PCI function (sysfs type is not "
        "32, or it has no IPoIB mode attribute or no parent device).",
        "Allocate an InfiniBand device for linkType infiniband.",
    ),
    _r(
        "E_IPOIB_MODE_UNSUPPORTED",
        EXEC,
        "Connected mode was asked for an IPoIB interface whose address lacks the RC flag "
        "(the kernel refuses it).",
        "Use ipoibMode datagram for this device.",
    ),
    _r(
        "E_DRIVER_BIND",
        EXEC,
        "A PCI function is not bound to the driver it should be after a bind or its undo "
        "(or the target driver is not loaded).",
        "Load the driver module on the node, or check the function's binding by hand.",
    ),
    _r(
        "E_RESET_UNSUPPORTED",
        EXEC,
        "The PCI function offers no reset, or not the requested reset method.",
        "Use method auto or one the function lists in reset_method.",
    ),
    _r(
        "E_VFIO_NODE",
        EXEC,
        "The function is not bound to an allowed VFIO driver, or its VFIO device node is "
        "missing or is not the kernel's device.",
        "Bind the function with pci/driver-bind first; check /dev/vfio on the node.",
    ),
    _r(
        "E_VFIO_CDEV_UNAVAILABLE",
        EXEC,
        "accessBackend cdev was asked for, but the kernel offers no VFIO device cdev for the "
        "function (it needs CONFIG_VFIO_DEVICE_CDEV, Linux 6.6+).",
        "Use accessBackend group on this node.",
    ),
    _r(
        "E_DEVICE_NODE",
        EXEC,
        "A granted device node is missing, not a character device, or recorded malformed.",
        "Check /dev on the node; the grant is refused or left for inspection.",
    ),
    _r(
        "E_RDMA_NETLINK",
        EXEC,
        "An RDMA netlink request failed (the message carries the errno).",
        "Check that the RDMA device still exists (`rdma dev`).",
    ),
    _r(
        "E_RDMA_NETNS_SHARED",
        EXEC,
        "The RDMA subsystem is in shared netns mode: a device cannot be given to one sandbox.",
        "Set `rdma system set netns exclusive` on the node (at boot, before other namespaces).",
    ),
    _r(
        "E_RDMA_NETNS_EXCLUSIVE",
        EXEC,
        "The RDMA subsystem is in exclusive netns mode but the step's config asked for shared "
        "association (rdmaNetns: shared): the sandbox would not see the device.",
        "Set rdmaNetns: exclusive in the topology step, or run the node in shared mode.",
    ),
    _r(
        "E_RDMA_NETNS_UNSUPPORTED",
        EXEC,
        "The kernel refuses to move this RDMA device to another namespace (its driver cannot "
        "disassociate user contexts; soft-RoCE rdma_rxe is one).",
        "Use an RDMA device whose driver supports namespace moves, or shared mode without "
        "rdma/netns-assign.",
    ),
    _r(
        "E_RDMA_NODE",
        EXEC,
        "The RDMA device has no character node of the requested kind, or it is not the kernel's.",
        "Load the module (ib_uverbs, rdma_ucm, ib_umad) on the node; check /dev/infiniband.",
    ),
    _r(
        "E_DEVLINK",
        EXEC,
        "A devlink request failed (the message carries the errno), or the kernel has no devlink.",
        "Check the devlink instance (`devlink dev`) of the function.",
    ),
    _r(
        "E_ESWITCH_FAILED",
        EXEC,
        "A ManageEswitch transition of a PF did not complete (the message names the effect).",
        "Read the node agent's log and `dmn journal show` for the eswitch operation.",
    ),
    _r(
        "E_ESWITCH_UNSUPPORTED",
        EXEC,
        "The function's devlink instance has no eswitch.",
        "Expose eswitch management only for PFs whose driver supports switchdev.",
    ),
    _r(
        "E_CDI_SPEC",
        EXEC,
        "The CDI spec file of a VFIO grant could not be written, or another file is at its path.",
        "Check the agent's CDI directory; a foreign file is never overwritten.",
    ),
    _r(
        "E_SYSCTL_KEY",
        EXEC,
        "A per-interface sysctl path was refused before it was built: the key is not ipv4/ipv6 "
        "and [a-z][a-z0-9_]*, or the link's name would leave its conf directory or name a "
        "namespace-wide table (all, default). Plugins reach only the sysctl/interface/v1 "
        "allowlist; this is a bug or a tampered record.",
        "Report it with the effect's record (`dmn journal show`).",
    ),
    _r(
        "E_SYSCTL",
        EXEC,
        "Reading or writing a per-interface sysctl failed (the message carries the kernel's "
        "error, e.g. a value the kernel refuses), or a value read back otherwise after undo.",
        "Check the link's settings in the Pod's namespace and the kernel's limits for the key.",
    ),
    _r(
        "E_SYSCTL_UNAVAILABLE",
        EXEC,
        "The kernel has no such per-interface sysctl for this link (IPv6 disabled on the node "
        "or for the link type, or a key this kernel lacks).",
        "Enable the protocol on the node, or drop the setting from the plugin.",
    ),
    _r(
        "E_ETHTOOL",
        EXEC,
        "An ethtool netlink request failed (the message carries the errno), or features did not "
        "read back as recorded after undo.",
        "Check the link's features (`ethtool -k`) in the Pod's namespace.",
    ),
    _r(
        "E_ETHTOOL_UNSUPPORTED",
        EXEC,
        "The node's kernel has no ethtool generic-netlink family (before Linux 5.6, or built "
        "without CONFIG_ETHTOOL_NETLINK); ethtool/features/v1 cannot run there.",
        "Run the node on a kernel with ethtool netlink, or drop the features effect.",
    ),
    _r(
        "E_FEATURE_FIXED",
        EXEC,
        "An offload feature the plugin asks to change is fixed on this device (the driver "
        "does not let it change, or the kernel never does); nothing was changed.",
        "Drop the feature from the plugin's features map for this device kind, or ask for "
        "the value the device has (`ethtool -k` marks it [fixed]).",
    ),
    _r(
        "E_FEATURE_UNKNOWN",
        EXEC,
        "The node's kernel does not know an allowlisted offload feature name (an older kernel); "
        "nothing was changed.",
        "Drop the feature from the plugin, or run the node on a newer kernel.",
    ),
    # ---- namespace pins
    _r(
        "E_NOT_A_NETNS",
        AGENT,
        "The path given as a sandbox namespace is not a namespace file.",
        "Check the runtime's sandbox namespace path.",
    ),
    _r(
        "E_NETNS_STALE",
        AGENT,
        "A namespace pin comes from an earlier boot.",
        "Nothing: stale pins are cleaned up.",
    ),
    _r(
        "E_PIN_BUSY",
        AGENT,
        "A namespace pin is kept because cleanup is not verified.",
        "Check quarantined effects with `dmn journal show`.",
    ),
    _r(
        "E_PIN_CONFLICT",
        AGENT,
        "The pin path already pins another namespace.",
        "Check the state directory for leftovers of another agent.",
    ),
    _r("E_PIN_ID", AGENT, "An attachment id is not a valid pin name.", "Report it."),
    _r(
        "E_PIN_MISMATCH",
        AGENT,
        "A pin does not hold the namespace after mounting.",
        "Check mount propagation of the state directory.",
    ),
    _r(
        "E_PIN_MOUNT",
        AGENT,
        "Bind-mounting the namespace pin failed.",
        "The agent needs CAP_SYS_ADMIN and a writable state directory.",
    ),
    _r(
        "E_PIN_UMOUNT",
        AGENT,
        "Unmounting a namespace pin failed.",
        "Check for processes holding the pin; the agent retries.",
    ),
    # ---- runner and journal
    _r(
        "E_APPLY",
        RUN,
        "An effect's executor failed while applying; the operation rolls back.",
        "Read the effect's message; fix the node or topology.",
    ),
    _r(
        "E_CAPTURE",
        RUN,
        "Recording an effect's before-image failed; nothing was changed.",
        "Read the message; the device may have changed under us.",
    ),
    _r(
        "E_FENCED",
        RUN,
        "The operation's scope is fenced after an uncertain failure.",
        "Resolve quarantined effects (`dmn journal show`) before retrying.",
    ),
    _r(
        "E_NODE_LOCK_TIMEOUT",
        RUN,
        "The node mutation lock was not free in time: a node-wide pass (recovery, "
        "Synchronize, retention, an eswitch transition) or an operation on the same claim, "
        "sandbox or device held it; nothing was changed.",
        "Retry (kubelet and the runtime do); the message names what held the lock.",
    ),
    _r(
        "E_NOT_FOUND",
        RUN,
        "A journal record or lab object does not exist.",
        "Check the id or name.",
    ),
    _r(
        "E_NO_EXECUTOR",
        RUN,
        "This node has no executor for an opcode the program uses.",
        "Upgrade the node agent or avoid the opcode.",
    ),
    _r(
        "E_OBSERVE",
        RUN,
        "Observing an effect's result failed.",
        "Recovery decides from the journal; check quarantine.",
    ),
    _r(
        "E_OPERATION_CONFLICT",
        RUN,
        "An operation id was reused with a different program.",
        "Report it (a bug).",
    ),
    _r(
        "E_OUTPUT_MISSING",
        RUN,
        "An effect did not produce an output a later effect needs.",
        "Report it with the effect id.",
    ),
    _r(
        "E_POSTCONDITION",
        RUN,
        "An effect applied but its postcondition does not hold; the operation rolls back.",
        "Check what else changes the device.",
    ),
    _r(
        "E_QUARANTINED",
        RUN,
        "An effect's outcome could not be proven and undone; its resource "
        "is quarantined and never touched again automatically.",
        "Inspect with `dmn journal show`, fix the node by hand, then release the claim.",
    ),
    _r(
        "E_RECHECK",
        RUN,
        "Identity, ownership or access re-verification refused the effect right before it ran.",
        "The device changed since allocation; reallocate.",
    ),
    _r(
        "E_RECOVERED",
        RUN,
        "The operation was rolled back by recovery after a restart.",
        "Nothing: kubelet or the runtime retries.",
    ),
    _r(
        "E_UNDO",
        RUN,
        "Undoing a recorded effect failed.",
        "Check quarantine with `dmn journal show`; the agent retries.",
    ),
    # ---- inventory, personas, slices
    _r(
        "E_ATTRIBUTE_LIMIT",
        INV,
        "A device would exceed the ResourceSlice attribute limits.",
        "Reduce custom attributes in the DeviceExposurePolicy.",
    ),
    _r(
        "E_CLEANUP_PENDING",
        INV,
        "A published device still has undo work pending.",
        "Wait for cleanup; check quarantine.",
    ),
    _r(
        "E_IOMMU_GROUP_BUSY",
        INV,
        "A VFIO persona's IOMMU group has a kernel-bound or protected peer (inventory), or, "
        "when binding, a peer the host still drives or a VFIO group node that is open.",
        "Expose the whole group or choose another function; close the group's user.",
    ),
    _r(
        "E_ISOLATION_UNREPRESENTED",
        INV,
        "A shared IOMMU group has no isolation domain to publish.",
        "Fix the exposure policy for that group.",
    ),
    _r(
        "E_POLICY_CONFLICT",
        INV,
        "Two equal-priority DeviceExposurePolicies give one device different personas.",
        "Give the policies different priorities.",
    ),
    _r(
        "E_POLICY_INVALID",
        INV,
        "An exposure cannot apply to this device.",
        "Fix the DeviceExposurePolicy's selector or action.",
    ),
    _r(
        "E_PREREQUISITE_STRIPPED",
        INV,
        "The API server dropped fields the slices need (a feature gate is off).",
        "Enable the DRA features the chart's notes list.",
    ),
    _r(
        "E_RESERVED_ATTRIBUTE",
        INV,
        "A custom attribute uses a reserved name.",
        "Rename the attribute.",
    ),
    _r(
        "E_SLICE_LIMIT",
        INV,
        "The node's devices cannot be published within the ResourceSlice limits.",
        "Expose fewer personas per device.",
    ),
    _r(
        "E_THIRD_DOMAIN",
        INV,
        "More than two compatibility domains: not representable.",
        "Simplify the exposure policies.",
    ),
    _r(
        "E_UNKNOWN_DEVICE",
        INV,
        "A slice lists a device this node did not publish.",
        "Delete stale slices; the agent republishes.",
    ),
    _r(
        "W_PENDING_DRAIN",
        INV,
        "A declaration is kept until the device is drained.",
        "Drain the device's claims.",
    ),
    _r(
        "W_PROTECTED",
        INV,
        "Protected hardware (for example the node's primary NIC) is never exposed.",
        "Nothing.",
    ),
    _r(
        "W_UNKNOWN_STATE",
        INV,
        "Facts about a device are unknown, so it cannot be proven free and is not exposed.",
        "Check the device's sysfs state.",
    ),
    # ---- command line and lab
    _r("E_INVALID", CLI, "The lab API server rejected an object.", "Fix the object."),
    _r(
        "E_LAB_NOT_INSTALLED",
        CLI,
        "`dmn lab` ran where the lab is not installed: the node and controller image (and"
        " any product-only wheel) carries the driver only.",
        "Run the lab from a checkout (`make setup`) or install `dra-multi-network[lab]`.",
    ),
    _r("E_LAB_NOT_RUNNING", CLI, "No lab is running in the state directory.", "Run `dmn lab up`."),
    _r(
        "E_LAB_RUNNING",
        CLI,
        "A lab is already running in the state directory.",
        "Use it, or `dmn lab down` first.",
    ),
    _r("E_LAB_START", CLI, "The lab exited while starting.", "Read the lab log tail printed."),
    _r("E_LAB_STOP", CLI, "The lab did not stop in time.", "Stop its process by its pid."),
    _r(
        "E_MANIFEST",
        CLI,
        "A manifest document is not an object with apiVersion and kind.",
        "Fix the manifest.",
    ),
    _r(
        "E_NETNS",
        CLI,
        "Creating or removing the lab's namespace failed.",
        "Run as root or use --links recorded.",
    ),
    _r(
        "E_UNKNOWN_KIND",
        CLI,
        "An unknown resource kind was asked for.",
        "Use a kind `dmn lab get` lists.",
    ),
    _r(
        "E_CHART",
        CLI,
        "Rendering the Helm chart for the upstream lab failed.",
        "Read Helm's error in the message.",
    ),
    _r(
        "E_HELM",
        CLI,
        "`helm install`, `upgrade` or `uninstall` of the chart in the upstream lab failed.",
        "Read Helm's error in the message; `kubectl -n dra-multi-network get pods` shows why "
        "Pods are not ready.",
    ),
    _r(
        "E_IMAGE_BUILD",
        CLI,
        "The project's image for the upstream lab's helm install could not be built.",
        "Run `python3 image/build.py` for its log, or set DMN_IMAGE_ARCHIVE to an archive.",
    ),
    _r(
        "E_NOT_ROOT",
        CLI,
        "The command needs root: the upstream lab backend (kubelet, containerd), or "
        "entering a lab Pod's network namespace (`dmn lab exec`).",
        "Run it as root (or use the embedded backend instead of upstream).",
    ),
    _r(
        "E_NOT_A_POD",
        CLI,
        "`dmn lab run -f` was given a document that is not a v1 Pod.",
        "Give it Pods only; create other objects with `dmn lab apply -f`.",
    ),
    _r(
        "E_POD_SPEC",
        CLI,
        "A Pod for `dmn lab run` lacks what a node needs to run it (containers with names, "
        "resourceClaims with exactly one claim source), at the position shown.",
        "Fix the field the message points at.",
    ),
    _r(
        "E_POD_TIMEOUT",
        CLI,
        "A Pod `dmn lab run` created did not reach Running in time.",
        "Read its status and Events (`dmn lab get pod NAME -o yaml`); raise --timeout.",
    ),
    _r(
        "E_POD_NOT_RUNNING",
        CLI,
        "`dmn lab exec` was pointed at a Pod that is not running on this lab (not started, "
        "failed, recreated under the same name, or its sandbox is gone).",
        "Check the Pod's phase and message; run it again with `dmn lab run -f`.",
    ),
    _r(
        "E_LAB_LINKS",
        CLI,
        "Lab Pods need the lab's real links.",
        "Start the lab with `dmn lab up --links netns`.",
    ),
    _r(
        "E_PREPARE",
        CLI,
        "The lab's kubelet stand-in could not prepare a Pod's claims.",
        "Read the reason codes in the message (and the claim's Events).",
    ),
    _r(
        "E_POD_START",
        CLI,
        "A lab Pod's sandbox could not be started.",
        "Read the message; the node agent's refusal code is in it.",
    ),
    _r(
        "E_UPSTREAM_NOT_BUILT",
        CLI,
        "The upstream components are not built yet.",
        "Build them first (see lab/upstream).",
    ),
    _r(
        "E_LAB_LINK_EXISTS",
        CLI,
        "A link the lab wants to create exists and is not the lab's.",
        "Remove or rename the link, or choose another lab link name.",
    ),
    _r(
        "E_DRANET_START",
        CLI,
        "The dranet peer (a benchmark and test peer of the upstream lab) exited or did not "
        "publish its own links in time.",
        "Read the tail of dranet's log in the lab's logs directory.",
    ),
    _r(
        "E_DRANET_DIAL_PATH",
        CLI,
        "The dranet peer's kubelet plugin path exists on the host and is not this lab's.",
        "Another dranet may be installed; remove it or run the peer on another machine.",
    ),
    _r(
        "E_DRANET_TEMPLATE",
        CLI,
        "kubectl could not apply a claim template for the dranet peer.",
        "Read kubectl's message in the error.",
    ),
    _r(
        "E_BUSYBOX_MISSING",
        CLI,
        "busybox is not installed for the lab's images.",
        "apt-get install busybox-static.",
    ),
    _r(
        "E_IMAGE_IMPORT",
        CLI,
        "Importing a lab image into containerd failed.",
        "Read the ctr error in the message.",
    ),
    # ---- IP address management: IPPool validation (lint, webhook, controller) and the
    # allocation client's refusals (design §5.7)
    _r(
        "E_IPPOOL_SUBNET",
        IPAM,
        "An IPPool subnet is not a prefix, has host bits set, or repeats a family (a pool holds "
        "one IPv4 and one IPv6 subnet at most).",
        "Write the subnet as its network prefix (10.56.0.0/24); use one subnet per family.",
    ),
    _r(
        "E_IPPOOL_RANGE_OUTSIDE_SUBNET",
        IPAM,
        "An allocatable, reserved or excluded range lies (partly) outside its subnet, is of "
        "the other family, or starts after its end.",
        "Move the range inside the subnet, or fix its start and end.",
    ),
    _r(
        "E_IPPOOL_RANGE_OVERLAP",
        IPAM,
        "A reserved (static-only) range overlaps an allocatable (dynamic) range.",
        "Make the reserved and allocatable ranges disjoint.",
    ),
    _r(
        "E_IPPOOL_RESERVED_EXCLUDED",
        IPAM,
        "A reserved range overlaps an exclusion, so its addresses could never be used.",
        "Remove the overlap from the reserved range or the exclusion.",
    ),
    _r(
        "E_IPPOOL_GATEWAY",
        IPAM,
        "A subnet's gateway is outside the subnet or inside an allocatable or reserved range "
        "(it would be handed to a Pod).",
        "Pick a gateway inside the subnet and outside every range.",
    ),
    _r(
        "E_IPPOOL_ROUTE",
        IPAM,
        "A route's destination is not a prefix of the subnet's family, or its gateway is "
        "outside the subnet.",
        "Write the destination as a network prefix of the same family; use an on-subnet gateway.",
    ),
    _r(
        "E_IPPOOL_TOO_LARGE",
        IPAM,
        "The pool holds more than 65536 addresses (each handed-out address is an object in "
        "etcd); an IPv6 subnet without ranges is the usual cause.",
        "Give explicit, smaller ranges.",
    ),
    _r(
        "E_IPPOOL_OVERLAP",
        IPAM,
        "The pool's subnet overlaps another IPPool's subnet: both would hand out one address.",
        "Make the pools' subnets disjoint (or merge the pools).",
    ),
    _r(
        "E_IPPOOL_IN_USE",
        IPAM,
        "The IPPool is being deleted but addresses are still allocated from it; the deletion "
        "waits (finalizer) until they are released or collected.",
        "Delete the Pods and ResourceClaims holding its addresses (`kubectl get ipallocations "
        "-l dra-multi-network.schseba.github.io/ippool=NAME`).",
    ),
    _r(
        "E_IPPOOL_EXHAUSTED",
        IPAM,
        "No dynamic address of the requested family is free in the pool (also the Warning "
        "Event on the pool when it becomes exhausted).",
        "Widen the allocatable ranges, or release addresses.",
    ),
    _r(
        "E_IPAM_UNKNOWN_POOL",
        IPAM,
        "An address was requested from an IPPool that does not exist.",
        "Create the pool, or fix the pool name in the topology.",
    ),
    _r(
        "E_IPAM_POOL_INVALID",
        IPAM,
        "An address was requested from an IPPool that fails validation (or that the controller "
        "reports Valid=False, e.g. overlapping another pool).",
        "Fix the pool: `dmn lint` or `kubectl describe ippool NAME` shows why.",
    ),
    _r(
        "E_IPAM_POOL_TERMINATING",
        IPAM,
        "An address was requested from an IPPool that is being deleted.",
        "Use another pool, or recreate the pool once its deletion finished.",
    ),
    _r(
        "E_IPAM_FAMILY_MISMATCH",
        IPAM,
        "The pool has no subnet of the requested family, or a static address is of the other "
        "family.",
        "Request the family the pool serves, or add a subnet of that family to the pool.",
    ),
    _r(
        "E_IPAM_STATIC_OUTSIDE_RESERVED",
        IPAM,
        "A static address was requested outside the pool's reserved ranges (static addresses "
        "come only from reserved ranges, so they never collide with dynamic ones).",
        "Request an address from a reserved range, or reserve a range for it.",
    ),
    _r(
        "E_IPAM_ADDRESS_TAKEN",
        IPAM,
        "The requested static address is held by another owner.",
        "Release it from the other claim, or request another address.",
    ),
    _r(
        "E_IPAM_CONTENDED",
        IPAM,
        "Every address tried was won by a concurrent owner within the retry bound.",
        "Retry (the node does); persistent contention means the pool is nearly full.",
    ),
    _r(
        "E_IPAM_NOT_OWNER",
        IPAM,
        "A release named an allocation object that another owner holds now (UID "
        "precondition failed): nothing was deleted.",
        "Nothing to do for the releasing owner; its address is already gone.",
    ),
    _r(
        "E_IPAM_UNAVAILABLE",
        IPAM,
        "The node could not reach the API server (or it failed the request) while "
        "allocating, finding or releasing an address: nothing was decided.",
        "Check the node agent's API server connection; recovery retries the effect.",
    ),
    _r(
        "E_IPAM_NOT_CONFIGURED",
        IPAM,
        "An ip/pool-addresses effect ran without an IPPool allocation client or without a "
        "ResourceClaim the node agent verified (addresses are allocated only for one).",
        "Run it through the node agent (which gives both); a test gives them in its "
        "DeviceEnvironment.",
    ),
    _r(
        "E_UPSTREAM_BUILD",
        CLI,
        "Building the pinned upstream components failed.",
        "Read the build log; check Go module proxy access.",
    ),
    # ---- Multus automatic mode (issue 41): template resolution and rendering, the Pod's
    # networks annotation, shadow NADs and the attachment gate (dmn.api.multus)
    _r(
        "E_MULTUS_TEMPLATE_MISSING",
        MULTUS,
        "Neither the allocated device's multusTemplate attribute nor the class's configuration "
        "names a NetworkAttachmentDefinition template, or the named template does not exist.",
        "Set the template in the DeviceClass configuration or in the device's exposure "
        "attributes, and create the NetworkAttachmentDefinition it names.",
    ),
    _r(
        "E_MULTUS_TEMPLATE_INVALID",
        MULTUS,
        "A template reference or a template's spec.config is malformed: not one JSON object "
        "(null, array or scalar root, bad JSON), larger than 64 KiB or nested deeper than 32 "
        "levels, a repeated critical key (type, name, cniVersion, plugins, master, device, "
        "deviceID, pciBusID, ipam, network_name, ...), both type and plugins at the root, a "
        "missing or mistyped field, an invalid CNI name or reference.",
        "Fix the template or the reference at the reported field; nothing was changed on the "
        "node or in the API.",
    ),
    _r(
        "E_MULTUS_TEMPLATE_UNSUPPORTED",
        MULTUS,
        "A well-formed template the automatic mode cannot bind safely: no inline "
        "configuration, a plugin type other than macvlan, ipvlan, host-device or sriov, zero "
        "or two device-consuming plugins, the device plugin not first, a plugin after it that "
        "is not an allowed metaplugin (tuning), nested Multus, an unsupported cniVersion, "
        "linkInContainer, or Whereabouts node_slice_size.",
        "Use a template with one device plugin first and only tuning after it, a supported "
        "cniVersion, and no Multus configuration inside it.",
    ),
    _r(
        "E_MULTUS_TEMPLATE_CONFLICT",
        MULTUS,
        "The device's multusTemplate attribute and the class's configuration both name a "
        "template, and after namespace resolution they are different templates.",
        "Make the two references agree, or keep only one of them.",
    ),
    _r(
        "E_MULTUS_TEMPLATE_FORBIDDEN",
        MULTUS,
        "The template is in a namespace the Pod may not read templates from.",
        "Put the template in the Pod's namespace or in a namespace the driver's template "
        "access allows.",
    ),
    _r(
        "E_MULTUS_DEVICE_MISMATCH",
        MULTUS,
        "The template does not fit the allocated device: it names another device "
        "(master, device, deviceID, pciBusID, hwaddr or kernelpath differing from the "
        "allocation), or its plugin needs a device kind the allocation lacks (a parent link "
        "for macvlan and ipvlan, a PCI function for sriov).",
        "Remove static device fields from the template (the driver injects the allocated "
        "device), or use a template whose plugin fits the class's devices.",
    ),
    _r(
        "E_MULTUS_SELECTION_INVALID",
        MULTUS,
        "The Pod's k8s.v1.cni.cncf.io/networks annotation is malformed (not a JSON array of "
        "objects with a string name, or invalid comma notation); the driver does not "
        "replace it.",
        "Fix the Pod's networks annotation at the reported entry.",
    ),
    _r(
        "E_MULTUS_MANUAL_SELECTION",
        MULTUS,
        "The Pod selects by hand (networks annotation) a template that one of its claims "
        "binds automatically; two attachments of one network would be ambiguous.",
        "Remove the named entry from the Pod's networks annotation (the claim brings the "
        "network), or use a class without a Multus template to keep selecting it by hand.",
    ),
    _r(
        "E_MULTUS_INTERFACE_CONFLICT",
        MULTUS,
        "Another entry of the Pod's networks annotation uses (explicitly or by its position) "
        "the interface name a managed selection needs.",
        "Give the named entry another interface name.",
    ),
    _r(
        "E_MULTUS_ANNOTATION_SIZE",
        MULTUS,
        "Adding the managed selections would make the Pod's annotations exceed Kubernetes' "
        "total limit of 256 KiB (all keys and values); nothing was written.",
        "Request fewer devices per Pod or shrink the Pod's other annotations.",
    ),
    _r(
        "E_MULTUS_OWNERSHIP",
        MULTUS,
        "The driver's record of the selections it owns is malformed or of an unknown "
        "version, a managed selection was edited, or a selection names a generated shadow "
        "the record does not own; the driver does not guess what to change.",
        "Restore or remove the edited entry; an unknown version needs the driver version "
        "that wrote it.",
    ),
    _r(
        "E_MULTUS_SHADOW_CONFLICT",
        MULTUS,
        "A NetworkAttachmentDefinition with the shadow's generated name exists but is not the "
        "binding's (other owner, provenance or configuration), or it is being deleted; at "
        "CreateContainer: the bound shadow was changed after the node created it (another "
        "configuration, or a generation above 1: edited, even if put back) or is gone, so "
        "Multus may have run another configuration and no container starts.",
        "Inspect the object; the driver never overwrites it. Recreate the workload after "
        "removing a foreign object, and keep write access to NetworkAttachmentDefinitions "
        "from the Pods' namespaces' tenants.",
    ),
    _r(
        "E_MULTUS_NOT_ATTACHED",
        MULTUS,
        "Multus' network-status of the Pod does not show the managed interface of the shadow "
        "network, so the container is held.",
        "Check that Multus runs on the node and reads the Pod live, and the delegate plugin's "
        "and its IPAM's logs.",
    ),
    # ---- Multus automatic mode, the node agent's side: consumer verification and the
    # multus/* effects (design §6.8)
    _r(
        "E_MULTUS_CONSUMER",
        MULTUS,
        "A claim of an automatic-mode class is not reserved for exactly one Pod, or that Pod "
        "is gone, replaced (another UID), terminating, on another node, uses the host "
        "network or does not reference the claim; nothing was changed.",
        "Use one ResourceClaimTemplate-generated claim per Pod (shared claims are not "
        "supported in this mode) and no hostNetwork; a terminating Pod is not prepared.",
    ),
    _r(
        "E_MULTUS_NOT_CONFIGURED",
        MULTUS,
        "A multus/* effect ran without the node agent's verified binding for its device, or "
        "on a node without an API connection for it (an administrator's own plugin cannot "
        "bind a template: only the builtin multus-cni does, after the agent verified the "
        "consumer and rendered the template).",
        "Use the builtin multus-cni plugin in the topology.",
    ),
    _r(
        "E_MULTUS_API",
        MULTUS,
        "The API server refused, failed or did not answer a request of a multus/* effect "
        "(read or write of the shadow NetworkAttachmentDefinition, the Pod or the claim). "
        "A forward change is compensated; an undo is deferred and retried by the next "
        "unprepare or recovery, never quarantined for it.",
        "Check the node agent's API server connection and its RBAC (network-attachment-"
        "definitions get/create/delete/patch, pods get/patch).",
    ),
    _r(
        "E_MULTUS_SHADOW_DELETING",
        MULTUS,
        "The binding's shadow NetworkAttachmentDefinition is being deleted while the "
        "binding is live (someone deleted it); a deletion cannot be cancelled, so the "
        "binding is not made Ready and the shadow keeps its frozen configuration until the "
        "claim is released.",
        "Delete and recreate the Pod.",
    ),
)

#: Codes that carry a number: (regex, entry describing the family).
PATTERNS: tuple[tuple[re.Pattern[str], ReasonCode], ...] = (
    (
        re.compile(r"E_NETLINK_\d+"),
        _r(
            "E_NETLINK_<errno>",
            EXEC,
            "A netlink request failed with this errno (for example "
            "E_NETLINK_95 = EOPNOTSUPP: the kernel lacks the link type; E_NETLINK_17 = EEXIST).",
            "Look the errno up (`errno -l`); check kernel modules and the device.",
        ),
    ),
)

_BY_CODE = {entry.code: entry for entry in REGISTRY}


def lookup(code: str) -> ReasonCode | None:
    """The registry entry for ``code`` (patterns included), or None if unregistered."""
    entry = _BY_CODE.get(code)
    if entry is not None:
        return entry
    for pattern, family in PATTERNS:
        if pattern.fullmatch(code):
            return family
    return None


def render_markdown() -> str:
    """``docs/reason-codes.md``: every code, grouped by area, as tables."""
    lines = [
        "<!-- Generated by `dmn generate` from dmn/reason_codes.py. Do not edit. -->",
        "# Reason codes",
        "",
        "Every refusal and failure carries one of these codes: in `dmn` output, admission",
        "responses, NetworkTopology and attachment status, Kubernetes Events (as the Event",
        "reason), metrics labels and the JSON logs. `E_` codes are errors, `W_` warnings.",
        "",
    ]
    areas: dict[str, list[ReasonCode]] = {}
    for entry in [*REGISTRY, *(family for _, family in PATTERNS)]:
        areas.setdefault(entry.area, []).append(entry)
    for area, entries in areas.items():
        lines += [
            f"## {area[0].upper()}{area[1:]}",
            "",
            "| code | meaning | what to do |",
            "|---|---|---|",
        ]
        for entry in sorted(entries, key=lambda e: e.code):
            lines.append(f"| `{entry.code}` | {entry.meaning} | {entry.action} |")
        lines.append("")
    return "\n".join(lines)
