"""Our CRDs, controller and admission webhook against the real kube-apiserver v1.37.2.

A control-plane-only upstream lab (etcd, kube-apiserver with RBAC+Node authorization and
the compatibility-groups gate, our controller and webhook registered as a real
ValidatingWebhookConfiguration) for this module; `dmn lab down` at the end and the host
compared with before.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
from collections.abc import Callable

import pytest

from dmn.api.cluster import ApiFailure, Cluster, connect
from dmn.api.cluster import resources as r
from dmn.api.ipam.allocator import AddressRequest
from dmn.api.ipam.client import Allocation, AllocationClient, Owner
from dmn.lab import manifests
from dmn.lab.demo import NEGATIVE, TOPOLOGIES, wait_settled
from dmn.lab.node import HOST_DEVICE_TOPOLOGY
from dmn.lab.upstream import build
from tests.e2e.conftest import Session, host_snapshot
from tests.ipam import arbiter_checks
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
