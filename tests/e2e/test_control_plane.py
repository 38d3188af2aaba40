"""Our CRDs, controller and admission webhook against the real kube-apiserver v1.37.2.

A control-plane-only upstream lab (etcd, kube-apiserver with RBAC+Node authorization and
the compatibility-groups gate, our controller and webhook registered as a real
ValidatingWebhookConfiguration) for this module; `dmn lab down` at the end and the host
compared with before. The API semantics Multus automatic mode relies on are checked on the
same lab (the checks the lab API server passes, ``tests/apiserver/nad_semantics.py``, so a
difference is found where it would matter); they had a control-plane lab of their own
(~16 s of lab up and down).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator

import pytest

from dmn import NRI_PLUGIN_NAME
from dmn.api.cluster import AlreadyExists, ApiFailure, Cluster, connect
from dmn.api.cluster import resources as r
from dmn.api.ipam.allocator import AddressRequest
from dmn.api.ipam.client import Allocation, AllocationClient, Owner
from dmn.api.node_capability import LABEL_PREFIX
from dmn.controller.webhook.pods import POD_KEY
from dmn.lab import manifests
from dmn.lab.demo import NEGATIVE, TOPOLOGIES, wait_settled
from dmn.lab.node import HOST_DEVICE_TOPOLOGY
from dmn.lab.upstream import build
from dmn.lab.upstream.configs import DRIVER_NAMESPACE
from dmn.lab.upstream.driver import NODE_SA
from tests.apiserver import nad_semantics as sem
from tests.e2e import installed_driver
from tests.e2e.conftest import Session, host_snapshot
from tests.fixtures.multus import nad_crd
from tests.ipam import arbiter_checks
from tests.slices import policy_view_checks
from tests.waiting import wait_for

pytestmark = [pytest.mark.e2e]
WAIT = 120.0
IPAM_POOL = {
    "apiVersion": "networking.dra-multi-network.schseba.github.io/v1alpha1",
    "kind": "IPPool",
    "metadata": {"name": "e2e-ipam"},
    "spec": {
        "subnets": [
            {
                "cidr": "10.99.0.0/24",
                "gateway": "10.99.0.1",
                "ranges": [{"start": "10.99.0.10", "end": "10.99.0.199"}],
            }
        ]
    },
}


@pytest.fixture(scope="module")
def classes(control_plane: Session) -> dict[str, str]:
    """Every example topology plus the lab host-device one; name → DeviceClass."""
    admin = control_plane.lab.admin()
    try:
        docs = manifests.load(TOPOLOGIES)
        for doc in docs:
            admin.apply(doc.doc)
        admin.apply(HOST_DEVICE_TOPOLOGY)
        names = [d.name for d in docs if d.kind == "NetworkTopology"] + ["lab-host-device"]
        results = wait_settled(admin, names, WAIT)
        assert all(t.ready == "True" for t in results), results
        return {t.name: t.device_classes[0] for t in results}
    finally:
        admin.close()


def test_api_server_reports_the_pinned_version(control_plane: Session) -> None:
    binary = build.bin_dir("kubernetes") / "kube-apiserver"
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "Kubernetes v1.37.2"
    admin = control_plane.lab.admin()
    try:
        assert admin.request("GET", "/version")["gitVersion"] == "v1.37.2"
    finally:
        admin.close()


def test_every_example_compiles_to_ready_and_its_classes_are_accepted(
    control_plane: Session, classes: dict[str, str]
) -> None:
    admin = control_plane.lab.admin()
    try:
        stored = {c["metadata"]["name"] for c in admin.list(r.DEVICE_CLASSES).items}
    finally:
        admin.close()
    assert set(classes.values()) <= stored
    assert {"shared-macvlan", "shared-ipvlan", "host-device", "vfio", "lab-host-device"} <= set(
        classes
    )


def test_webhook_denies_a_bad_topology(control_plane: Session, classes: dict[str, str]) -> None:
    admin = control_plane.lab.admin()
    try:
        with pytest.raises(ApiFailure) as denied:
            admin.apply(manifests.load(NEGATIVE)[0].doc)
    finally:
        admin.close()
    assert "E_EFFECT_DENIED" in str(denied.value)
    assert "admission webhook" in str(denied.value)


def test_webhook_denies_a_tenant_writing_a_revision_or_a_generated_class(
    control_plane: Session, classes: dict[str, str]
) -> None:
    """The tenant has RBAC for both; the webhook (identity from the real request's
    userInfo) still refuses."""
    lab = control_plane.lab
    admin = lab.admin()
    tenant = Cluster(connect(kubeconfig=str(lab.admin_kubeconfig), impersonate_user="e2e-tenant"))
    try:
        admin.apply(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": "e2e-tenant"},
                "rules": [
                    {
                        "apiGroups": [
                            "resource.k8s.io",
                            "networking.dra-multi-network.schseba.github.io",
                        ],
                        "resources": ["deviceclasses", "networktopologyrevisions"],
                        "verbs": ["*"],
                    }
                ],
            }
        )
        admin.apply(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": "e2e-tenant"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": "e2e-tenant",
                },
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "e2e-tenant"}
                ],
            }
        )
        generated = classes["shared-macvlan"]
        with pytest.raises(ApiFailure) as cls:
            tenant.delete(r.DEVICE_CLASSES, generated)
        assert "written only by the controller" in str(cls.value)
        assert admin.get(r.DEVICE_CLASSES, generated)  # still there
        revision = admin.list(r.NETWORK_TOPOLOGY_REVISIONS).items[0]["metadata"]["name"]
        with pytest.raises(ApiFailure) as rev:
            tenant.delete(r.NETWORK_TOPOLOGY_REVISIONS, revision)
        assert "admission webhook" in str(rev.value)
        assert admin.get(r.NETWORK_TOPOLOGY_REVISIONS, revision)
    finally:
        tenant.close()
        admin.close()


def test_a_second_up_is_refused_with_a_reason(control_plane: Session) -> None:
    state = str(control_plane.lab.layout.root.parent)
    again = subprocess.run(
        [sys.executable, "-m", "dmn", "lab", "up", "--backend", "upstream", "--state-dir", state],
        capture_output=True,
        text=True,
    )
    assert again.returncode == 1
    assert "error[E_LAB_RUNNING]" in again.stderr


@pytest.mark.parametrize("check", arbiter_checks.ALL, ids=lambda c: c.__name__)
def test_ipam_server_behaviour_the_lab_mirrors(
    control_plane: Session, check: Callable[[Cluster, str], None]
) -> None:
    """tests/ipam/arbiter_checks.py on the real kube-apiserver (the lab runs the same)."""
    admin = control_plane.lab.admin()
    try:
        check(admin, "e2e")
    finally:
        admin.close()


@pytest.mark.parametrize("check", policy_view_checks.ALL, ids=lambda c: c.__name__)
def test_policy_view_server_behaviour_the_lab_mirrors(
    control_plane: Session, check: Callable[[Cluster, str], None]
) -> None:
    """tests/slices/policy_view_checks.py on the real kube-apiserver (the lab runs the same):
    metadata-only lists and watches of policies, a failed JSON-patch test refused."""
    admin = control_plane.lab.admin()
    try:
        check(admin, "e2e")
    finally:
        admin.close()


def test_ipam_concurrent_creates_of_one_allocation_have_one_winner(control_plane: Session) -> None:
    arbiter_checks.one_winner(control_plane.lab.admin, "e2e")


def _claim(name: str) -> dict[str, object]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "x"}}]}},
    }


def test_ipam_concurrent_requesters_get_distinct_addresses_and_counted(
    control_plane: Session,
) -> None:
    """Requesters on threads allocate from one pool through the real API server; the
    controller (chart RBAC) counts them in the pool's status and, once their claims are
    deleted, collects them. The claims exist while they allocate: the controller collects an
    allocation whose claim is gone at once, and an address it freed could go to the next
    requester (a landing run saw 7 distinct addresses for 8 requesters that way)."""
    admin = control_plane.lab.admin()
    names = [f"c{i}" for i in range(8)]
    try:
        admin.create(r.IP_POOLS, IPAM_POOL)
        uids = {n: admin.create(r.RESOURCE_CLAIMS, _claim(n), "default")["metadata"]["uid"]
                for n in names}  # fmt: skip
        results: list[object] = []
        lock = threading.Lock()

        def run(name: str) -> None:
            owner = Owner("default", name, uids[name], "n", "op")
            with control_plane.lab.admin() as own:
                got = AllocationClient(own).allocate("e2e-ipam", AddressRequest(4), owner)
            with lock:
                results.append(got)

        threads = [threading.Thread(target=run, args=(n,)) for n in names]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        addresses = {got.address for got in results if isinstance(got, Allocation)}
        assert len(addresses) == 8, results

        def counted() -> dict[str, object] | None:
            status = admin.get(r.IP_POOLS, "e2e-ipam").get("status") or {}
            return status if status.get("allocated") == 8 else None

        status = wait_for(counted, timeout=WAIT, what="pool status")
        assert (status["size"], status["free"]) == (190, 182), status
        for name in names:
            admin.delete(r.RESOURCE_CLAIMS, name, "default")

        def collected() -> dict[str, object] | None:
            status = admin.get(r.IP_POOLS, "e2e-ipam").get("status") or {}
            return status if status.get("allocated") == 0 else None

        wait_for(collected, timeout=WAIT, what="allocations of deleted claims collected")
        left = [a for a in admin.list(r.IP_ALLOCATIONS).items if a["spec"]["pool"] == "e2e-ipam"]
        assert left == [], left
    finally:
        for name in names:
            with contextlib.suppress(ApiFailure):
                admin.delete(r.RESOURCE_CLAIMS, name, "default")
        admin.close()


# --- Pod admission: the NRI required-plugins annotation and the toleration policy ---------

TOLERATE = "tolerate-missing-nri-plugins.noderesource.dev"  # the chart's default key
POD_NS = "e2e-pods"


def _pod(name: str, template: str | None = None, **extra: object) -> dict[str, object]:
    spec: dict[str, object] = {
        "automountServiceAccountToken": False,
        "containers": [{"name": "app", "image": "busybox"}],
    }
    if template is not None:
        spec["resourceClaims"] = [{"name": "net", "resourceClaimTemplateName": template}]
    meta: dict[str, object] = {"name": name, "namespace": extra.pop("namespace", POD_NS)}
    if "annotations" in extra:
        meta["annotations"] = extra.pop("annotations")
    spec.update(extra)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _dry_create(admin: Cluster, pod: dict[str, object]) -> dict[str, object]:
    """The Pod as the real API server would store it (every admission step ran)."""
    namespace = str(pod["metadata"]["namespace"])  # type: ignore[index]
    return admin.create(r.PODS, pod, namespace, dry_run=True)


def _annotations(pod: dict[str, object]) -> dict[str, str]:
    return dict(pod["metadata"].get("annotations") or {})  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def pod_templates(control_plane: Session, classes: dict[str, str]) -> dict[str, str]:
    """A namespace with ServiceAccounts (this lab runs no controller-manager to make them),
    a ResourceClaimTemplate of one of our generated classes and one of another driver's
    DeviceClass; kind -> template name."""
    admin = control_plane.lab.admin()
    try:
        with contextlib.suppress(AlreadyExists):
            ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": POD_NS}}
            admin.create(r.NAMESPACES, ns)
        for namespace, name in ((POD_NS, "default"), (DRIVER_NAMESPACE, NODE_SA)):
            sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}
            with contextlib.suppress(AlreadyExists):
                admin.create(r.SERVICE_ACCOUNTS, sa, namespace)
        other_class = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "e2e-other-driver"},
            "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}]},
        }
        admin.apply(other_class)
        out = {}
        for kind, device_class in (
            ("ours", classes["shared-macvlan"]),
            ("other", "e2e-other-driver"),
        ):
            template = {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": f"e2e-{kind}", "namespace": POD_NS},
                "spec": {
                    "spec": {
                        "devices": {
                            "requests": [
                                {"name": "n", "exactly": {"deviceClassName": device_class}}
                            ]
                        }
                    }
                },
            }
            admin.apply(template)
            out[kind] = f"e2e-{kind}"
        return out
    finally:
        admin.close()


def test_a_pod_with_a_claim_of_ours_gets_our_nri_plugin_required(
    control_plane: Session, pod_templates: dict[str, str]
) -> None:
    """The real API server calls our mutating webhook (matchConditions, JSONPatch) and then
    the validating one; other names already in the annotation are kept."""
    admin = control_plane.lab.admin()
    try:
        stored = _dry_create(admin, _pod("ours", pod_templates["ours"]))
        assert json.loads(_annotations(stored)[POD_KEY]) == [NRI_PLUGIN_NAME]
        merged = _dry_create(
            admin, _pod("ours2", pod_templates["ours"], annotations={POD_KEY: '["other"]'})
        )
        assert json.loads(_annotations(merged)[POD_KEY]) == ["other", NRI_PLUGIN_NAME]
    finally:
        admin.close()


def test_a_pod_of_ours_requires_a_capable_node(
    control_plane: Session, pod_templates: dict[str, str]
) -> None:
    """The mutating webhook's node affinity passes the real API server's Pod validation and
    is stored; binding by spec.nodeName to a Node that is not labelled capable (here: none,
    this lab has no node) is refused by the validating webhook."""
    admin = control_plane.lab.admin()
    try:
        stored = _dry_create(admin, _pod("capable", pod_templates["ours"]))
        required = stored["spec"]["affinity"]["nodeAffinity"]  # type: ignore[index]
        (term,) = required["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        (expression,) = term["matchExpressions"]
        assert expression["key"].startswith(LABEL_PREFIX + "/"), expression
        assert expression["operator"] == "Exists"
        with pytest.raises(ApiFailure) as bypass:
            _dry_create(admin, _pod("bound", pod_templates["ours"], nodeName="nowhere"))
        assert "E_POD_NODE_BYPASS" in str(bypass.value)
    finally:
        admin.close()


def test_pods_that_are_not_ours_are_admitted_unchanged(
    control_plane: Session, pod_templates: dict[str, str]
) -> None:
    """No claims, another driver's claim, and a template that does not exist yet (admitted
    with a warning the client library does not surface; the node agent's gate remains)."""
    admin = control_plane.lab.admin()
    try:
        for pod in (_pod("plain"), _pod("other", pod_templates["other"]), _pod("later", "later")):
            assert POD_KEY not in _annotations(_dry_create(admin, pod))
    finally:
        admin.close()


