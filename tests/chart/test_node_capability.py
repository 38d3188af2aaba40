"""The chart's half of node capability (design §9.3) and of the nodes' policy reports
(design §5.2): the two Node policies evaluated with a real CEL implementation as the API
server evaluates them, the RBAC that lets each component write its key, and the values and
arguments that configure the reports.

Keys and values come from :mod:`dmn.api.node_capability` and :mod:`dmn.api.policy_report`,
so the policies are checked against the very annotations and labels the agent and the
controller write."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import pytest

from dmn.api.node_capability import (
    ANNOTATION,
    LABEL_PREFIX,
    CapabilityReport,
    Requirement,
    label_patch,
)
from dmn.api.policy_report import ANNOTATION as POLICY_REPORT
from dmn.api.policy_report import encode_reports
from dmn.cli.command_line import UsageError

from .helm import find, render
from .policy_eval import evaluate_policy

CAPABILITIES = "dra-multi-network-node-capabilities"
WRITERS = "dra-multi-network-node-writers"
POLICIES = (CAPABILITIES, WRITERS)
AGENT = "system:serviceaccount:dmn-system:dra-multi-network-node"
CONTROLLER = "system:serviceaccount:dmn-system:dra-multi-network-controller"
TENANT = "system:serviceaccount:tenant:default"
ADMIN = "kubernetes-admin"
KEY = Requirement(opcodes=(("link.move", "0123abcd"),), builtins=()).key
OTHER_KEY = Requirement(opcodes=(("link.up", "4567cdef"),), builtins=()).key


def _report(node: str, at: float = 1_800_000_000.0) -> str:
    return CapabilityReport(
        node=node,
        boot_id="b",
        agent_version="0.1.0",
        observed_at=at,
        refresh_s=30.0,
        nri_registered=True,
        nri_synchronized=True,
        opcodes={"link.move": "0123abcd"},
        builtins={},
    ).to_annotation()


def _reports(node: str, devices: int = 2) -> str:
    """Node ``node``'s policy reports as its agent writes them (admission does not parse
    them: any string is judged by who writes it)."""
    ready = {
        "type": "Ready",
        "status": "True",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
        "reason": "Published",
        "message": f"{devices} devices published",
    }
    entry = {
        "observedGeneration": 1,
        "exposedDevices": devices,
        "lastReportTime": "2026-01-01T00:00:00Z",
        "conditions": [ready],
    }
    return encode_reports(node, {"p1": entry}).value


#: the agent's two annotations, by test id
KEYS = {"capability": ANNOTATION, "policy-report": POLICY_REPORT}


def _value(key: str, node: str = "a", version: int = 0) -> str:
    """A value of annotation ``key`` for ``node``; another ``version``, another value."""
    if key == ANNOTATION:
        return _report(node, 1_800_000_000.0 + 30 * version)
    return _reports(node, 2 + version)


def _node(
    name: str = "a",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    spec: dict[str, Any] | None = None,
    **meta: Any,
) -> dict[str, Any]:
    """A Node as the API server hands it to admission: absent maps are absent, not empty."""
    metadata: dict[str, Any] = {"name": name, **meta}
    if labels is not None:
        metadata["labels"] = labels
    if annotations is not None:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": metadata,
        "spec": spec if spec is not None else {"podCIDR": "10.244.0.0/24"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


BASE_LABELS = {"kubernetes.io/hostname": "a", "kubernetes.io/os": "linux"}
BASE_ANNOTATIONS = {"node.alpha.kubernetes.io/ttl": "0"}
BARE = _node(labels=dict(BASE_LABELS), annotations=dict(BASE_ANNOTATIONS))
REPORTED = _node(
    labels={**BASE_LABELS, KEY: "true"},
    annotations={**BASE_ANNOTATIONS, ANNOTATION: _report("a")},
)
#: a Node carrying both of its agent's annotations
FULL = _node(
    labels={**BASE_LABELS, KEY: "true"},
    annotations={**BASE_ANNOTATIONS, ANNOTATION: _report("a"), POLICY_REPORT: _reports("a")},
)


def _edit(
    node: dict[str, Any],
    labels: dict[str, str | None] | None = None,
    annotations: dict[str, str | None] | None = None,
    **top: Any,
) -> dict[str, Any]:
    """``node`` after a JSON merge patch of its labels/annotations (None removes a key) and
    of top-level metadata fields or ``spec``."""
    out: dict[str, Any] = json.loads(json.dumps(node))
    for field, change in (("labels", labels), ("annotations", annotations)):
        if change is None:
            continue
        merged = dict(out["metadata"].get(field) or {})
        for k, v in change.items():
            if v is None:
                merged.pop(k, None)
            else:
                merged[k] = v
        out["metadata"].pop(field, None)
        if merged:
            out["metadata"][field] = merged
    for k, v in top.items():
        if k == "spec":
            out["spec"] = v
        else:
            out["metadata"][k] = v
    return out


@cache
def _policies() -> dict[str, dict[str, Any]]:
    docs = render()
    return {name: find(docs, "ValidatingAdmissionPolicy", name)["spec"] for name in POLICIES}


def _verdict(
    name: str, user: str, bound: str | None, obj: dict[str, Any], old: dict[str, Any] | None
) -> tuple[str, list[str]]:
    """('skip' (not matched), 'allow' or 'deny', the failed validations' messages) of one
    policy for a request on the nodes resource; CREATE when there is no old object."""
    return evaluate_policy(_policies()[name], user, bound, obj, old)


def _decision(
    user: str, bound: str | None, obj: dict[str, Any], old: dict[str, Any] | None
) -> tuple[str, list[str]]:
    """What the API server answers with both policies bound: denied if either denies."""
    verdicts = [_verdict(name, user, bound, obj, old) for name in POLICIES]
    messages = [m for _, ms in verdicts for m in ms]
    if messages:
        return "deny", messages
    return ("allow" if any(d == "allow" for d, _ in verdicts) else "skip"), []


# --- the agent's annotations (capability report, policy reports) ------------------------


def _agent_writes(key: str) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """(old, new) of each way the agent writes annotation ``key`` of its Node."""
    held = _edit(FULL, annotations={key: _value(key)})
    return {
        "add": (BARE, _edit(BARE, annotations={key: _value(key)})),  # first report
        "change": (held, _edit(held, annotations={key: _value(key, version=1)})),
        "remove": (held, _edit(held, annotations={key: None})),  # withdrawn
        "add-first-annotation": (_node(), _edit(_node(), annotations={key: _value(key)})),
        "remove-last-annotation": (_edit(_node(), annotations={key: "x"}), _node()),  # the map
    }


AGENT_WRITES = [
    pytest.param(key, old, new, id=f"{kid}-{change}")
    for kid, key in KEYS.items()
    for change, (old, new) in _agent_writes(key).items()
]


@pytest.mark.adversarial
@pytest.mark.parametrize(("key", "old", "new"), AGENT_WRITES)
def test_the_agent_of_a_node_writes_that_nodes_annotation(
    key: str, old: dict[str, Any], new: dict[str, Any]
) -> None:
    assert _decision(AGENT, "a", new, old) == ("allow", [])
    # the same write from the agent of another node, or with a token bound to no node
    for bound in ("b", None):
        decision, messages = _decision(AGENT, bound, new, old)
        assert decision == "deny" and len(messages) == 1, (bound, messages)
        assert key in messages[0] and "node agent running on this Node" in messages[0]


def _other_writes(key: str) -> dict[str, tuple[dict[str, Any] | None, dict[str, Any]]]:
    """(old, new) of writes of annotation ``key`` nobody but the node's agent may make."""
    return {
        "add": (BARE, _edit(BARE, annotations={key: _value(key)})),
        "change": (FULL, _edit(FULL, annotations={key: _value(key, version=9)})),
        "remove": (FULL, _edit(FULL, annotations={key: None})),
        "empty": (FULL, _edit(FULL, annotations={key: ""})),
        "other-nodes": (FULL, _edit(FULL, annotations={key: _value(key, node="b")})),
        "create": (None, _edit(BARE, annotations={key: _value(key)})),  # created with it
    }


OTHER_WRITES = [
    pytest.param(key, old, new, id=f"{kid}-{change}")
    for kid, key in KEYS.items()
    for change, (old, new) in _other_writes(key).items()
]


@pytest.mark.adversarial
@pytest.mark.parametrize("user", [TENANT, CONTROLLER, ADMIN, "system:node:a"])
@pytest.mark.parametrize(("key", "old", "new"), OTHER_WRITES)
def test_nobody_else_writes_the_annotation(
    user: str, key: str, old: dict[str, Any] | None, new: dict[str, Any]
) -> None:
    """Not a tenant, not the controller, not a cluster admin, not the node's kubelet (even
    with a credential that names the node)."""
    decision, messages = _verdict(CAPABILITIES, user, "a", new, old)
    assert decision == "deny" and len(messages) == 1 and key in messages[0], messages


BOTH_WRITES = {
    "add": (BARE, _edit(BARE, annotations={k: _value(k) for k in KEYS.values()})),
    "change": (FULL, _edit(FULL, annotations={k: _value(k, version=1) for k in KEYS.values()})),
    "remove": (FULL, _edit(FULL, annotations=dict.fromkeys(KEYS.values()))),
    "swap": (FULL, _edit(FULL, annotations={ANNOTATION: _report("a", 1.9e9),
                                            POLICY_REPORT: None})),
}  # fmt: skip


@pytest.mark.adversarial
@pytest.mark.parametrize("change", BOTH_WRITES)
def test_the_agent_writes_both_annotations_in_one_request(change: str) -> None:
    old, new = BOTH_WRITES[change]
    assert _decision(AGENT, "a", new, old) == ("allow", [])
    for user, bound in ((AGENT, "b"), (AGENT, None), (CONTROLLER, None), (ADMIN, None)):
        decision, messages = _decision(user, bound, new, old)
        assert decision == "deny", (user, bound, messages)
        mine = [m for m in messages if "running on this Node" in m]
        assert len(mine) == 1 and ANNOTATION in mine[0] and POLICY_REPORT in mine[0], messages


@pytest.mark.parametrize("key", KEYS.values(), ids=KEYS.keys())
def test_the_agent_may_not_create_its_node_with_a_report(key: str) -> None:
    """A server-side apply patch of a missing Node creates it: the key policy alone would
    let the agent's report in, the writers policy refuses any Node the agent creates."""
    new = _edit(BARE, annotations={key: _value(key)})
    assert _verdict(CAPABILITIES, AGENT, "a", new, None) == ("allow", [])
    decision, messages = _decision(AGENT, "a", new, None)
    assert decision == "deny" and messages == [f"{AGENT} may not create Nodes"]


# --- the capability labels ----------------------------------------------------------------


def _patched(node: dict[str, Any], keys: set[str]) -> dict[str, Any]:
    """``node`` after the controller's own patch (:func:`label_patch`) to exactly ``keys``."""
    patch = label_patch(node, keys)
    assert patch is not None
    return _edit(node, labels=patch["metadata"]["labels"])


ONLY_KEY = _node(labels={KEY: "true"})
LABEL_CHANGES = {
    "add": (BARE, _patched(BARE, {KEY})),
    "add-second": (REPORTED, _patched(REPORTED, {KEY, OTHER_KEY})),
    "replace": (REPORTED, _patched(REPORTED, {OTHER_KEY})),
    "remove": (REPORTED, _patched(REPORTED, set())),
    "remove-last-label": (ONLY_KEY, _patched(ONLY_KEY, set())),
    "add-first-label": (_node(), _patched(_node(), {KEY})),
    "value": (REPORTED, _edit(REPORTED, labels={KEY: "false"})),
}  # fmt: skip


@pytest.mark.adversarial
@pytest.mark.parametrize("change", LABEL_CHANGES)
def test_only_the_controller_writes_capability_labels(change: str) -> None:
    old, new = LABEL_CHANGES[change]
    assert _decision(CONTROLLER, None, new, old) == ("allow", [])
    for user, bound in ((AGENT, "a"), (TENANT, None), (ADMIN, None), ("system:node:a", None)):
        decision, messages = _decision(user, bound, new, old)
        assert decision == "deny", (user, messages)
        assert any(m.startswith("only the dra-multi-network controller") for m in messages)
        assert all(LABEL_PREFIX + "/*" in m for m in messages if "controller" in m)


@pytest.mark.adversarial
@pytest.mark.parametrize("user", ["system:node:a", TENANT, AGENT])
def test_a_node_is_not_created_with_a_capability_label(user: str) -> None:
    """kubelet self-registration with ``--node-labels`` naming one of our keys (or anyone
    else creating a Node with one) is refused; without one the policy does not look."""
    labelled = _edit(BARE, labels={KEY: "true"})
    decision, messages = _decision(user, "a", labelled, None)
    assert decision == "deny"
    assert any("only the dra-multi-network controller may write the labels" in m for m in messages)
    assert _verdict(CAPABILITIES, user, "a", BARE, None) == ("skip", [])


# --- what the policies leave alone --------------------------------------------------------


UNRELATED = {
    "other-label": (REPORTED, _edit(REPORTED, labels={"team": "net"})),
    "other-annotation": (REPORTED, _edit(REPORTED, annotations={"x/y": "z"})),
    "look-alike-label": (BARE, _edit(BARE, labels={LABEL_PREFIX + ".evil/x": "true"})),
    "prefix-without-slash": (BARE, _edit(BARE, labels={LABEL_PREFIX: "true"})),
    "look-alike-annotation": (BARE, _edit(BARE, annotations={ANNOTATION + "-x": "1"})),
    "look-alike-report": (BARE, _edit(BARE, annotations={POLICY_REPORT + "-x": "1"})),
    "report-key-as-label": (BARE, _edit(BARE, labels={POLICY_REPORT: "1"})),
    "unchanged-keys": (REPORTED, _edit(REPORTED, spec={"unschedulable": True})),
    "unchanged-reports": (FULL, _edit(FULL, spec={"unschedulable": True}, labels={"t": "n"})),
    "no-maps": (_node(), _node(spec={"unschedulable": True})),
    "create-plain": (None, BARE),
    "create-bare": (None, _node()),
}


@pytest.mark.parametrize("change", UNRELATED)
@pytest.mark.parametrize("user", [TENANT, "system:node:a", ADMIN])
def test_other_changes_of_a_node_are_not_evaluated(user: str, change: str) -> None:
    old, new = UNRELATED[change]
    assert _decision(user, None, new, old) == ("skip", [])


def test_the_policies_match_only_the_nodes_resource() -> None:
    """kubelet's heartbeats and every status write go to ``nodes/status``: never matched, so
    no Node status update waits for, or is refused by, these policies. Deletion is not
    matched either (a deleted Node takes its keys with it)."""
    docs = render()
    for name in POLICIES:
        spec = find(docs, "ValidatingAdmissionPolicy", name)["spec"]
        assert spec["failurePolicy"] == "Fail"
        (rule,) = spec["matchConstraints"]["resourceRules"]
        assert rule["apiGroups"] == [""] and rule["resources"] == ["nodes"]
        assert rule["operations"] == ["CREATE", "UPDATE"]
        binding = find(docs, "ValidatingAdmissionPolicyBinding", name)["spec"]
        assert binding == {"policyName": name, "validationActions": ["Deny"]}


# --- what the driver's own accounts may change on a Node ----------------------------------


@pytest.mark.adversarial
@pytest.mark.parametrize(
    ("user", "new", "expected"),
    [
        (AGENT, _edit(REPORTED, annotations={ANNOTATION: _report("a", 1.9e9)}), None),
        (AGENT, REPORTED, None),  # a no-op patch
        (AGENT, _edit(REPORTED, annotations={"x/y": "z"}), "nothing of a Node but its annotation"),
        (AGENT, _edit(REPORTED, annotations={"node.alpha.kubernetes.io/ttl": None}),
         "nothing of a Node but its annotation"),
        (AGENT, _edit(REPORTED, labels={"team": "net"}), "nothing of a Node but its annotation"),
        (AGENT, _edit(REPORTED, spec={"unschedulable": True}), "nothing of a Node but"),
        (AGENT, _edit(REPORTED, finalizers=["x/y"]), "nothing of a Node but"),
        (AGENT, _edit(REPORTED, ownerReferences=[{"name": "o"}]), "nothing of a Node but"),
        # its policy reports: added, changed together with the capability report, removed
        (AGENT, FULL, None),
        (AGENT, _edit(REPORTED, annotations={ANNOTATION: _report("a", 1.9e9),
                                             POLICY_REPORT: _reports("a")}), None),
        (AGENT, _edit(REPORTED, annotations={ANNOTATION: None}), None),
        (AGENT, _edit(REPORTED, annotations={POLICY_REPORT: _reports("a"), "x/y": "z"}),
         "nothing of a Node but its annotations"),
        (AGENT, _edit(REPORTED, annotations={POLICY_REPORT: _reports("a")}, labels={"t": "n"}),
         "nothing of a Node but its annotations"),
        (CONTROLLER, _patched(REPORTED, {OTHER_KEY}), None),
        (CONTROLLER, REPORTED, None),
        (CONTROLLER, _edit(REPORTED, labels={"team": "net"}), "nothing of a Node but its labels"),
        (CONTROLLER, _edit(REPORTED, labels={"kubernetes.io/os": None}),
         "nothing of a Node but its labels"),
        (CONTROLLER, _edit(REPORTED, annotations={"x/y": "z"}), "nothing of a Node but"),
        (CONTROLLER, _edit(REPORTED, annotations={POLICY_REPORT: _reports("a")}),
         "nothing of a Node but its labels"),
        (CONTROLLER, _edit(REPORTED, annotations={ANNOTATION: None}),
         "nothing of a Node but its labels"),
        (CONTROLLER, _edit(REPORTED, spec={"taints": []}), "nothing of a Node but its labels"),
        (CONTROLLER, _edit(REPORTED, finalizers=["x/y"]), "nothing of a Node but its labels"),
    ],
)  # fmt: skip
def test_the_drivers_accounts_change_nothing_else_of_a_node(
    user: str, new: dict[str, Any], expected: str | None
) -> None:
    """``patch`` on nodes cannot be narrowed by RBAC; the writers policy narrows it."""
    decision, messages = _verdict(WRITERS, user, "a", new, REPORTED)
    if expected is None:
        assert (decision, messages) == ("allow", [])
    else:
        assert decision == "deny" and len(messages) == 1 and expected in messages[0], messages


@pytest.mark.adversarial
@pytest.mark.parametrize(
    ("new", "expected"),
    [
        (_edit(FULL, annotations={POLICY_REPORT: _reports("a", 7)}), None),
        (_edit(FULL, annotations={POLICY_REPORT: None}), None),
        (_edit(FULL, annotations={POLICY_REPORT: None, ANNOTATION: None}), None),
        (_edit(FULL, annotations={POLICY_REPORT: _reports("a", 7), "x/y": "z"}), "but its"),
        (_edit(FULL, annotations={"node.alpha.kubernetes.io/ttl": "1"}), "but its"),
        (_edit(FULL, annotations={POLICY_REPORT + "-x": "1"}), "but its"),
    ],
    ids=["change", "remove", "remove-both", "and-another", "another", "look-alike"],
)
def test_the_agent_changes_its_policy_reports_and_no_other_annotation(
    new: dict[str, Any], expected: str | None
) -> None:
    decision, messages = _verdict(WRITERS, AGENT, "a", new, FULL)
    if expected is None:
        assert (decision, messages) == ("allow", [])
    else:
        but = f"nothing of a Node but its annotations {ANNOTATION} and {POLICY_REPORT}"
        assert decision == "deny" and messages == [
            f"the dra-multi-network node agent may change {but}"
        ], messages


def test_the_writers_policy_looks_only_at_the_drivers_accounts() -> None:
    changed = _edit(REPORTED, spec={"unschedulable": True}, labels={"team": "net"})
    for user in (TENANT, ADMIN, "system:node:a"):
        assert _verdict(WRITERS, user, "a", changed, REPORTED) == ("skip", [])
    decision, messages = _verdict(WRITERS, CONTROLLER, None, BARE, None)
    assert decision == "deny" and messages == [f"{CONTROLLER} may not create Nodes"]


def test_the_policies_follow_the_release_namespace() -> None:
    docs = render(namespace="other-ns")
    text = json.dumps([find(docs, "ValidatingAdmissionPolicy", name) for name in POLICIES])
    assert "system:serviceaccount:other-ns:dra-multi-network-node" in text
    assert "system:serviceaccount:other-ns:dra-multi-network-controller" in text
    assert "dmn-system" not in text


# --- RBAC ---------------------------------------------------------------------------------


def _grants(rules: list[dict[str, Any]], group: str, resource: str) -> set[str]:
    return {
        verb
        for rule in rules
        if group in rule["apiGroups"] and resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_rbac_lets_each_component_write_its_key_and_read_the_agents() -> None:
    docs = render()
    agent = find(docs, "ClusterRole", "dra-multi-network-node")["rules"]
    assert _grants(agent, "", "nodes") == {"get", "patch"}
    controller = find(docs, "ClusterRole", "dra-multi-network-controller")["rules"]
    assert _grants(controller, "", "nodes") == {"get", "list", "watch", "patch"}
    # the agents' Pods are read in the release namespace only, and only listed and watched
    assert _grants(controller, "", "pods") == set()
    role = find(docs, "Role", "dra-multi-network-controller-agents")
    assert role["metadata"]["namespace"] == "dmn-system"
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}]
    binding = find(docs, "RoleBinding", "dra-multi-network-controller-agents")
    assert binding["roleRef"]["name"] == "dra-multi-network-controller-agents"
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": "dra-multi-network-controller",
            "namespace": "dmn-system",
        }
    ]


