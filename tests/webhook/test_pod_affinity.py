"""Pod admission's node-capability half (controller/webhook/pod_affinity.py through pods.py,
and the reads in pod_sources.py): revisions compiled from the shipped examples, the classes
the controller would generate for them, and crafted Nodes; no I/O but a stub cluster."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest

from dmn import NRI_PLUGIN_NAME
from dmn.api.cluster import NotFound
from dmn.api.cluster import resources as r
from dmn.api.node_capability import revision_requirement
from dmn.controller.compile.compiler import compile_topology
from dmn.controller.webhook import pods
from dmn.controller.webhook.pod_affinity import REQUIRED, TERMS_PATH, with_keys
from dmn.controller.webhook.pod_sources import read_world
from dmn.controller.webhook.pods import CLAIM, POD_KEY, TEMPLATE, World
from dmn.interpreter.loader import load_builtin_plugins
from dmn.lab.apiserver.patches import json_patch
from tests.controller.support import example


def _compiled(name: str, rename: str | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The revision (as stored, with a UID) and the classes the controller makes for it."""
    topo = example(name)
    if rename:
        topo["metadata"]["name"] = rename
    topo["metadata"]["uid"] = f"topo-{rename or name}"
    compiled = compile_topology(topo, load_builtin_plugins()).compiled
    assert compiled is not None
    revision = copy.deepcopy(compiled.revision)
    revision["metadata"]["uid"] = f"rev-{compiled.revision_name}"
    return revision, compiled.device_classes(revision["metadata"]["uid"])


VFIO, VFIO_CLASSES = _compiled("vfio")
TWIN, TWIN_CLASSES = _compiled("vfio", rename="vfio-twin")  # same opcodes, another revision
HOST, HOST_CLASSES = _compiled("host-device")
OLD, OLD_CLASSES = _compiled("host-device", rename="old")
del OLD["spec"]["opcodeContracts"]  # compiled before revisions recorded them

KEY = revision_requirement(VFIO).key  # type: ignore[union-attr]
HOST_KEY = revision_requirement(HOST).key  # type: ignore[union-attr]
CLASSES = [*VFIO_CLASSES, *TWIN_CLASSES, *HOST_CLASSES, *OLD_CLASSES]


def _class_name(classes: list[dict[str, Any]]) -> str:
    return str(classes[0]["metadata"]["name"])


def _claim(*classes: str) -> dict[str, Any]:
    requests = [{"name": f"r{i}", "exactly": {"deviceClassName": c}} for i, c in enumerate(classes)]
    return {"kind": "ResourceClaim", "spec": {"devices": {"requests": requests}}}


def _node(name: str, *keys: str) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name, **{k: "true" for k in keys}}
    return {"metadata": {"name": name, "labels": labels}}


WORLD = World(
    objects={
        (CLAIM, "vfio"): _claim(_class_name(VFIO_CLASSES)),
        (CLAIM, "twins"): _claim(_class_name(VFIO_CLASSES), _class_name(TWIN_CLASSES)),
        (CLAIM, "two"): _claim(_class_name(VFIO_CLASSES), _class_name(HOST_CLASSES)),
        (CLAIM, "old"): _claim(_class_name(OLD_CLASSES)),
        (CLAIM, "gpu"): _claim("gpu"),
        (TEMPLATE, "vfio"): {
            "kind": "ResourceClaimTemplate",
            "spec": {"spec": _claim(_class_name(VFIO_CLASSES))["spec"]},
        },
    },
    classes=[*CLASSES, {"metadata": {"name": "gpu"}, "spec": {}}],
    revisions={rev["metadata"]["name"]: rev for rev in (VFIO, TWIN, HOST, OLD)},
    nodes={
        "capable": _node("capable", KEY),
        "both": _node("both", KEY, HOST_KEY),
        "plain": _node("plain"),
    },
)


def _pod(claim: str = "vfio", spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "t"},
        "spec": {
            "containers": [{"name": "app", "image": "x"}],
            "resourceClaims": [{"name": "n", "resourceClaimName": claim}],
            **(spec or {}),
        },
    }


def _exists(key: str) -> dict[str, Any]:
    return {"key": key, "operator": "Exists"}


def _terms(pod: dict[str, Any]) -> list[dict[str, Any]]:
    terms: list[dict[str, Any]] = pod["spec"]["affinity"]["nodeAffinity"][REQUIRED][
        "nodeSelectorTerms"
    ]
    return terms