def test_a_pod_of_ours_may_not_drop_our_plugin(
    control_plane: Session, pod_templates: dict[str, str]
) -> None:
    """Created for real (it stays Pending: this lab has no node), then an update that
    removes our plugin from the annotation is refused by the validating webhook."""
    admin = control_plane.lab.admin()
    try:
        admin.create(r.PODS, _pod("keep", pod_templates["ours"]), POD_NS)
        patch = {"metadata": {"annotations": {POD_KEY: '["other"]'}}}
        with pytest.raises(ApiFailure) as removed:
            admin.patch(r.PODS, "keep", patch, POD_NS)
        assert "E_POD_NRI_REQUIREMENT_REMOVED" in str(removed.value)
        pod = admin.get(r.PODS, "keep", POD_NS)
        assert json.loads(_annotations(pod)[POD_KEY]) == [NRI_PLUGIN_NAME]
    finally:
        with contextlib.suppress(ApiFailure):
            admin.delete(r.PODS, "keep", POD_NS)
        admin.close()


def _tenant_toleration_denied(admin: Cluster) -> None:
    """The chart's ValidatingAdmissionPolicy refuses the tolerate key on a tenant's Pod (also
    as <key>/pod) and admits it on the node agent's (release namespace, agent's SA)."""
    for key in (TOLERATE, f"{TOLERATE}/pod"):
        tenant = _pod("sneaky", annotations={key: "true"})

        def denied(pod: dict[str, object] = tenant) -> str | None:
            try:
                _dry_create(admin, pod)
            except ApiFailure as exc:
                return str(exc)
            return None  # the policy may not be in the API server's cache yet

        message = wait_for(denied, timeout=WAIT, interval=0.5, what="the policy's denial")
        assert "dra-multi-network-nri-toleration" in message or "node agent" in message, message
    agent = _pod(
        "agent",
        annotations={TOLERATE: "true"},
        namespace=DRIVER_NAMESPACE,
        serviceAccountName=NODE_SA,
    )
    assert _annotations(_dry_create(admin, agent))[TOLERATE] == "true"


