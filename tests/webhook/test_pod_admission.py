"""Pod admission's pure core (dmn/controller/webhook/pods.py) and its review functions:
which Pods are ours, the JSONPatch that names our NRI plugin (and requires the capability
labels of their revisions: more in test_pod_affinity.py), the denials; no I/O."""

from __future__ import annotations

import base64
import copy
import dataclasses
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dmn import NRI_PLUGIN_NAME
from dmn.api.identity import (
    DRIVER,
    LABEL_MANAGED_BY,
    LABEL_REVISION,
    LABEL_STABLE_CLASS,
    LABEL_TOPOLOGY,
    MANAGED_BY,
)
from dmn.api.node_capability import revision_requirement
from dmn.controller.webhook import pods
from dmn.controller.webhook.pod_affinity import REQUIRED
from dmn.controller.webhook.pods import CLAIM, POD_KEY, TEMPLATE, World
from dmn.controller.webhook.review import ReviewContext, mutate_pod, review
from dmn.lab.apiserver.patches import json_patch
from dmn.opcodes.registry import default_registry

PLUGIN = NRI_PLUGIN_NAME


def _digest(revision: str) -> str:
    return "sha256:" + revision.encode().hex().ljust(64, "0")[:64]


def _revision(name: str, opcodes: dict[str, str] | None) -> dict[str, Any]:
    """A NetworkTopologyRevision as admission reads it (only what the decision looks at)."""
    spec: dict[str, Any] = {"digest": _digest(name), "plugins": []}
    if opcodes is not None:
        spec["opcodeContracts"] = opcodes
    return {"metadata": {"name": name, "uid": f"uid-{name}"}, "spec": spec}


def _root_config(revision: str) -> dict[str, Any]:
    ref = {"name": revision, "uid": f"uid-{revision}", "digest": _digest(revision)}
    params = {"kind": "TopologyRootConfiguration", "revisionRef": ref, "rootStep": "root"}
    return {"opaque": {"driver": DRIVER, "parameters": params}}


def _class(
    name: str,
    *,
    ours: bool = True,
    topology: str = "net",
    revision: str = "net-r1",
    extended: str | None = None,
    stable: bool = False,
) -> dict[str, Any]:
    labels = {LABEL_TOPOLOGY: topology, LABEL_REVISION: revision}
    if ours:
        labels[LABEL_MANAGED_BY] = MANAGED_BY
    if stable:
        labels[LABEL_STABLE_CLASS] = "true"
    spec: dict[str, Any] = {"selectors": []}
    if ours:
        spec["config"] = [_root_config(revision)]
    if extended:
        spec["extendedResourceName"] = extended
    return {"metadata": {"name": name, "labels": labels}, "spec": spec}


def _claim_spec(*classes: str, first_available: bool = False) -> dict[str, Any]:
    if first_available:
        request = {
            "name": "r",
            "firstAvailable": [
                {"name": f"s{i}", "deviceClassName": c} for i, c in enumerate(classes)
            ],
        }
        return {"devices": {"requests": [request]}}
    return {
        "devices": {
            "requests": [
                {"name": f"r{i}", "exactly": {"deviceClassName": c}} for i, c in enumerate(classes)
            ]
        }
    }


def _claim(*classes: str, **kw: Any) -> dict[str, Any]:
    return {"kind": "ResourceClaim", "spec": _claim_spec(*classes, **kw)}


def _template(*classes: str, **kw: Any) -> dict[str, Any]:
    return {"kind": "ResourceClaimTemplate", "spec": {"spec": _claim_spec(*classes, **kw)}}


def _pod(
    claims: list[dict[str, str]] | None = None,
    annotations: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "app", "image": "x"}
    if limits:
        container["resources"] = {"limits": limits}
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "t"},
        "spec": {"containers": [container]},
    }
    if claims:
        pod["spec"]["resourceClaims"] = claims
    if annotations is not None:
        pod["metadata"]["annotations"] = annotations
    return pod


