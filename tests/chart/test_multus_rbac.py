"""The node agent's permissions for Multus automatic mode (design §6.8), rendered by the real
Helm: exactly get/create/delete/patch on NetworkAttachmentDefinitions (no list, no watch, no
update), nothing new on Pods; and the two ValidatingAdmissionPolicies that scope them to the
agent's own node — only shadows carrying its node name, only Pods bound to it — evaluated
with a real CEL implementation (``policy_eval``)."""

from __future__ import annotations

from typing import Any

import pytest

from dmn.agent.coordinator.multus_plan import NODE_NAME_ANNOTATION

from .helm import find, render
from .policy_eval import evaluate_policy

NODE_USER = "system:serviceaccount:dmn-system:dra-multi-network-node"
SHADOWS = "dra-multi-network-node-shadows"
PODS = "dra-multi-network-node-pods"


def _decision(policy: str, user: str, bound: str | None, obj: Any, old: Any) -> str:
    spec = find(render(), "ValidatingAdmissionPolicy", policy)["spec"]
    return evaluate_policy(spec, user, bound, obj, old)[0]


def test_the_agent_may_only_get_create_delete_and_patch_nads() -> None:
    rules = find(render(), "ClusterRole", "dra-multi-network-node")["rules"]
    nads = {
        verb for rule in rules if "k8s.cni.cncf.io" in rule["apiGroups"] for verb in rule["verbs"]
    }
    assert nads == {"get", "create", "delete", "patch"}
    pods = {
        verb
        for rule in rules
        if "" in rule["apiGroups"] and "pods" in rule["resources"]
        for verb in rule["verbs"]
    }
    assert pods == {"get", "list", "watch", "patch"}  # unchanged: no update, delete or create
    for name in (SHADOWS, PODS):
        binding = find(render(), "ValidatingAdmissionPolicyBinding", name)["spec"]
        assert binding == {"policyName": name, "validationActions": ["Deny"]}


def _nad(node: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "dmn-multus-0", "namespace": "ns"}
    if node is not None:
        meta["annotations"] = {NODE_NAME_ANNOTATION: node}
    return {
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": meta,
        "spec": {"config": "{}"},
    }


@pytest.mark.adversarial
@pytest.mark.parametrize(
    ("bound", "obj", "old", "decision"),
    [
        ("n1", _nad("n1"), None, "allow"),  # create its own shadow
        ("n1", _nad("n1"), _nad("n1"), "allow"),  # remove its finalizer
        ("n1", None, _nad("n1"), "allow"),  # delete its own shadow
        ("n1", _nad("n2"), None, "deny"),  # a shadow in another node's name
        ("n1", None, _nad("n2"), "deny"),  # delete another node's shadow
        ("n1", _nad("n1"), _nad("n2"), "deny"),  # take one over
        ("n1", None, _nad(None), "deny"),  # an administrator's template
        ("n1", _nad(None), _nad(None), "deny"),  # edit a template
        (None, _nad("n1"), None, "deny"),  # a credential not bound to a node
    ],
)
def test_the_agent_writes_only_its_own_nodes_shadows(
    bound: str | None, obj: Any, old: Any, decision: str
) -> None:
    assert _decision(SHADOWS, NODE_USER, bound, obj, old) == decision
    assert _decision(SHADOWS, "system:serviceaccount:kube-system:multus", None, obj, old) == "skip"


def _pod(node: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "i"}]}
    if node is not None:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": spec,
    }


@pytest.mark.adversarial
@pytest.mark.parametrize(
    ("bound", "obj", "old", "decision"),
    [
        ("n1", _pod("n1"), _pod("n1"), "allow"),
        ("n1", _pod("n2"), _pod("n2"), "deny"),
        ("n1", _pod(None), _pod(None), "deny"),  # not yet scheduled
        (None, _pod("n1"), _pod("n1"), "deny"),
    ],
)
def test_the_agent_patches_only_pods_bound_to_its_node(
    bound: str | None, obj: Any, old: Any, decision: str
) -> None:
    assert _decision(PODS, NODE_USER, bound, obj, old) == decision
    assert _decision(PODS, "system:serviceaccount:x:controller", None, obj, old) == "skip"