def test_only_the_node_agent_may_tolerate_a_missing_plugin(
    control_plane: Session, pod_templates: dict[str, str]
) -> None:
    admin = control_plane.lab.admin()
    try:
        _tenant_toleration_denied(admin)
    finally:
        admin.close()


def test_with_the_controller_stopped_pods_are_not_blocked_and_the_policy_holds(
    control_plane: Session, pod_templates: dict[str, str]
) -> None:
    """failurePolicy Ignore: a Pod without claims (never sent) and one of another driver are
    admitted while our controller is down; so is a Pod of ours, unchanged (the residual risk
    docs/operator-guide.md states). The toleration policy needs no controller."""
    lab = control_plane.lab
    admin = lab.admin()
    stopped = installed_driver.stop_controller(lab, admin)
    try:
        for pod in (_pod("plain"), _pod("other", pod_templates["other"])):
            assert POD_KEY not in _annotations(_dry_create(admin, pod))
        assert POD_KEY not in _annotations(_dry_create(admin, _pod("ours", pod_templates["ours"])))
        _tenant_toleration_denied(admin)
    finally:
        installed_driver.start_controller(lab, admin, stopped)
        admin.close()


@pytest.fixture(scope="module")
def nad_admin(control_plane: Session) -> Iterator[Cluster]:
    """The lab with the NetworkAttachmentDefinition CRD served."""
    cluster = control_plane.lab.admin()
    try:
        with contextlib.suppress(AlreadyExists):
            cluster.create(r.CUSTOM_RESOURCE_DEFINITIONS, nad_crd())
        wait_for(
            lambda: cluster.list(sem.NADS, "default") is not None,
            timeout=60,
            what="the NetworkAttachmentDefinition CRD served",
            tolerate=(ApiFailure,),
        )
        yield cluster
    finally:
        cluster.close()