# --- values and arguments -----------------------------------------------------------------


def _commands(values: tuple[str, ...] = ()) -> tuple[list[str], list[str]]:
    docs = render(values)
    agent = find(docs, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]["command"]
    controller = find(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]["command"]
    return agent, controller


@pytest.mark.parametrize(
    ("values", "refresh", "grace"), [((), "30", "60"), (("all-options.yaml",), "10", "120")]
)
def test_capability_values_reach_the_arguments(
    values: tuple[str, ...], refresh: str, grace: str
) -> None:
    agent, controller = _commands(values)
    assert f"--capability-refresh={refresh}" in agent
    assert f"--capability-grace={grace}" in controller
    assert "--agent-namespace=dmn-system" in controller


def test_the_agent_selector_selects_exactly_the_agent_daemonsets_pods() -> None:
    """Every label the selector names is on the DaemonSet's Pods, the DaemonSet's own
    selector is part of it (no Pod of the DaemonSet escapes it, nor does a Pod it would not
    adopt match), and the controller's Pods do not match it."""
    docs = render()
    _, controller = _commands()
    (arg,) = [a for a in controller if a.startswith("--agent-selector=")]
    selector = dict(term.split("=", 1) for term in arg.removeprefix("--agent-selector=").split(","))
    ds = find(docs, "DaemonSet", "dra-multi-network-node")["spec"]
    assert selector.items() <= ds["template"]["metadata"]["labels"].items()
    assert ds["selector"]["matchLabels"].items() <= selector.items()
    for kind in ("Deployment",):
        labels = find(docs, kind)["spec"]["template"]["metadata"]["labels"]
        assert not selector.items() <= labels.items()


def test_the_rendered_commands_parse_with_the_components_own_parsers() -> None:
    """Every argument the chart passes is one the CLI knows: a flag the chart renders but
    the program lacks would crash the Pod at start-up (exit 2, CrashLoopBackOff)."""
    from dmn.cli import controller as controller_cli
    from dmn.cli import node as node_cli

    refused = []
    for values in ((), ("all-options.yaml",)):
        agent, controller = _commands(values)
        for cli, command in ((node_cli, agent), (controller_cli, controller)):
            try:
                cli._parser().parse_args(command[1:])
            except UsageError as exc:
                refused.append(f"{command[0]}: {str(exc).split(' (usage')[0]}")
    assert refused == []