def _mutated(pod: dict[str, Any], world: World = WORLD) -> tuple[dict[str, Any], pods.Decision]:
    decision = pods.mutate(pod, world)
    return json_patch(pod, decision.patch), decision


def _codes(pod: dict[str, Any], world: World = WORLD) -> list[tuple[str, str]]:
    return [(d.code.value, d.path) for d in pods.validate(pod, None, world).denials]


def test_a_pod_without_affinity_gets_one_term_requiring_its_revision_key() -> None:
    pod = _pod()
    mutated, decision = _mutated(pod)
    assert decision.warnings == []
    assert {op["path"] for op in decision.patch} == {"/metadata/annotations", "/spec/affinity"}
    assert _terms(mutated) == [{"matchExpressions": [_exists(KEY)]}]
    assert mutated["metadata"]["annotations"][POD_KEY] == f'["{NRI_PLUGIN_NAME}"]'
    assert _codes(mutated) == []
    assert pods.mutate(mutated, WORLD).patch == []  # reinvocation changes nothing


def test_a_template_pod_gets_it_too() -> None:
    pod = _pod()
    pod["spec"]["resourceClaims"] = [{"name": "n", "resourceClaimTemplateName": "vfio"}]
    mutated, _ = _mutated(pod)
    assert _terms(mutated) == [{"matchExpressions": [_exists(KEY)]}]


def test_every_term_gets_the_key_and_everything_else_is_kept() -> None:
    """Terms are ORed: each one must carry the key, after its own expressions and beside its
    matchFields; the preferred terms, podAntiAffinity and nodeSelector stay as they were."""
    anti = {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {
                "labelSelector": {"matchLabels": {"app": "x"}},
                "topologyKey": "kubernetes.io/hostname",
            }
        ]
    }
    preferred = [{"weight": 1, "preference": {"matchExpressions": [_exists("ssd")]}}]
    terms = [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["capable"]}]},
        {"matchExpressions": [_exists(KEY)]},  # already there: unchanged
    ]
    affinity = {
        "nodeAffinity": {
            REQUIRED: {"nodeSelectorTerms": copy.deepcopy(terms)},
            "preferredDuringSchedulingIgnoredDuringExecution": preferred,
        },
        "podAntiAffinity": anti,
    }
    pod = _pod(spec={"affinity": affinity, "nodeSelector": {"zone": "a"}})
    mutated, decision = _mutated(pod)
    assert decision.warnings == []
    assert _terms(mutated) == [
        {"matchExpressions": [terms[0]["matchExpressions"][0], _exists(KEY)]},
        {"matchFields": terms[1]["matchFields"], "matchExpressions": [_exists(KEY)]},
        terms[2],
    ]
    node_affinity = mutated["spec"]["affinity"]["nodeAffinity"]
    assert node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] == preferred
    assert mutated["spec"]["affinity"]["podAntiAffinity"] == anti
    assert mutated["spec"]["nodeSelector"] == {"zone": "a"}
    assert pod["spec"]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"] == terms
    assert _codes(mutated) == []


def test_pod_affinity_alone_is_kept_and_the_node_affinity_added() -> None:
    anti: dict[str, Any] = {"preferredDuringSchedulingIgnoredDuringExecution": []}
    mutated, _ = _mutated(_pod(spec={"affinity": {"podAntiAffinity": anti}}))
    assert mutated["spec"]["affinity"]["podAntiAffinity"] == anti
    assert _terms(mutated) == [{"matchExpressions": [_exists(KEY)]}]


def test_a_term_that_matches_no_node_is_left_alone() -> None:
    """An empty term selects no node in Kubernetes: our expressions would widen it."""
    terms = [{}, {"matchExpressions": []}, {"matchExpressions": [_exists("zone")]}]
    affinity = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": terms}}}
    mutated, _ = _mutated(_pod(spec={"affinity": affinity}))
    assert _terms(mutated) == [
        {},
        {"matchExpressions": []},
        {"matchExpressions": [_exists("zone"), _exists(KEY)]},
    ]
    assert _codes(mutated) == []


