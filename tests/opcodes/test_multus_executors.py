"""The ``multus/*`` executors through the real runner against the lab API server (its
NetworkAttachmentDefinition semantics are checked against the real kube-apiserver in
``tests/e2e/test_control_plane.py``): what a binding creates, the release order, lost
responses, an API server that does not answer, another writer, and what a tenant can do to
the objects — never adopted, never deleted, never overwritten unless proven ours."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator

import pytest

from dmn.agent.coordinator.multus_plan import FINALIZER
from dmn.api.cluster import Cluster, connect
from dmn.api.cluster import resources as r
from dmn.api.multus.selections import NETWORKS_ANNOTATION, REGISTRY_ANNOTATION
from dmn.engine.journal import EffectState, MemoryJournal, OperationState
from dmn.engine.runner import Runner, RunResult
from dmn.lab.apiserver import LabApiServer
from dmn.opcodes.executor_table import default_executors
from dmn.vocabulary.terms import HandleType
from tests.fixtures.multus import nad, nad_crd
from tests.opcodes.multus_world import NADS, USER_NETWORKS, MultusWorld, make_world, pod_body

OTHER_FINALIZER = "example.com/backup-hold"


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    with LabApiServer() as server, Cluster(connect(url=server.url)) as c:
        c.create(r.CUSTOM_RESOURCE_DEFINITIONS, nad_crd())
        yield c


@pytest.fixture
def world(cluster: Cluster) -> MultusWorld:
    return make_world(cluster)


def runner(world: MultusWorld, journal: MemoryJournal | None = None) -> Runner:
    """A runner whose recovery and cleanup get the port without any binding."""
    return Runner(
        journal if journal is not None else MemoryJournal(),
        default_executors(),
        env_factory=lambda op: world.env(bound=False),
    )


def prepare(world: MultusWorld, run: Runner, op: str = "op1") -> RunResult:
    return run.run(op, "claim/c", world.program(op), env=world.env())


def test_a_binding_creates_the_owned_shadow_and_selects_it(world: MultusWorld) -> None:
    result = prepare(world, runner(world))
    assert result.ok, result.failure
    shadow = world.shadow()
    assert shadow is not None
    meta = shadow["metadata"]
    pod_meta = world.pod["metadata"]
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "app",
            "uid": pod_meta["uid"],
            "blockOwnerDeletion": False,
        }
    ]
    assert meta["finalizers"] == [FINALIZER]
    config = json.loads(shadow["spec"]["config"])
    assert config["master"] == "eth9" and config["name"] == "macvlan-net"
    assert config["ipam"]["network_name"] == "rail-a"
    provenance = json.loads(
        meta["annotations"]["multus.dra-multi-network.schseba.github.io/binding"]
    )
    assert provenance["podUID"] == pod_meta["uid"] and provenance["interface"] == "net1"
    (handle,) = result.exports["attachment"]
    assert handle.type is HandleType.NETWORK_ATTACHMENT
    assert handle.observations["uid"] == meta["uid"]
    annotations = world.annotations()
    entries = json.loads(annotations[NETWORKS_ANNOTATION])
    assert entries[0] == json.loads(USER_NETWORKS)[0]  # the user's, unknown fields kept
    assert entries[1] == {"name": world.name, "namespace": world.namespace, "interface": "net1"}
    assert annotations[NETWORKS_ANNOTATION].startswith(USER_NETWORKS[:-1])  # byte for byte
    assert world.binding.selection.key in annotations[REGISTRY_ANNOTATION]


def test_release_deletes_first_unselects_and_drops_only_our_finalizer_last(
    world: MultusWorld,
) -> None:
    run = runner(world)
    assert prepare(world, run).ok
    world.cluster.patch(
        NADS,
        world.name,
        [{"op": "add", "path": "/metadata/finalizers/-", "value": OTHER_FINALIZER}],
        world.namespace,
        patch_type="json",
    )
    world.port.calls.clear()
    end = run.cleanup("op1")
    assert end.state is OperationState.UNDONE, end
    # the order of the release: deletion requested, selection removed, our finalizer last
    assert world.port.calls == ["delete_nad", "patch_pod", "patch_nad"]
    held = world.shadow()
    assert held is not None and held["metadata"]["finalizers"] == [OTHER_FINALIZER]
    assert held["metadata"]["deletionTimestamp"]
    assert world.annotations() == {NETWORKS_ANNOTATION: USER_NETWORKS}  # exactly as before


def test_a_lost_create_response_is_adopted_after_the_full_identity_check(
    world: MultusWorld,
) -> None:
    world.port.lose.add("create_nad")
    result = prepare(world, runner(world))
    assert result.ok, result.failure
    assert world.port.calls.count("create_nad") == 1  # adopted, never created twice
    assert world.shadow() is not None


def test_a_create_that_got_no_answer_and_left_nothing_is_rolled_back(world: MultusWorld) -> None:
    world.port.unreachable.add("create_nad")
    result = prepare(world, runner(world))
    assert result.state is OperationState.UNDONE and result.failure is not None
    assert result.failure.code == "E_MULTUS_API"
    assert world.shadow() is None
    assert world.annotations() == {NETWORKS_ANNOTATION: USER_NETWORKS}


@pytest.mark.parametrize("foreign", ["owner", "content"])
def test_a_nad_of_another_owner_under_our_name_is_a_conflict_and_untouched(
    world: MultusWorld, foreign: str
) -> None:
    """Adversarial: the tenant (who may write NADs in its namespace) creates an object under
    the shadow's generated name first: another owner, or ours with other content."""
    meta = world.binding.nad["metadata"]
    body = json.loads(json.dumps(world.binding.nad))
    if foreign == "owner":
        other = world.cluster.create(r.PODS, pod_body(world.namespace, "other"), world.namespace)
        body["metadata"]["ownerReferences"][0]["name"] = "other"
        body["metadata"]["ownerReferences"][0]["uid"] = other["metadata"]["uid"]
    else:
        body["spec"]["config"] = body["spec"]["config"].replace("eth9", "eth0")
    planted = world.cluster.create(NADS, body, meta["namespace"])
    result = prepare(world, runner(world))
    assert result.state is OperationState.UNDONE and result.failure is not None
    assert result.failure.code == "E_MULTUS_SHADOW_CONFLICT"
    after = world.shadow()
    assert after is not None
    assert after["metadata"]["resourceVersion"] == planted["metadata"]["resourceVersion"]
    assert world.annotations() == {NETWORKS_ANNOTATION: USER_NETWORKS}