REVISIONS = {"net-r1": _revision("net-r1", {"linux/link-move/v1": "0123456789abcdef"})}
KEY = revision_requirement(REVISIONS["net-r1"]).key  # type: ignore[union-attr]
AFFINITY_OP = {
    "op": "add",
    "path": "/spec/affinity",
    "value": {
        "nodeAffinity": {
            REQUIRED: {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": KEY, "operator": "Exists"}]}]
            }
        }
    },
}
OURS = _class("net-root-abc")
STABLE = _class("net-root", stable=True, extended="example.com/net")
OTHER = _class("gpu", ours=False)
WORLD = World(
    objects={
        (TEMPLATE, "t-ours"): _template("net-root-abc"),
        (TEMPLATE, "t-other"): _template("gpu"),
        (CLAIM, "c-ours"): _claim("gpu", "net-root-abc"),
        (CLAIM, "c-first"): _claim("gpu", "net-root", first_available=True),
        (CLAIM, "c-old"): _claim(),
    },
    classes=[OURS, STABLE, OTHER],
    revisions=REVISIONS,
    nodes={
        "capable": {"metadata": {"name": "capable", "labels": {KEY: "true"}}},
        "plain": {"metadata": {"name": "plain", "labels": {"zone": "a"}}},
    },
)


def _applied(pod: dict[str, Any], decision: pods.Decision) -> dict[str, Any]:
    return json_patch(pod, decision.patch) if decision.patch else copy.deepcopy(pod)


def _listed(pod: dict[str, Any], key: str = POD_KEY) -> list[str]:
    names = pods.parse_plugins(pod["metadata"]["annotations"][key])
    assert names is not None
    return names


@pytest.mark.parametrize(
    "claims,limits",
    [
        ([{"name": "n", "resourceClaimTemplateName": "t-ours"}], None),
        ([{"name": "n", "resourceClaimName": "c-ours"}], None),
        ([{"name": "n", "resourceClaimName": "c-first"}], None),  # a firstAvailable subrequest
        (None, {"example.com/net": "1"}),  # the stable class's extended resource
        (None, {"deviceclass.resource.kubernetes.io/net-root-abc": "1"}),  # the implicit one
    ],
    ids=["template", "claim-exactly", "claim-first-available", "extended", "implicit-extended"],
)
def test_a_pod_of_ours_gets_our_plugin_in_the_pod_annotation(
    claims: list[dict[str, str]] | None, limits: dict[str, str] | None
) -> None:
    pod = _pod(claims, limits=limits)
    decision = pods.mutate(pod, WORLD)
    assert decision.ours and not decision.warnings
    assert decision.patch == [
        {"op": "add", "path": "/metadata/annotations", "value": {POD_KEY: f'["{PLUGIN}"]'}},
        AFFINITY_OP,
    ]
    mutated = _applied(pod, decision)
    assert _listed(mutated) == [PLUGIN]
    assert pods.validate(mutated, None, WORLD).denials == []
    assert pods.mutate(mutated, WORLD).patch == []  # reinvocation changes nothing


def test_other_names_are_kept_and_container_keys_get_ours_too() -> None:
    container_key = f"{pods.CONTAINER_PREFIX}app"
    pod = _pod(
        [{"name": "n", "resourceClaimTemplateName": "t-ours"}],
        annotations={POD_KEY: "[ other ]", container_key: '["x"]', "unrelated": "1"},
    )
    decision = pods.mutate(pod, WORLD)
    assert {op["path"] for op in decision.patch} == {
        "/metadata/annotations/required-plugins.noderesource.dev~1pod",
        "/metadata/annotations/required-plugins.noderesource.dev~1container.app",
        "/spec/affinity",
    }
    mutated = _applied(pod, decision)
    assert _listed(mutated) == ["other", PLUGIN]
    assert _listed(mutated, container_key) == ["x", PLUGIN]
    assert mutated["metadata"]["annotations"]["unrelated"] == "1"
    assert pods.validate(mutated, None, WORLD).denials == []


@pytest.mark.parametrize(
    "pod",
    [
        _pod(),
        _pod([{"name": "n", "resourceClaimTemplateName": "t-other"}]),
        _pod(limits={"nvidia.com/gpu": "1", "cpu": "1"}),
        _pod(limits={"deviceclass.resource.kubernetes.io/gpu": "1"}),
    ],
    ids=["no-claims", "other-driver", "other-extended", "other-implicit"],
)
def test_pods_not_ours_are_unchanged_and_allowed(pod: dict[str, Any]) -> None:
    decision = pods.mutate(pod, WORLD)
    assert (decision.ours, decision.patch, decision.warnings) == (False, [], [])
    assert pods.validate(pod, None, WORLD).denials == []