def test_an_empty_term_list_gets_one_term() -> None:
    affinity: dict[str, Any] = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": []}}}
    mutated, _ = _mutated(_pod(spec={"affinity": affinity}))
    assert _terms(mutated) == [{"matchExpressions": [_exists(KEY)]}]


def test_two_revisions_with_the_same_requirement_share_one_key() -> None:
    assert VFIO["metadata"]["name"] != TWIN["metadata"]["name"]
    mutated, decision = _mutated(_pod("twins"))
    assert decision.warnings == []
    assert _terms(mutated) == [{"matchExpressions": [_exists(KEY)]}]


def test_two_requirements_give_two_keys_in_every_term() -> None:
    assert KEY != HOST_KEY
    affinity = {
        "nodeAffinity": {
            REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [_exists("a")]}, _term_b()]}
        }
    }
    mutated, _ = _mutated(_pod("two", {"affinity": affinity}))
    keys = sorted([KEY, HOST_KEY])
    assert _terms(mutated) == [
        {"matchExpressions": [_exists("a"), *map(_exists, keys)]},
        {"matchExpressions": [_exists("b"), *map(_exists, keys)]},
    ]


def _term_b() -> dict[str, Any]:
    return {"matchExpressions": [_exists("b")]}


def test_a_revision_without_opcode_contracts_adds_no_affinity_and_warns() -> None:
    pod = _pod("old")
    mutated, decision = _mutated(pod)
    assert [op["path"] for op in decision.patch] == ["/metadata/annotations"]
    assert "affinity" not in mutated["spec"]
    (warning,) = decision.warnings
    assert f"NetworkTopologyRevision {OLD['metadata']['name']!r}" in warning
    assert "does not record its opcode contracts" in warning
    assert "no node affinity was added" in warning
    assert _codes(mutated) == []


def test_a_missing_or_other_revision_adds_no_affinity_and_warns() -> None:
    world = World(
        objects=WORLD.objects,
        classes=WORLD.classes,
        revisions={VFIO["metadata"]["name"]: {**VFIO, "spec": {**VFIO["spec"], "digest": "x"}}},
    )
    decision = pods.mutate(_pod(), world)
    assert [op["path"] for op in decision.patch] == ["/metadata/annotations"]
    assert "is not the revision the class pins" in decision.warnings[0]
    gone = World(objects=WORLD.objects, classes=WORLD.classes)
    decision = pods.mutate(_pod(), gone)
    assert "does not exist" in decision.warnings[0]


@pytest.mark.parametrize(
    "pod",
    [
        _pod("gpu"),
        {"kind": "Pod", "spec": {"containers": [{"name": "a"}], "nodeName": "plain"}},
    ],
    ids=["other-class", "no-claims-bound-to-plain"],
)
def test_pods_not_ours_are_untouched(pod: dict[str, Any]) -> None:
    decision = pods.mutate(pod, WORLD)
    assert (decision.patch, decision.warnings) == ([], [])
    assert _codes(pod) == []


def test_a_term_without_the_key_is_denied() -> None:
    """A Pod created around the mutating webhook, or whose affinity someone else's
    webhook rewrote after ours."""
    mutated, _ = _mutated(_pod())
    mutated["spec"]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"].append(_term_b())
    assert _codes(mutated) == [("E_POD_NODE_CAPABILITY", f"{TERMS_PATH}[1].matchExpressions")]
    (denial,) = pods.validate(mutated, None, WORLD).denials
    assert KEY in denial.message and VFIO["metadata"]["name"] in denial.message
    unmutated = _pod()
    unmutated["metadata"]["annotations"] = {POD_KEY: f'["{NRI_PLUGIN_NAME}"]'}
    assert _codes(unmutated) == [("E_POD_NODE_CAPABILITY", TERMS_PATH)]
    in_values = {"key": KEY, "operator": "In", "values": ["true"]}
    unmutated["spec"]["affinity"] = {
        "nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [in_values]}]}}
    }
    assert _codes(unmutated) == [("E_POD_NODE_CAPABILITY", f"{TERMS_PATH}[0].matchExpressions")]


