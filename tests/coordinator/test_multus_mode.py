"""Multus automatic mode through the whole node agent on the lab node (real API server,
controller, slice publication, allocator, journal, kubelet and NRI paths; a stand-in writes
what Multus writes after its ADD): NodePrepare binds, RunPodSandbox connects nothing for the
binding, the CreateContainer gate holds until Multus reports the interface, NodeUnprepare
releases in order and leaves the Pod's annotations as they were; bad input is refused
before any change; the template's later edits and deletion change nothing of a prepared
binding; one Pod mixes the driver's own path and the Multus path."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest

from dmn.agent.coordinator.multus_plan import FINALIZER
from dmn.agent.coordinator.verify import Refusal
from dmn.agent.journal.records import AttachmentState, PreparationState
from dmn.agent.nri.handler import HookDeadline
from dmn.api.cluster import NotFound
from dmn.api.cluster import resources as r
from dmn.api.multus.selections import NETWORKS_ANNOTATION, REGISTRY_ANNOTATION
from dmn.lab.runtime.nri_runtime import LabContainer, LabPod
from tests.coordinator.lab_node import LabNode, lab_node
from tests.coordinator.multus_lab import (
    NADS,
    annotations,
    claimed_pod,
    enable_multus,
    multus_attached,
    shadows,
)
from tests.coordinator.test_crash import names
from tests.kernel.scratch import netns_path, scratch_netns

pytestmark = [pytest.mark.netns]

USER = '[{"name":"user-net","interface":"eth7","x-unknown":{"kept":[1,2.50]}}]'


@pytest.fixture(scope="module")
def node() -> Iterator[LabNode]:
    with lab_node() as n:
        yield n


@pytest.fixture(scope="module")
def device_class(node: LabNode) -> str:
    return enable_multus(node)


def prepare(node: LabNode, claim: dict) -> list:
    meta = claim["metadata"]
    return node.services.preparation.prepare(meta["namespace"], meta["name"], meta["uid"])


def test_prepare_binds_the_gate_holds_and_release_restores(
    node: LabNode, device_class: str
) -> None:
    (claim,), pod = claimed_pod(node, device_class, {NETWORKS_ANNOTATION: USER})
    meta, pmeta = claim["metadata"], pod["metadata"]
    before = annotations(node.cluster, pod)
    devices = prepare(node, claim)
    assert [d.device for d in devices] == [
        claim["status"]["allocation"]["devices"]["results"][0]["device"]
    ]
    (shadow,) = shadows(node.cluster)
    config = json.loads(shadow["spec"]["config"])
    assert config["master"] in ("lab0", "lab1") and config["name"] == "macvlan-net"
    assert shadow["metadata"]["ownerReferences"][0]["uid"] == pmeta["uid"]
    assert shadow["metadata"]["finalizers"] == [FINALIZER]
    got = annotations(node.cluster, pod)
    entries = json.loads(got[NETWORKS_ANNOTATION])
    assert got[NETWORKS_ANNOTATION].startswith(USER[:-1])  # the user's entry byte for byte
    name = shadow["metadata"]["name"]
    assert entries[1] == {"name": name, "namespace": "default", "interface": "net1"}
    assert REGISTRY_ANNOTATION in got
    with scratch_netns("dmmx1") as sandbox:
        sb = LabPod("sb-mx-1", pmeta["uid"], pmeta["name"], "default", netns_path(sandbox))
        node.runtime.run_pod_sandbox(sb)
        att = node.services.attachments.attachment(pmeta["uid"], "sb-mx-1")
        assert att is not None and att.state is AttachmentState.READY
        with pytest.raises(Refusal) as held:  # Multus has not reported the interface yet
            node.services.attachments.gate("default", pmeta["name"], pmeta["uid"], "sb-mx-1")
        assert held.value.code == "E_MULTUS_NOT_ATTACHED" and held.value.retryable
        multus_attached(node.cluster, pod, name, "net1")
        node.runtime.create_container("sb-mx-1", LabContainer("c-mx-1", "sb-mx-1", "app"))
        node.runtime.stop_pod_sandbox("sb-mx-1")
        node.runtime.remove_pod_sandbox("sb-mx-1")
    node.services.preparation.unprepare(meta["uid"])
    (prep,) = node.services.journal.preparations(meta["uid"])
    assert prep.state is PreparationState.RELEASED
    assert shadows(node.cluster) == []
    after = annotations(node.cluster, pod)
    after.pop("k8s.v1.cni.cncf.io/network-status")
    assert after == before


def test_the_gate_holds_a_container_until_multus_reports_it(
    node: LabNode, device_class: str
) -> None:
    (claim,), pod = claimed_pod(node, device_class)
    pmeta = pod["metadata"]
    prepare(node, claim)
    (shadow,) = shadows(node.cluster)
    with scratch_netns("dmmx2") as sandbox:
        sb = LabPod("sb-mx-2", pmeta["uid"], pmeta["name"], "default", netns_path(sandbox))
        node.runtime.run_pod_sandbox(sb)
        writer = threading.Timer(
            1.0, multus_attached, (node.cluster, pod, shadow["metadata"]["name"], "net1")
        )
        writer.start()
        try:
            # refused at once without the hold: it passes only by waiting for the report
            node.runtime.create_container("sb-mx-2", LabContainer("c-mx-2", "sb-mx-2", "app"))
        finally:
            writer.join()
        node.runtime.stop_pod_sandbox("sb-mx-2")
        node.runtime.remove_pod_sandbox("sb-mx-2")
    node.services.preparation.unprepare(claim["metadata"]["uid"])
    assert shadows(node.cluster) == []


def test_a_manual_selection_of_the_template_is_refused_before_any_change(
    node: LabNode, device_class: str
) -> None:
    (claim,), pod = claimed_pod(node, device_class, {NETWORKS_ANNOTATION: "macvlan-net"})
    before = annotations(node.cluster, pod)
    with pytest.raises(Refusal) as err:
        prepare(node, claim)
    assert err.value.code == "E_MULTUS_MANUAL_SELECTION"
    assert shadows(node.cluster) == []
    assert annotations(node.cluster, pod) == before
    assert node.services.journal.preparations(claim["metadata"]["uid"]) == []


def test_the_template_changing_or_going_changes_nothing_prepared(
    node: LabNode, device_class: str
) -> None:
    (claim,), _pod = claimed_pod(node, device_class)
    prepare(node, claim)
    (shadow,) = shadows(node.cluster)
    template = node.cluster.get(NADS, "macvlan-net", "default")
    edited = json.loads(template["spec"]["config"]) | {"mode": "private"}
    node.cluster.patch(NADS, "macvlan-net", {"spec": {"config": json.dumps(edited)}}, "default")
    node.cluster.delete(NADS, "macvlan-net", "default")
    try:
        (still,) = shadows(node.cluster)
        assert still["spec"] == shadow["spec"]  # frozen
        # a kubelet retry (another sandbox of the same Pod) is answered from the journal
        assert prepare(node, claim)
        node.services.preparation.unprepare(claim["metadata"]["uid"])
        assert shadows(node.cluster) == []
    finally:
        node.cluster.create(
            NADS,
            template | {"metadata": {"name": "macvlan-net", "namespace": "default"}},
            "default",
        )


def test_a_deleted_pod_keeps_the_shadow_held_until_the_release(
    node: LabNode, device_class: str
) -> None:
    (claim,), pod = claimed_pod(node, device_class)
    prepare(node, claim)
    node.cluster.delete(r.PODS, pod["metadata"]["name"], "default", grace_period_seconds=0)
    (held,) = shadows(node.cluster)
    assert held["metadata"]["deletionTimestamp"]
    node.services.preparation.unprepare(claim["metadata"]["uid"])
    assert shadows(node.cluster) == []
    with pytest.raises(NotFound):
        node.cluster.get(r.PODS, pod["metadata"]["name"], "default")


def test_one_pod_mixes_the_drivers_own_path_and_the_multus_path(
    node: LabNode, device_class: str
) -> None:
    kernel = node.kernel_class()  # host-cni, ifName net2, the whole other link
    (mclaim, kclaim), pod = claimed_pod(node, device_class, extra_classes=(kernel,))
    pmeta = pod["metadata"]
    prepare(node, mclaim)
    prepare(node, kclaim)
    (shadow,) = shadows(node.cluster)
    name = shadow["metadata"]["name"]
    entries = json.loads(annotations(node.cluster, pod)[NETWORKS_ANNOTATION])
    assert entries == [{"name": name, "namespace": "default", "interface": "net1"}]
    with scratch_netns("dmmx3") as sandbox:
        multus_attached(node.cluster, pod, name, "net1")  # Multus' ADD comes first
        sb = LabPod("sb-mx-3", pmeta["uid"], pmeta["name"], "default", netns_path(sandbox))
        node.runtime.run_pod_sandbox(sb)
        node.runtime.create_container("sb-mx-3", LabContainer("c-mx-3", "sb-mx-3", "app"))
        assert names(sandbox) == ["lo", "net2"]  # ours; net1 is Multus' (none runs here)
        node.runtime.stop_pod_sandbox("sb-mx-3")
        node.runtime.remove_pod_sandbox("sb-mx-3")
    for claim in (mclaim, kclaim):
        node.services.preparation.unprepare(claim["metadata"]["uid"])
    assert shadows(node.cluster) == []


def test_an_unreported_interface_is_refused_when_the_deadline_draws_near(
    node: LabNode, device_class: str
) -> None:
    (claim,), pod = claimed_pod(node, device_class)
    pmeta = pod["metadata"]
    prepare(node, claim)
    with scratch_netns("dmmx4") as sandbox:
        sb = LabPod("sb-mx-4", pmeta["uid"], pmeta["name"], "default", netns_path(sandbox))
        node.runtime.run_pod_sandbox(sb)
        att = node.services.attachments.attachment(pmeta["uid"], "sb-mx-4")
        gate = node.services.attachments.multus
        assert att is not None and gate is not None
        with pytest.raises(Refusal) as err:
            gate.hold("default", pmeta["name"], pmeta["uid"], att, HookDeadline.after(0.6))
        assert err.value.code == "E_MULTUS_NOT_ATTACHED"
        node.runtime.stop_pod_sandbox("sb-mx-4")
        node.runtime.remove_pod_sandbox("sb-mx-4")
    node.services.preparation.unprepare(claim["metadata"]["uid"])
    assert shadows(node.cluster) == []


@pytest.mark.adversarial
def test_a_shadow_edited_before_the_container_is_refused_even_when_put_back(
    node: LabNode, device_class: str
) -> None:
    """Someone who may write NetworkAttachmentDefinitions in the Pod's namespace points the
    shadow at another master before ADD, and puts it back afterwards: Multus ran the edit,
    so the gate refuses the container both times (the configuration, then the generation
    the edit left), and the release, with the frozen configuration back, is clean."""
    (claim,), pod = claimed_pod(node, device_class)
    pmeta = pod["metadata"]
    prepare(node, claim)
    (shadow,) = shadows(node.cluster)
    name, frozen = shadow["metadata"]["name"], shadow["spec"]["config"]
    edited = json.dumps({**json.loads(frozen), "master": "stolen0"})
    node.cluster.patch(NADS, name, {"spec": {"config": edited}}, "default")
    with scratch_netns("dmmx5") as sandbox:
        sb = LabPod("sb-mx-5", pmeta["uid"], pmeta["name"], "default", netns_path(sandbox))
        node.runtime.run_pod_sandbox(sb)
        multus_attached(node.cluster, pod, name, "net1")
        for _ in ("edited", "put back"):
            with pytest.raises(Refusal) as err:
                node.services.attachments.gate("default", pmeta["name"], pmeta["uid"], "sb-mx-5")
            assert err.value.code == "E_MULTUS_SHADOW_CONFLICT" and not err.value.retryable
            node.cluster.patch(NADS, name, {"spec": {"config": frozen}}, "default")
        assert "generation 3" in err.value.message
        node.runtime.stop_pod_sandbox("sb-mx-5")
        node.runtime.remove_pod_sandbox("sb-mx-5")
    node.services.preparation.unprepare(claim["metadata"]["uid"])
    (prep,) = node.services.journal.preparations(claim["metadata"]["uid"])
    assert prep.state is PreparationState.RELEASED
    assert shadows(node.cluster) == []


@pytest.mark.adversarial
def test_a_shadow_being_deleted_is_refused_at_the_gate(node: LabNode, device_class: str) -> None:
    """The shadow deleted by someone (its finalizer keeps it): the container is refused
    with E_MULTUS_SHADOW_DELETING though Multus reports the interface; the release ends it."""
    (claim,), pod = claimed_pod(node, device_class)
    pmeta = pod["metadata"]
    prepare(node, claim)
    (shadow,) = shadows(node.cluster)
    name = shadow["metadata"]["name"]
    with scratch_netns("dmmx6") as sandbox:
        sb = LabPod("sb-mx-6", pmeta["uid"], pmeta["name"], "default", netns_path(sandbox))
        node.runtime.run_pod_sandbox(sb)
        multus_attached(node.cluster, pod, name, "net1")
        node.cluster.delete(NADS, name, "default")
        with pytest.raises(Refusal) as err:
            node.services.attachments.gate("default", pmeta["name"], pmeta["uid"], "sb-mx-6")
        assert err.value.code == "E_MULTUS_SHADOW_DELETING" and not err.value.retryable
        node.runtime.stop_pod_sandbox("sb-mx-6")
        node.runtime.remove_pod_sandbox("sb-mx-6")
    node.services.preparation.unprepare(claim["metadata"]["uid"])
    assert shadows(node.cluster) == []