def test_a_missing_claim_or_template_is_a_warning_not_a_change() -> None:
    pod = _pod(
        [
            {"name": "a", "resourceClaimName": "later"},
            {"name": "b", "resourceClaimTemplateName": "later-t"},
        ]
    )
    decision = pods.mutate(pod, WORLD)
    assert decision.patch == [] and decision.denials == []
    assert len(decision.warnings) == 2
    assert (
        "ResourceClaim 'later' (spec.resourceClaims[0].resourceClaimName)" in decision.warnings[0]
    )
    assert "ResourceClaimTemplate 'later-t'" in decision.warnings[1]
    assert "node agent still refuses" in decision.warnings[0]


def test_a_pod_of_ours_without_our_plugin_is_denied() -> None:
    pod = _pod([{"name": "n", "resourceClaimName": "c-ours"}], annotations={POD_KEY: '["other"]'})
    denials = pods.validate(pod, None, WORLD).denials
    assert [(d.code.value, d.path) for d in denials] == [
        ("E_POD_NRI_REQUIREMENT", f"metadata.annotations[{POD_KEY}]"),
        ("E_POD_NODE_CAPABILITY", f"spec.affinity.nodeAffinity.{REQUIRED}.nodeSelectorTerms"),
    ]
    assert "spec.resourceClaims[0].resourceClaimName" in denials[0].message


def test_a_container_key_without_our_plugin_is_denied_and_a_malformed_value_kept() -> None:
    """NRI takes a container's own key before the Pod's: it must name our plugin too. A
    value that is not a list is not rewritten (the user's intent is unknown) but refused."""
    key = f"{pods.CONTAINER_PREFIX}app"
    pod = _pod(
        [{"name": "n", "resourceClaimName": "c-ours"}],
        annotations={POD_KEY: f'["{PLUGIN}"]', key: "not: [a list"},
    )
    decision = pods.mutate(pod, WORLD)
    assert decision.patch == [AFFINITY_OP] and "not a list of plugin names" in decision.warnings[0]
    assert [d.path for d in pods.validate(_applied(pod, decision), None, WORLD).denials] == [
        f"metadata.annotations[{key}]"
    ]


def test_classes_of_two_revisions_of_one_topology_are_denied() -> None:
    world = World(
        objects={
            (CLAIM, "new"): _claim("net-root-new"),
            (CLAIM, "old"): _claim("net-root-old"),
            (CLAIM, "else"): _claim("else-root"),
        },
        classes=[
            _class("net-root-new", revision="net-r2"),
            _class("net-root-old", revision="net-r1"),
            _class("else-root", topology="else", revision="else-r9"),
        ],
    )
    pod = _pod(
        [
            {"name": "a", "resourceClaimName": "new"},
            {"name": "b", "resourceClaimName": "else"},
            {"name": "c", "resourceClaimName": "old"},
        ],
        annotations={POD_KEY: f'["{PLUGIN}"]'},
    )
    denials = pods.validate(pod, None, world).denials
    assert [(d.code.value, d.path) for d in denials] == [
        ("E_POD_REVISION_MIXED", "spec.resourceClaims[2].resourceClaimName")
    ]
    assert "'net-r1'" in denials[0].message and "'net-r2'" in denials[0].message


def test_an_update_may_not_remove_our_plugin() -> None:
    old = _pod(annotations={POD_KEY: f'["a","{PLUGIN}"]'})
    new = _pod(annotations={POD_KEY: '["a"]'})
    denials = pods.validate(new, old, WORLD, operation="UPDATE").denials
    assert [d.code.value for d in denials] == ["E_POD_NRI_REQUIREMENT_REMOVED"]
    assert pods.validate(old, old, WORLD, operation="UPDATE").denials == []
    gone = _pod(annotations={})
    assert pods.validate(gone, old, WORLD, operation="UPDATE").denials


def _request(pod: Any, operation: str = "CREATE", old: Any = None) -> dict[str, Any]:
    return {
        "uid": "u1",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "operation": operation,
        "namespace": "t",
        "object": pod,
        "oldObject": old,
        "userInfo": {"username": "alice"},
    }


def _context(world: World | Exception) -> ReviewContext:
    def read(namespace: str, pod: Any) -> World:
        assert namespace == "t"
        if isinstance(world, Exception):
            raise world
        return world

    return ReviewContext(registry=default_registry(), plugins=dict, pod_world=read)