def test_an_affinity_not_of_a_pod_shape_is_warned_about_and_denied() -> None:
    pod = _pod(spec={"affinity": {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": "all"}}}})
    mutated, decision = _mutated(pod)
    assert "spec.affinity is not of a Pod's shape" in decision.warnings[0]
    assert [op["path"] for op in decision.patch] == ["/metadata/annotations"]
    assert _codes(mutated) == [("E_POD_NODE_CAPABILITY", "spec.affinity")]


@pytest.mark.parametrize(
    "node,denied",
    [("capable", False), ("both", False), ("plain", True), ("gone", True)],
)
def test_direct_node_name_binding_cannot_bypass_the_capability(node: str, denied: bool) -> None:
    mutated, _ = _mutated(_pod(spec={"nodeName": node}))
    codes = _codes(mutated)
    assert codes == ([("E_POD_NODE_BYPASS", "spec.nodeName")] if denied else [])
    if denied:
        message = pods.validate(mutated, None, WORLD).denials[0].message
        assert "cannot bypass" in message
        assert ("does not exist" in message) == (node == "gone")


def test_node_name_needs_every_key() -> None:
    assert _codes(_mutated(_pod("two", {"nodeName": "capable"}))[0]) == [
        ("E_POD_NODE_BYPASS", "spec.nodeName")
    ]
    assert _codes(_mutated(_pod("two", {"nodeName": "both"}))[0]) == []


def test_node_name_to_any_node_is_allowed_when_no_revision_records_its_contracts() -> None:
    assert _codes(_mutated(_pod("old", {"nodeName": "plain"}))[0]) == []


def test_an_update_is_not_judged_on_affinity_or_node() -> None:
    pod = _pod(spec={"nodeName": "plain"})
    pod["metadata"]["annotations"] = {POD_KEY: f'["{NRI_PLUGIN_NAME}"]'}
    assert pods.validate(pod, pod, WORLD, operation="UPDATE").denials == []
    assert pods.validate(pod, None, WORLD).denials  # the same Pod created is denied


def test_with_keys_changes_nothing_without_keys() -> None:
    assert with_keys({"nodeAffinity": "junk"}, []) == (None, "")
    assert with_keys(None, ["k"])[0] == {
        "nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [_exists("k")]}]}}
    }


class _StubCluster:
    """The reads pod_sources makes, answered from dicts; records them."""

    def __init__(self, objects: dict[tuple[str, str], Mapping[str, Any]]) -> None:
        self.objects = objects
        self.gets: list[tuple[str, str]] = []

    def get(self, res: r.Resource, name: str, namespace: str | None = None) -> Mapping[str, Any]:
        self.gets.append((res.kind, name))
        try:
            return self.objects[(res.kind, name)]
        except KeyError:
            raise NotFound(404, "NotFound", f"{name} not found") from None

    def list(self, res: r.Resource) -> Any:
        assert res is r.DEVICE_CLASSES

        class _Items:
            items = WORLD.classes

        return _Items()


def test_read_world_reads_the_revisions_and_the_bound_node() -> None:
    stub = _StubCluster(
        {
            ("ResourceClaim", "two"): WORLD.objects[(CLAIM, "two")],
            ("NetworkTopologyRevision", VFIO["metadata"]["name"]): VFIO,
            ("Node", "both"): WORLD.nodes["both"],
        }
    )
    world = read_world(stub, "t", _pod("two", {"nodeName": "both"}))  # type: ignore[arg-type]
    assert world.revisions == {VFIO["metadata"]["name"]: VFIO}  # the host one is NotFound
    assert world.nodes == {"both": WORLD.nodes["both"]}
    assert stub.gets == [
        ("ResourceClaim", "two"),
        ("NetworkTopologyRevision", VFIO["metadata"]["name"]),
        ("NetworkTopologyRevision", HOST["metadata"]["name"]),
        ("Node", "both"),
    ]
    gone = read_world(stub, "t", _pod("two", {"nodeName": "gone"}))  # type: ignore[arg-type]
    assert gone.nodes == {}
    assert _codes(_mutated(_pod("two", {"nodeName": "gone"}), gone)[0], gone) == [
        ("E_POD_NODE_BYPASS", "spec.nodeName")
    ]


def test_read_world_reads_nothing_more_for_a_pod_not_ours() -> None:
    stub = _StubCluster({("ResourceClaim", "gpu"): WORLD.objects[(CLAIM, "gpu")]})
    world = read_world(stub, "t", _pod("gpu", {"nodeName": "plain"}))  # type: ignore[arg-type]
    assert (world.revisions, world.nodes) == ({}, {})
    assert stub.gets == [("ResourceClaim", "gpu")]
