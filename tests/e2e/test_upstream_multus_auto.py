"""Multus automatic mode on the upstream lab with real Multus (thin) and Whereabouts: the
node agent binds an administrator's template to the allocated device in a Pod-owned shadow
NetworkAttachmentDefinition and the Pod's selection; Multus runs the delegate and its IPAM
at sandbox creation (:mod:`tests.e2e.multus_auto` applies the class for the module).

* Two Pods with a claim and no networks annotation get ``net1`` from the macvlan delegate
  with Whereabouts addresses and ping each other; their deletion leaves no shadow, no
  finalizer and no reservation.
* A user's own unrelated selection (with a field Multus does not know) is kept byte for byte
  through prepare and through release (the Pod, Succeeded, keeps its annotations); a manual
  selection of the managed template is refused with its reason and changes nothing.
* Editing, then deleting, the template after prepare changes nothing for the running Pod;
  its deletion tears down with the frozen configuration: no Whereabouts reservation left.
* One Pod with the driver's own ``net1`` (host-cni, a whole link) and Multus' ``net2``.
* A host-device template through ``multus-cni`` hands the allocated link to the Pod, and it
  returns to the node when the Pod goes: up again (host-device's DEL hands it back down; the
  release sets the state recorded at prepare) and no device tainted unhealthy.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator

import pytest

from dmn.api.cluster import Cluster, NotFound
from dmn.api.cluster import resources as r
from dmn.api.multus.selections import NETWORKS_ANNOTATION, REGISTRY_ANNOTATION
from dmn.lab.pod_demo import NAMESPACE
from dmn.lab.upstream.cluster import UpstreamLab
from dmn.lab.upstream.demo import Kubectl, pod_phase
from dmn.lab.upstream.driver import LAB_LINKS
from dmn.lab.upstream.multus import MultusInstall, reservations
from tests.e2e import lab_pods
from tests.e2e.conftest import Session
from tests.e2e.lab_pods import WAIT
from tests.e2e.multus_auto import (
    NADS,
    TEMPLATE,
    auto_pod,
    automatic_mode,
    bound,
    host_links,
    lab_links_restored,
    macvlan_template,
    shadows,
    tainted_unhealthy,
    whole_links_for_multus,
)
from tests.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

USER_NAD = "e2e-auto-user"
DONE = "/tmp/done"  # the user's Pod exits once the test touched it
USER_SELECTION = '[{"name":"e2e-auto-user","interface":"usr0","x-dmn-test":{"kept":[1,2.50]}}]'


@pytest.fixture(scope="module")
def auto(multus_lab: MultusInstall, upstream_session: Session) -> Iterator[str]:
    admin = upstream_session.lab.admin()
    try:
        with automatic_mode(admin, multus_lab) as device_class:
            yield device_class
    finally:
        admin.close()


def _gone(admin: Cluster, *names: str) -> None:
    """The Pods removed: no shadow, no Whereabouts reservation of theirs."""
    lab_pods.remove(admin, *names)
    wait_for(lambda: not shadows(admin), timeout=WAIT, interval=0.5, what="no shadow left")
    for name in names:
        assert not reservations(admin, f"{NAMESPACE}/{name}"), name


def test_two_pods_get_net1_from_their_shadows_and_ping(
    auto: str, upstream_lab: UpstreamLab, admin: Cluster, pods: list[str]
) -> None:
    names = ("auto-a", "auto-b")
    for name in names:
        admin.create(r.PODS, auto_pod(name), NAMESPACE)
        pods.append(name)
    lab_pods.wait_running(admin, *names)
    got = {n: bound(admin, n, lab_pods.uid(admin, n)) for n in names}
    assert got["auto-a"].address and got["auto-a"].address != got["auto-b"].address
    config = json.loads(got["auto-a"].shadow["spec"]["config"])
    assert config["master"] in LAB_LINKS and config["name"] == TEMPLATE  # the CNI name kept
    kubectl = Kubectl(upstream_lab.admin_kubeconfig)
    target = got["auto-b"].address
    ping = kubectl.exec("auto-a", "ping", "-c", "2", "-W", "2", "-I", "net1", target)
    assert ping.returncode == 0, ping.stdout + ping.stderr
    _gone(admin, *names)
    pods.clear()


@pytest.fixture
def user_nad(auto: str, multus_lab: MultusInstall, admin: Cluster) -> Iterator[str]:
    doc = macvlan_template(multus_lab)
    doc["metadata"]["name"] = USER_NAD
    config = json.loads(doc["spec"]["config"])
    config.update(name=USER_NAD, master=LAB_LINKS[1], ipam=multus_lab.ipam("10.73.0.0/24"))
    doc["spec"]["config"] = json.dumps(config)
    admin.apply(doc)
    yield USER_NAD
    with contextlib.suppress(NotFound):
        admin.delete(NADS, USER_NAD, NAMESPACE)


def test_a_users_selection_survives_prepare_and_release_and_a_manual_one_is_refused(
    auto: str, user_nad: str, upstream_lab: UpstreamLab, admin: Cluster, pods: list[str]
) -> None:
    name = "auto-user"
    manifest = auto_pod(
        name,
        annotations={NETWORKS_ANNOTATION: USER_SELECTION},
        command=("sh", "-c", f"until [ -e {DONE} ]; do sleep 1; done"),
        restart="Never",
    )
    admin.create(r.PODS, manifest, NAMESPACE)
    pods.append(name)
    lab_pods.wait_running(admin, name)
    pod_uid = lab_pods.uid(admin, name)
    got = bound(admin, name, pod_uid, "net1")
    annotations = admin.get(r.PODS, name, NAMESPACE)["metadata"]["annotations"]
    assert annotations[NETWORKS_ANNOTATION].startswith(USER_SELECTION[:-1] + ",")
    # the container exits, the Pod Succeeds: kubelet releases the claim, the Pod stays
    done = Kubectl(upstream_lab.admin_kubeconfig).exec(name, "touch", DONE)
    assert done.returncode == 0, done.stdout + done.stderr
    wait_for(
        lambda: pod_phase(admin, name) == "Succeeded",
        timeout=WAIT,
        interval=0.5,
        what=f"{name} Succeeded",
    )

    def released() -> bool:
        meta = admin.get(r.PODS, name, NAMESPACE)["metadata"]
        return REGISTRY_ANNOTATION not in (meta.get("annotations") or {})

    wait_for(released, timeout=WAIT, interval=0.5, what="the claim released")
    annotations = admin.get(r.PODS, name, NAMESPACE)["metadata"]["annotations"]
    assert annotations[NETWORKS_ANNOTATION] == USER_SELECTION  # byte for byte
    wait_for(lambda: not shadows(admin, pod_uid), timeout=WAIT, interval=0.5, what="released")
    assert got.shadow["metadata"]["name"] not in annotations[NETWORKS_ANNOTATION]
    _gone(admin, name)
    pods.clear()

    manual = "auto-manual"
    admin.create(r.PODS, auto_pod(manual, annotations={NETWORKS_ANNOTATION: TEMPLATE}), NAMESPACE)
    pods.append(manual)

    def refused() -> bool:
        said = " ".join(str(e.get("message")) for e in lab_pods.events(admin, manual))
        return "E_MULTUS_MANUAL_SELECTION" in said

    wait_for(refused, timeout=WAIT, interval=1.0, what="the manual selection refused")
    assert pod_phase(admin, manual) == "Pending"
    assert shadows(admin) == []
    annotations = admin.get(r.PODS, manual, NAMESPACE)["metadata"]["annotations"]
    assert annotations[NETWORKS_ANNOTATION] == TEMPLATE and REGISTRY_ANNOTATION not in annotations
    _gone(admin, manual)
    pods.clear()


def test_the_template_edited_or_deleted_changes_nothing_of_a_running_pod(
    auto: str, multus_lab: MultusInstall, admin: Cluster, pods: list[str]
) -> None:
    name = "auto-frozen"
    admin.create(r.PODS, auto_pod(name), NAMESPACE)
    pods.append(name)
    lab_pods.wait_running(admin, name)
    pod_uid = lab_pods.uid(admin, name)
    got = bound(admin, name, pod_uid)
    assert reservations(admin, f"{NAMESPACE}/{name}")
    template = admin.get(NADS, TEMPLATE, NAMESPACE)
    edited = json.loads(template["spec"]["config"]) | {"mode": "private"}
    admin.patch(NADS, TEMPLATE, {"spec": {"config": json.dumps(edited)}}, NAMESPACE)
    admin.delete(NADS, TEMPLATE, NAMESPACE)
    try:
        (still,) = shadows(admin, pod_uid)
        assert still["spec"] == got.shadow["spec"]
        assert pod_phase(admin, name) == "Running"
        _gone(admin, name)  # torn down with the frozen configuration: no reservation left
        pods.clear()
    finally:
        admin.apply(macvlan_template(multus_lab))


def test_one_pod_has_the_drivers_own_net1_and_multus_net2(
    auto: str,
    classes: dict[str, str],
    upstream_lab: UpstreamLab,
    admin: Cluster,
    pods: list[str],
) -> None:
    name = "auto-mixed"
    admin.create(r.PODS, auto_pod(name, ("lab-host-device", "e2e-auto")), NAMESPACE)
    pods.append(name)
    lab_pods.wait_running(admin, name)
    bound(admin, name, lab_pods.uid(admin, name), "net2")  # net1 is the driver's own
    kubectl = Kubectl(upstream_lab.admin_kubeconfig)
    for ifname in ("net1", "net2"):
        shown = kubectl.exec(name, "ip", "link", "show", ifname)
        assert shown.returncode == 0, shown.stdout + shown.stderr
    _gone(admin, name)
    pods.clear()


def test_a_host_device_template_hands_the_allocated_link_over(
    auto: str, admin: Cluster, upstream_lab: UpstreamLab, pods: list[str]
) -> None:
    name = "auto-hostdev"
    try:
        with whole_links_for_multus(admin):
            admin.create(r.PODS, auto_pod(name, ("e2e-auto-hostdev",)), NAMESPACE)
            pods.append(name)
            lab_pods.wait_running(admin, name)
            pod_uid = lab_pods.uid(admin, name)
            (shadow,) = shadows(admin, pod_uid)
            link = json.loads(shadow["spec"]["config"])["device"]
            assert link in LAB_LINKS and link not in host_links()  # in the Pod now
            kubectl = Kubectl(upstream_lab.admin_kubeconfig)
            shown = kubectl.exec(name, "ip", "link", "show", "net1")
            assert shown.returncode == 0, shown.stdout + shown.stderr
            lab_pods.remove(admin, name)
            pods.clear()
            wait_for(lambda: not shadows(admin), timeout=WAIT, interval=0.5, what="no shadow")
            wait_for(lambda: link in host_links(), timeout=WAIT, interval=0.5, what="link back")
            # host-device's DEL handed it back down; the release set the recorded state again
            assert "UP" in host_links()[link]["flags"], host_links()[link]
            wait_for(
                lambda: not tainted_unhealthy(admin),
                timeout=WAIT,
                interval=0.5,
                what="no device of ours tainted unhealthy after the release",
            )
    finally:
        # also when the test failed: the Pod gone first (it may still hold the link), then
        # the links up again and untainted for the modules after this one
        lab_pods.remove(admin, *pods)
        pods.clear()
        lab_links_restored(admin)