def test_mutate_pod_answers_a_base64_json_patch() -> None:
    pod = _pod([{"name": "n", "resourceClaimTemplateName": "t-ours"}])
    response = mutate_pod(_request(pod), _context(WORLD))
    assert response["allowed"] and response["uid"] == "u1"
    assert response["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(response["patch"]))
    assert _listed(json_patch(pod, patch)) == [PLUGIN]
    unchanged = mutate_pod(_request(_pod()), _context(WORLD))
    assert unchanged == {"uid": "u1", "allowed": True}


def test_a_pod_is_admitted_with_a_warning_when_the_cluster_cannot_be_read() -> None:
    pod = _pod([{"name": "n", "resourceClaimTemplateName": "t-ours"}])
    for decide in (mutate_pod, review):
        response = decide(_request(pod), _context(RuntimeError("down")))
        assert response["allowed"] and "patch" not in response
        assert "E_ADMISSION_FAILED" in response["warnings"][0]


def test_review_denies_a_pod_of_ours_without_the_annotation() -> None:
    pod = _pod([{"name": "n", "resourceClaimTemplateName": "t-ours"}])
    response = review(_request(pod), _context(WORLD))
    assert not response["allowed"]
    causes = response["status"]["details"]["causes"]
    assert causes[0]["reason"] == "E_POD_NRI_REQUIREMENT"
    assert review(_request(_pod()), _context(WORLD))["allowed"]


def test_is_our_class_matches_the_deviceclass_admission_test() -> None:
    from dmn.controller.webhook.review import _is_generated_class

    config_only = {
        "metadata": {"name": "x"},
        "spec": {
            "config": [
                {"opaque": {"driver": DRIVER, "parameters": {"kind": "TopologyRootConfiguration"}}}
            ]
        },
    }
    for cls in (OURS, STABLE, OTHER, config_only, {}):
        assert pods.is_our_class(cls) == _is_generated_class(cls)


# ---- property: arbitrary Pod-shaped JSON never makes the core raise -----------------------

_scalar = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.text(max_size=12)
)
_json = st.recursive(
    _scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
_names = st.sampled_from(["t-ours", "c-ours", "c-first", "t-other", "later", ""])
_claim_entry = st.one_of(
    _json,
    st.fixed_dictionaries(
        {"name": st.text(max_size=4)},
        optional={
            "resourceClaimName": st.one_of(_names, _json),
            "resourceClaimTemplateName": _names,
        },
    ),
)
_annotation_value = st.one_of(
    st.sampled_from([f'["{PLUGIN}"]', "[ a, b ]", "not: [a list", "&a [*a]", "[[[]]]", "{}", ""]),
    st.text(max_size=20),
    _json,
)
_annotations = st.one_of(
    _json,
    st.dictionaries(
        st.sampled_from([POD_KEY, pods.REQUIRED_PLUGINS, f"{pods.CONTAINER_PREFIX}app", "x"]),
        _annotation_value,
        max_size=3,
    ),
)
_container = st.one_of(
    _json,
    st.fixed_dictionaries(
        {"name": st.just("app")},
        optional={
            "resources": st.one_of(
                _json,
                st.fixed_dictionaries(
                    {
                        "limits": st.one_of(
                            _json,
                            st.dictionaries(
                                st.sampled_from(
                                    [
                                        "example.com/net",
                                        "cpu",
                                        pods.IMPLICIT_EXTENDED_PREFIX + "gpu",
                                    ]
                                ),
                                _json,
                                max_size=2,
                            ),
                        )
                    }
                ),
            )
        },
    ),
)
_expression = st.one_of(
    _json,
    st.fixed_dictionaries(
        {
            "key": st.sampled_from([KEY, "zone", ""]),
            "operator": st.sampled_from(["Exists", "In", "DoesNotExist"]),
        },
        optional={"values": st.one_of(_json, st.lists(st.text(max_size=3), max_size=2))},
    ),
)
_term = st.one_of(
    _json,
    st.fixed_dictionaries(
        {},
        optional={
            "matchExpressions": st.one_of(_json, st.lists(_expression, max_size=3)),
            "matchFields": st.one_of(_json, st.lists(_json, max_size=1)),
        },
    ),
)
_node_affinity = st.one_of(
    _json,
    st.fixed_dictionaries(
        {},
        optional={
            REQUIRED: st.one_of(
                _json,
                st.fixed_dictionaries(
                    {},
                    optional={"nodeSelectorTerms": st.one_of(_json, st.lists(_term, max_size=3))},
                ),
            ),
            "preferredDuringSchedulingIgnoredDuringExecution": _json,
        },
    ),
)
_affinity = st.one_of(
    _json,
    st.fixed_dictionaries({}, optional={"nodeAffinity": _node_affinity, "podAntiAffinity": _json}),
)
_pods = st.one_of(
    _json,
    st.fixed_dictionaries(
        {},
        optional={
            "metadata": st.one_of(
                _json, st.fixed_dictionaries({}, optional={"annotations": _annotations})
            ),
            "spec": st.one_of(
                _json,
                st.fixed_dictionaries(
                    {},
                    optional={
                        "resourceClaims": st.one_of(_json, st.lists(_claim_entry, max_size=3)),
                        "containers": st.one_of(_json, st.lists(_container, max_size=2)),
                        "initContainers": st.lists(_container, max_size=1),
                        "affinity": _affinity,
                        "nodeName": st.one_of(
                            st.sampled_from(["capable", "plain", "gone", ""]), _json
                        ),
                    },
                ),
            ),
        },
    ),
)
#: Pods that are certainly ours (a claim of our class), with arbitrary affinity and nodeName
_our_pods = st.fixed_dictionaries(
    {
        "spec": st.fixed_dictionaries(
            {
                "resourceClaims": st.just([{"name": "n", "resourceClaimName": "c-ours"}]),
            },
            optional={
                "affinity": _affinity,
                "nodeName": st.one_of(st.sampled_from(["capable", "plain", "gone"]), _json),
                "containers": st.one_of(_json, st.lists(_container, max_size=2)),
            },
        )
    },
    optional={
        "metadata": st.fixed_dictionaries({}, optional={"annotations": _annotations}),
    },
)
#: what admission may read as a revision: anything, or one that is nearly right
_revision_junk = st.one_of(
    st.none(),
    _json,
    st.fixed_dictionaries(
        {
            "spec": st.fixed_dictionaries(
                {"digest": st.just(_digest("net-r1"))},
                optional={"opcodeContracts": _json, "plugins": _json},
            )
        }
    ),
)


@pytest.mark.property
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    pod=st.one_of(_pods, _our_pods),
    old=_pods,
    world_junk=st.lists(_json, max_size=2),
    revision_junk=_revision_junk,
)
def test_arbitrary_pod_json_never_raises(
    pod: Any, old: Any, world_junk: list[Any], revision_junk: Any
) -> None:
    """Nothing raises; a mutated Pod of ours passes validation except for what mutation
    cannot repair (and warned about), a mixed revision or a nodeName; mutating it again
    changes no affinity."""
    revisions = dict(REVISIONS) if revision_junk is None else {"net-r1": revision_junk}
    world = dataclasses.replace(WORLD, classes=[*WORLD.classes, *world_junk], revisions=revisions)
    decision = pods.mutate(pod, world)
    assert all(op["op"] == "add" for op in decision.patch)
    if decision.ours and isinstance(pod, dict):
        mutated = json_patch(pod, decision.patch) if decision.patch else pod
        tolerated = {"E_POD_REVISION_MIXED", "E_POD_NODE_BYPASS"}
        if any("not a list" in w for w in decision.warnings):
            tolerated.add("E_POD_NRI_REQUIREMENT")
        if any("not of a Pod's shape" in w for w in decision.warnings):
            tolerated.add("E_POD_NODE_CAPABILITY")
        codes = {d.code.value for d in pods.validate(mutated, None, world).denials}
        assert codes <= tolerated, (codes, decision.warnings)
        again = pods.mutate(mutated, world).patch
        assert not any(op["path"] == "/spec/affinity" for op in again)
    for operation in ("CREATE", "UPDATE"):
        checked = pods.validate(pod, old, world, operation=operation)
        assert all(d.code.value.startswith("E_POD_") for d in checked.denials)
    response = review(_request(pod, "UPDATE", old), _context(world))
    assert isinstance(response["allowed"], bool)
    response = review(_request(pod), _context(world))
    assert isinstance(response["allowed"], bool)
    response = mutate_pod(_request(pod), _context(world))
    assert isinstance(response["allowed"], bool)