def test_a_tenant_selection_naming_our_shadow_is_refused_and_everything_taken_back(
    cluster: Cluster,
) -> None:
    """Adversarial: the Pod's own networks annotation names the generated shadow (a tenant
    claiming it) — the registry does not record it, so it is an ownership conflict; the
    shadow the run created is taken back, the annotation is never rewritten."""
    world = make_world(cluster)
    forged = json.dumps([{"name": world.name, "namespace": world.namespace, "interface": "net1"}])
    cluster.patch(
        r.PODS, "app", {"metadata": {"annotations": {NETWORKS_ANNOTATION: forged}}}, world.namespace
    )
    result = prepare(world, runner(world))
    assert result.state is OperationState.UNDONE and result.failure is not None
    assert result.failure.code == "E_MULTUS_OWNERSHIP"
    assert world.shadow() is None
    assert world.annotations() == {NETWORKS_ANNOTATION: forged}


def test_a_forged_registry_entry_for_our_binding_is_refused(world: MultusWorld) -> None:
    """Adversarial: the tenant writes the registry annotation itself, recording our binding
    key for another shadow: a recorded binding never changes, so the merge refuses."""
    s = world.binding.selection
    forged = json.dumps(
        {
            "version": 1,
            "entries": [
                {
                    "key": s.key,
                    "claimUID": s.claim_uid,
                    "namespace": s.namespace,
                    "name": "dmn-multus-" + "0" * 32,
                    "interface": "net1",
                    "source": {"namespace": s.source_namespace, "name": s.source_name},
                }
            ],
        }
    )
    world.cluster.patch(
        r.PODS,
        "app",
        {"metadata": {"annotations": {REGISTRY_ANNOTATION: forged}}},
        world.namespace,
    )
    result = prepare(world, runner(world))
    assert result.state is OperationState.UNDONE and result.failure is not None
    assert result.failure.code == "E_MULTUS_OWNERSHIP"
    assert world.shadow() is None
    assert world.annotations()[REGISTRY_ANNOTATION] == forged


def test_another_writer_between_read_and_patch_is_kept(world: MultusWorld) -> None:
    def writer() -> None:
        world.cluster.patch(
            r.PODS,
            "app",
            {"metadata": {"annotations": {"example.com/other": "v"}}},
            world.namespace,
        )

    world.port.before["patch_pod"] = writer
    assert prepare(world, runner(world)).ok
    annotations = world.annotations()
    assert annotations["example.com/other"] == "v"
    assert world.name in annotations[NETWORKS_ANNOTATION]
    assert world.port.calls.count("patch_pod") == 2  # the first one's test failed (422)


def test_a_replaced_shadow_is_never_touched_by_the_release(world: MultusWorld) -> None:
    run = runner(world)
    assert prepare(world, run).ok
    ours = world.shadow()
    assert ours is not None
    # someone strips our finalizer, deletes ours and creates an identical one (a new UID)
    world.cluster.patch(
        NADS,
        world.name,
        [{"op": "remove", "path": "/metadata/finalizers"}],
        world.namespace,
        patch_type="json",
    )
    world.cluster.delete(NADS, world.name, world.namespace)
    replacement = world.cluster.create(
        NADS, json.loads(json.dumps(world.binding.nad)), world.namespace
    )
    assert replacement["metadata"]["uid"] != ours["metadata"]["uid"]
    end = run.cleanup("op1")
    assert end.state is OperationState.UNDONE, end
    after = world.shadow()
    assert after is not None and after["metadata"]["uid"] == replacement["metadata"]["uid"]
    assert not after["metadata"].get("deletionTimestamp")
    assert after["metadata"]["finalizers"] == [FINALIZER]


