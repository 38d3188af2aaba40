"""What thick Multus (``multus-daemon`` + ``multus-shim``, v4.3.0) does with a Pod the driver
patched just before its sandbox, on the upstream lab (design §6.8 "What Multus would need").

Thick mode's daemon answers ADD from its informer's copy of the Pod. The seed predicts a
stale cache: a selection the node agent wrote in NodePrepare is not seen when the Pod's
watch event has not reached the daemon yet. On an idle lab the event almost always wins the
race, so the module puts :class:`~dmn.lab.upstream.watch_gate.WatchGate` between the daemon
and the API server and holds the daemon's Pod watch across the driver's prepare: the cache
is stale in every run, not by chance.

* With the watch held, a Pod of the automatic mode gets its shadow and selection in the API
  (the agent's prepare) while the daemon's ADD attaches only the default network; the
  driver's container gate refuses the container with ``E_MULTUS_NOT_ATTACHED``, so the Pod
  stays Pending instead of running without its network; after the held events reach the
  daemon nothing changes (kubelet does not run ADD again for a sandbox that exists);
  deleting the Pod leaves no shadow.
* The control: a Pod whose selection reached the daemon before its sandbox gets ``net1``.
* A managed NetworkAttachmentDefinition (the driver's ``binding`` annotation recording the
  SHA-256 of its config, a finalizer) edited to another range is run as edited; once it is
  being deleted, a Pod selecting it is attached all the same: Multus reads neither.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
from collections.abc import Iterator
from typing import Any

import pytest

from dmn.agent.coordinator.multus_plan import BINDING_ANNOTATION
from dmn.api.cluster import Cluster, NotFound
from dmn.api.cluster import resources as r
from dmn.api.multus.selections import NETWORKS_ANNOTATION
from dmn.lab.pod_demo import NAMESPACE
from dmn.lab.upstream.configs import NODE_IP
from dmn.lab.upstream.demo import pod_phase
from dmn.lab.upstream.driver import LAB_LINKS
from dmn.lab.upstream.multus import DaemonApi, MultusInstall, reservations
from dmn.lab.upstream.multus_configs import network_attachment_definition, network_status
from dmn.lab.upstream.watch_gate import WatchGate
from tests.e2e import lab_pods
from tests.e2e.conftest import Session
from tests.e2e.lab_pods import WAIT
from tests.e2e.multus_auto import NADS, auto_pod, automatic_mode, shadows
from tests.waiting import wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

SCHEDULING_GATE = "e2e.dra-multi-network/hold"
CONTROL_NAD = "e2e-thick-control"
CONTROL_RANGE = "10.73.0.0/24"
MANAGED_NAD = "e2e-thick-managed"
MANAGED_RANGE, EDITED_RANGE = "10.74.0.0/24", "10.75.0.0/24"
HELD = "e2e.dra-multi-network/held"  # a finalizer that keeps the deleted NAD readable


@pytest.fixture(scope="module")
def gate(upstream_session: Session) -> Iterator[WatchGate]:
    lab = upstream_session.lab
    pki = lab.layout.pki
    port = int(lab.info()["ports"]["apiserver"])  # type: ignore[index]
    proxy = WatchGate((NODE_IP, port), pki / "ca.crt", pki / "apiserver.crt", pki / "apiserver.key")
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.close()


@pytest.fixture(scope="module")
def thick(upstream_session: Session, gate: WatchGate) -> Iterator[MultusInstall]:
    """Thick Multus in the session's lab, its daemon reaching the API server through the
    gate; proven to see Pod events through it before any test."""
    lab = upstream_session.lab
    install = lab.enable_multus(
        "thick", DaemonApi("127.0.0.1", gate.port, lab.layout.pki / "ca.crt")
    )
    try:
        yield install
    finally:
        lab.disable_multus()


@pytest.fixture(scope="module")
def admin(upstream_session: Session) -> Iterator[Cluster]:
    client = upstream_session.lab.admin()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(scope="module")
def auto(thick: MultusInstall, admin: Cluster) -> Iterator[str]:
    with automatic_mode(admin, thick) as device_class:
        yield device_class


@pytest.fixture
def pods(admin: Cluster) -> Iterator[list[str]]:
    created: list[str] = []
    try:
        yield created
    finally:
        lab_pods.remove(admin, *created)


def _gated(pod: dict[str, Any]) -> dict[str, Any]:
    pod["spec"]["schedulingGates"] = [{"name": SCHEDULING_GATE}]
    return pod


def _ungate(admin: Cluster, name: str) -> None:
    admin.patch(
        r.PODS,
        name,
        [{"op": "remove", "path": "/spec/schedulingGates"}],
        NAMESPACE,
        patch_type="json",
    )


def _sent_to_daemon(gate: WatchGate, marker: str, what: str) -> None:
    wait_for(
        lambda: gate.delivered("pods", marker.encode()),
        timeout=WAIT,
        interval=0.2,
        what=f"{what} relayed to the daemon (watches seen: {[w[0] for w in gate.watches]})",
    )


def _interfaces(admin: Cluster, name: str) -> list[str]:
    return [str(e.get("interface")) for e in network_status(admin.get(r.PODS, name, NAMESPACE))]


def test_a_pod_patched_while_the_daemons_watch_lags_is_held_not_run_without_its_network(
    auto: str, gate: WatchGate, admin: Cluster, pods: list[str]
) -> None:
    name = "thick-lag"
    admin.create(r.PODS, _gated(auto_pod(name)), NAMESPACE)
    pods.append(name)
    _sent_to_daemon(gate, name, "the Pod's creation")
    gate.hold("pods")
    try:
        _ungate(admin, name)
        uid = lab_pods.uid(admin, name)
        (shadow,) = wait_for(
            lambda: shadows(admin, uid), timeout=WAIT, interval=0.5, what="the shadow"
        )
        shadow_name = shadow["metadata"]["name"]
        annotations = admin.get(r.PODS, name, NAMESPACE)["metadata"]["annotations"]
        assert shadow_name in annotations[NETWORKS_ANNOTATION]  # the agent's patch landed
        reported = wait_for(
            lambda: _interfaces(admin, name), timeout=WAIT, interval=0.5, what="Multus' report"
        )
        assert "net1" not in reported, reported  # ADD used the cached, pre-patch Pod
        refused = wait_for(
            lambda: [
                e
                for e in lab_pods.events(admin, name)
                if "E_MULTUS_NOT_ATTACHED" in str(e.get("message") or "")
            ],
            timeout=WAIT,
            interval=0.5,
            what="the container refused with E_MULTUS_NOT_ATTACHED",
        )
        assert refused
        assert pod_phase(admin, name) == "Pending"
    finally:
        gate.release("pods")
    _sent_to_daemon(gate, shadow_name, "the held selection patch")
    assert "net1" not in _interfaces(admin, name)
    assert pod_phase(admin, name) == "Pending"
    lab_pods.remove(admin, name)
    pods.clear()
    wait_for(lambda: not shadows(admin, uid), timeout=WAIT, interval=0.5, what="no shadow left")


def test_a_selection_the_daemon_saw_before_the_sandbox_is_attached(
    thick: MultusInstall, gate: WatchGate, admin: Cluster, pods: list[str]
) -> None:
    config = {
        "cniVersion": "1.0.0",
        "name": CONTROL_NAD,
        "type": "macvlan",
        "master": LAB_LINKS[0],
        "mode": "bridge",
        "ipam": thick.ipam(CONTROL_RANGE),
    }
    admin.apply(network_attachment_definition(CONTROL_NAD, NAMESPACE, config))
    try:
        name = "thick-fresh"
        pod = _gated(auto_pod(name, templates=()))
        admin.create(r.PODS, pod, NAMESPACE)
        pods.append(name)
        selection = json.dumps([{"name": CONTROL_NAD, "interface": "net1"}])
        admin.patch(
            r.PODS, name, {"metadata": {"annotations": {NETWORKS_ANNOTATION: selection}}}, NAMESPACE
        )
        _sent_to_daemon(gate, CONTROL_NAD, "the Pod's selection")
        _ungate(admin, name)
        lab_pods.wait_running(admin, name)
        assert "net1" in _interfaces(admin, name)
        lab_pods.remove(admin, name)
        pods.clear()
    finally:
        admin.delete(NADS, CONTROL_NAD, NAMESPACE)


def _macvlan(thick: MultusInstall, name: str, ip_range: str) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": name,
        "type": "macvlan",
        "master": LAB_LINKS[0],
        "mode": "bridge",
        "ipam": thick.ipam(ip_range),
    }


def _selecting(admin: Cluster, gate: WatchGate, pods: list[str], name: str, nad: str) -> str:
    """A claim-less Pod selecting ``nad`` as ``net1``, its selection seen by the daemon
    before its sandbox; Running; the address Multus reports for ``net1``."""
    selection = json.dumps([{"name": nad, "interface": "net1"}])
    admin.create(r.PODS, _gated(auto_pod(name, templates=())), NAMESPACE)
    pods.append(name)
    admin.patch(
        r.PODS, name, {"metadata": {"annotations": {NETWORKS_ANNOTATION: selection}}}, NAMESPACE
    )
    _sent_to_daemon(gate, nad, f"{name}'s selection")
    _ungate(admin, name)
    lab_pods.wait_running(admin, name)
    status = network_status(admin.get(r.PODS, name, NAMESPACE))
    (entry,) = [e for e in status if e.get("interface") == "net1"]
    return str((entry.get("ips") or [""])[0])


def _nad_sent_to_daemon(gate: WatchGate, nad: dict[str, Any], what: str) -> None:
    """Wait until the watch event of this version of ``nad`` reached the daemon (a CRD's
    watch is JSON: the version is in it as written)."""
    version = nad["metadata"]["resourceVersion"]
    marker = f'"resourceVersion":"{version}"'.encode()
    wait_for(
        lambda: gate.delivered("network-attachment-definitions", marker),
        timeout=WAIT,
        interval=0.2,
        what=f"{what} relayed to the daemon",
    )


def test_an_edited_or_terminating_managed_nad_is_run_as_it_is(
    thick: MultusInstall, gate: WatchGate, admin: Cluster, pods: list[str]
) -> None:
    config = json.dumps(_macvlan(thick, MANAGED_NAD, MANAGED_RANGE))
    binding = {"configSHA256": hashlib.sha256(config.encode()).hexdigest()}
    doc = network_attachment_definition(
        MANAGED_NAD, NAMESPACE, config, {BINDING_ANNOTATION: json.dumps(binding)}
    )
    doc["metadata"]["finalizers"] = [HELD]
    admin.create(NADS, doc, NAMESPACE)
    try:
        edited = json.dumps(_macvlan(thick, MANAGED_NAD, EDITED_RANGE))
        patched = admin.patch(NADS, MANAGED_NAD, {"spec": {"config": edited}}, NAMESPACE)
        _nad_sent_to_daemon(gate, patched, "the edit")
        address = _selecting(admin, gate, pods, "thick-edited", MANAGED_NAD)
        assert ipaddress.ip_address(address) in ipaddress.ip_network(EDITED_RANGE), address
        admin.delete(NADS, MANAGED_NAD, NAMESPACE)
        deleting = admin.get(NADS, MANAGED_NAD, NAMESPACE)
        assert deleting["metadata"].get("deletionTimestamp"), deleting["metadata"]
        _nad_sent_to_daemon(gate, deleting, "the deletion")
        assert _selecting(admin, gate, pods, "thick-terminating", MANAGED_NAD)
        lab_pods.remove(admin, *pods)
        pods.clear()
        for name in ("thick-edited", "thick-terminating"):
            assert not reservations(admin, f"{NAMESPACE}/{name}"), name
    finally:
        lab_pods.remove(admin, *pods)
        pods.clear()
        with contextlib.suppress(NotFound):
            admin.patch(NADS, MANAGED_NAD, {"metadata": {"finalizers": None}}, NAMESPACE)
        with contextlib.suppress(NotFound):
            admin.delete(NADS, MANAGED_NAD, NAMESPACE)