@pytest.mark.parametrize("check", sem.CHECKS, ids=lambda c: c.__name__)
def test_nad_semantics(nad_admin: Cluster, check: Callable[[Cluster, str, dict], None]) -> None:
    namespace = f"nad-{uuid.uuid4().hex[:8]}"
    nad_admin.create(r.NAMESPACES, {"metadata": {"name": namespace}})
    # no controller manager here: the default service account the Pod needs is ours to make
    nad_admin.create(r.SERVICE_ACCOUNTS, {"metadata": {"name": "default"}}, namespace)
    owner = nad_admin.create(r.PODS, sem.pod(namespace), namespace)
    check(nad_admin, namespace, owner)


def test_zz_kubeconfig_then_down_leaves_the_host_as_before(control_plane: Session) -> None:
    """Last in the module: `dmn lab kubeconfig`, then `dmn lab down`, then the host."""
    lab = control_plane.lab
    state = str(lab.layout.root.parent)
    shown = subprocess.run(
        [sys.executable, "-m", "dmn", "lab", "kubeconfig", "--state-dir", state],
        capture_output=True,
        text=True,
    )
    assert shown.stdout.strip() == str(lab.admin_kubeconfig)
    down = subprocess.run(
        [sys.executable, "-m", "dmn", "lab", "down", "--state-dir", state],
        capture_output=True,
        text=True,
    )
    assert down.returncode == 0, down.stderr
    assert not lab.layout.root.exists()
    assert not lab.running()
    assert host_snapshot() == control_plane.before