def test_a_tampered_shadow_is_quarantined_not_deleted(world: MultusWorld) -> None:
    run = runner(world)
    assert prepare(world, run).ok
    tampered = world.binding.nad["spec"]["config"].replace("eth9", "eth0")
    world.cluster.patch(NADS, world.name, {"spec": {"config": tampered}}, world.namespace)
    end = run.cleanup("op1")
    # neither its deletion nor its finalizer's removal: an operator decides; the Pod's
    # selection (ours by the registry) is still released
    assert end.state is OperationState.QUARANTINED
    assert set(end.quarantined) == {"ready", "shadow"}
    held = world.shadow()
    assert held is not None and not held["metadata"].get("deletionTimestamp")
    assert held["metadata"]["finalizers"] == [FINALIZER]
    assert world.annotations() == {NETWORKS_ANNOTATION: USER_NETWORKS}


def test_an_api_server_that_does_not_answer_defers_the_release(world: MultusWorld) -> None:
    run = runner(world)
    assert prepare(world, run).ok
    world.port.unreachable.add("patch_pod")
    first = run.cleanup("op1")
    assert first.state is OperationState.UNDOING and not first.quarantined
    record = run.journal.load_operation("op1")
    assert record is not None
    assert [e.state for e in record.effects] == [
        EffectState.APPLIED,
        EffectState.UNDOING,
        EffectState.UNDONE,
    ]
    held = world.shadow()
    assert held is not None and held["metadata"]["deletionTimestamp"]  # asked to go first
    second = run.cleanup("op1")
    assert second.state is OperationState.UNDONE
    assert world.shadow() is None
    assert world.annotations() == {NETWORKS_ANNOTATION: USER_NETWORKS}


def test_a_deleted_pod_leaves_a_held_shadow_the_release_finishes(world: MultusWorld) -> None:
    run = runner(world)
    assert prepare(world, run).ok
    world.cluster.delete(r.PODS, "app", world.namespace, grace_period_seconds=0)
    held = world.shadow()
    assert held is not None and held["metadata"]["deletionTimestamp"]  # GC asked, finalizer holds
    assert held["spec"] == world.binding.nad["spec"]  # frozen configuration for Multus' DEL
    end = run.cleanup("op1")
    assert end.state is OperationState.UNDONE, end
    assert world.shadow() is None


def test_without_the_agents_binding_nothing_is_created(world: MultusWorld) -> None:
    run = runner(world)
    result = run.run("op1", "claim/c", world.program("op1"), env=world.env(bound=False))
    assert result.state is OperationState.UNDONE and result.failure is not None
    assert result.failure.code == "E_MULTUS_NOT_CONFIGURED"
    assert world.shadow() is None


def test_a_shadow_being_deleted_is_not_recreated_or_adopted(world: MultusWorld) -> None:
    body = json.loads(json.dumps(world.binding.nad))
    world.cluster.create(NADS, body, world.namespace)
    world.cluster.delete(NADS, world.name, world.namespace)
    result = prepare(world, runner(world))
    assert result.failure is not None and result.failure.code == "E_MULTUS_SHADOW_DELETING"
    held = world.shadow()
    assert held is not None and held["metadata"]["deletionTimestamp"]


def test_a_stolen_reservation_refuses_the_selection(world: MultusWorld) -> None:
    claim = world.cluster.get(r.RESOURCE_CLAIMS, "claim", world.namespace)
    claim["status"]["reservedFor"].append({"resource": "pods", "name": "other", "uid": "u-2"})
    world.cluster.replace(r.RESOURCE_CLAIMS, claim, world.namespace, status=True)
    result = prepare(world, runner(world))
    assert result.failure is not None and result.failure.code == "E_MULTUS_CONSUMER"
    assert world.shadow() is None


def test_template_objects_are_never_read_by_the_effects(world: MultusWorld) -> None:
    """The effects bind only what the agent rendered: a template under the source name
    that changes meanwhile changes nothing of the shadow."""
    world.cluster.create(
        NADS,
        nad(world.namespace, "macvlan-net", '{"cniVersion":"1.0.0","type":"bridge"}'),
        world.namespace,
    )
    assert prepare(world, runner(world)).ok
    shadow = world.shadow()
    assert shadow is not None and json.loads(shadow["spec"]["config"])["type"] == "macvlan"


def test_a_share_never_hands_its_device_over_whole(cluster: Cluster) -> None:
    """The executor checks again what the node's plan checked: a binding whose delegate
    takes the device whole (host-device) on a share is refused before any request."""
    world = make_world(cluster)
    world.binding = dataclasses.replace(world.binding, delegate="host-device")
    result = prepare(world, runner(world))
    assert result.failure is not None and result.failure.code == "E_MULTUS_DEVICE_MISMATCH"
    assert world.shadow() is None and world.port.calls == []
