"""What thick Multus (v4.3.0 multus-daemon + multus-shim) does at ADD with a Pod patched
just before its sandbox, and with a tampered or terminating NetworkAttachmentDefinition.

Seed 001 asks Multus for two guarantees this driver's automatic mode relies on: ADD sees
the Pod as the driver last wrote it (the daemon answers from informer caches), and a
managed NAD that was edited after the driver froze it, or is being deleted, is refused.
This module records what the daemon does today, on the session's node lab with thick
Multus enabled for the module only (the daemon reaches the API server through a
:class:`~dmn.lab.upstream.watch_gate.WatchGate`, so a test can hold the daemon's Pod watch
events back — a deterministic stand-in for a late watch event):

* a Pod created with a scheduling gate (so it is cached, unscheduled, without selection),
  then patched with a ``k8s.v1.cni.cncf.io/networks`` selection and ungated while the
  daemon's Pod watch is held: it runs with its default network only — the daemon read its
  cached, pre-patch Pod (its log says so), and nothing attaches ``net1`` afterwards;
* the same sequence with the patch's watch event delivered before ungating: ``net1``;
* a NAD whose config was edited after a "freeze" (the SHA-256 of the first config in a
  ``binding`` annotation's ``configSHA256``, as the driver's shadows carry it) is used as
  edited, and a NAD with a finalizer
  and ``deletionTimestamp`` set is used as it is: Multus checks neither;
* the driver's automatic mode (:mod:`tests.e2e.multus_auto`'s class) with the daemon's Pod
  watch held from before scheduling: the agent's prepare creates the shadow and patches
  the selection, the daemon's ADD reads the cached Pod without it, and the agent's
  CreateContainer gate refuses the container with ``E_MULTUS_NOT_ATTACHED`` — the Pod
  never runs without its network; deleting it leaves no shadow.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dmn.agent.coordinator.multus_plan import BINDING_ANNOTATION
from dmn.api.cluster import Cluster, NotFound
from dmn.api.cluster import resources as r
from dmn.lab.pod_demo import NAMESPACE
from dmn.lab.upstream.cluster import UpstreamLab
from dmn.lab.upstream.configs import NODE_IP
from dmn.lab.upstream.demo import Kubectl
from dmn.lab.upstream.driver import LAB_LINKS
from dmn.lab.upstream.images import BUSYBOX_IMAGE
from dmn.lab.upstream.multus import DaemonApi, MultusInstall, reservations
from dmn.lab.upstream.multus_configs import (
    NETWORK_ATTACHMENT_DEFINITIONS,
    NETWORKS_ANNOTATION,
    PRIMARY_NETWORK,
    network_attachment_definition,
    network_status,
)
from dmn.lab.upstream.pki import LabCA
from dmn.lab.upstream.watch_gate import WatchGate
from tests.e2e import lab_pods
from tests.e2e.conftest import Session
from tests.e2e.lab_pods import WAIT
from tests.e2e.multus_auto import auto_pod, automatic_mode, shadows
from tests.waiting import wait_for

pytestmark = [pytest.mark.e2e]

NAD = "e2e-thick-macvlan"
MANAGED = "e2e-thick-managed"
RANGE = "10.75.0.0/24"
TAMPERED_RANGE = "10.76.0.0/24"
FINALIZER = "e2e.dmn.example/protection"
HOLD_GATE = "e2e.dmn.example/hold"
MARK = "e2e.dmn.example/mark"
NADS = NETWORK_ATTACHMENT_DEFINITIONS


@dataclass(frozen=True)
class Gated:
    """The module's proxy and how the daemon reaches it."""

    proxy: WatchGate
    api: DaemonApi


@pytest.fixture(scope="module")
def gated(upstream_session: Session) -> Iterator[Gated]:
    lab = upstream_session.lab
    pki = lab.layout.root / "multus-thick" / "gate-pki"
    pki.mkdir(parents=True, exist_ok=True)
    ca = LabCA(pki)
    cred = ca.issue("gate", "watch-gate", server_ips=("127.0.0.1",))
    port = int(lab.info()["ports"]["apiserver"])  # type: ignore[index]
    proxy = WatchGate((NODE_IP, port), lab.layout.pki / "ca.crt", cred.cert, cred.key)
    try:
        yield Gated(proxy, DaemonApi("127.0.0.1", proxy.start(), ca.ca_cert))
    finally:
        proxy.close()


@pytest.fixture(scope="module")
def gate(gated: Gated) -> WatchGate:
    return gated.proxy


@pytest.fixture(scope="module")
def thick(upstream_session: Session, gated: Gated) -> Iterator[MultusInstall]:
    """Thick Multus for this module, its daemon behind the proxy; thin is not in the path
    of this module's Pods."""
    lab = upstream_session.lab
    install = lab.enable_multus("thick", gated.api)
    _LOG[:] = [install.paths.logs / "multus-daemon.log"]
    admin = lab.admin()
    try:
        # the Pod watch relays events before any test relies on it (the first run saw the
        # first test's Pod not relayed for 120 s, then later ones at once)
        _cached(admin, gated.proxy, "thick-warmup")
        admin.delete(r.PODS, "thick-warmup", NAMESPACE, grace_period_seconds=0)
        yield install
    finally:
        gated.proxy.release("pods")
        with contextlib.suppress(NotFound):
            admin.delete(r.PODS, "thick-warmup", NAMESPACE, grace_period_seconds=0)
        admin.close()
        lab.disable_multus()


def _config(thick: MultusInstall, name: str, ip_range: str) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": name,
        "type": "macvlan",
        "master": LAB_LINKS[0],
        "mode": "bridge",
        "ipam": thick.ipam(ip_range),
    }


@pytest.fixture(scope="module")
def nad(thick: MultusInstall, upstream_session: Session) -> Iterator[str]:
    admin = upstream_session.lab.admin()
    try:
        admin.apply(network_attachment_definition(NAD, NAMESPACE, _config(thick, NAD, RANGE)))
        yield NAD
        with contextlib.suppress(NotFound):
            admin.delete(NADS, NAD, NAMESPACE)
    finally:
        admin.close()


def _gated_pod(name: str) -> dict[str, Any]:
    """A busybox Pod without claims or selection, held back from scheduling."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "schedulingGates": [{"name": HOLD_GATE}],
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sleep", "3600"],
                }
            ],
        },
    }


def _cached(admin: Cluster, gate: WatchGate, name: str) -> None:
    """Create the gated Pod and wait until the daemon has been sent its creation."""
    admin.create(r.PODS, _gated_pod(name), NAMESPACE)
    _sent(gate, name, f"the daemon sent {name}'s creation")


def _sent(gate: WatchGate, marker: str, what: str, resource: str = "pods") -> None:
    """Wait until the daemon was sent ``marker`` on a watch of ``resource``; on timeout
    the message has the watches the proxy saw and the end of the daemon's log."""
    try:
        wait_for(lambda: gate.delivered(resource, marker.encode()), timeout=WAIT, interval=0.1)
    except AssertionError:
        log = _LOG[0].read_text(errors="replace").splitlines()[-40:] if _LOG else []
        raise AssertionError(f"{what}: not seen; watches {gate.watches}; log {log}") from None


_LOG: list[Path] = []


def _select(admin: Cluster, name: str, network: str) -> str:
    """Patch the selection (as the driver's prepare does), with a marker; returns it."""
    mark = uuid.uuid4().hex
    annotations = {NETWORKS_ANNOTATION: network, MARK: mark}
    admin.patch(r.PODS, name, {"metadata": {"annotations": annotations}}, NAMESPACE)
    return mark


def _ungate(admin: Cluster, name: str) -> None:
    admin.patch(r.PODS, name, {"spec": {"schedulingGates": None}}, NAMESPACE)


def _status_by_interface(admin: Cluster, name: str) -> dict[str, dict[str, Any]] | None:
    """The Pod's network-status by interface once Multus wrote its default network."""
    entries = network_status(admin.get(r.PODS, name, NAMESPACE))
    if not any(e.get("name") == PRIMARY_NETWORK and e.get("default") for e in entries):
        return None
    return {str(e.get("interface")): e for e in entries}


def _attached(admin: Cluster, name: str) -> dict[str, dict[str, Any]]:
    lab_pods.wait_running(admin, name)
    status = wait_for(
        lambda: _status_by_interface(admin, name),
        timeout=WAIT,
        interval=0.3,
        what=f"{name}'s network-status from Multus",
    )
    assert status is not None
    return status


def _in(ip_range: str, entry: dict[str, Any]) -> str:
    (ip,) = entry["ips"]
    assert ipaddress.ip_address(ip) in ipaddress.ip_network(ip_range), entry
    return str(ip)


def _daemon_log(thick: MultusInstall) -> str:
    return Path(thick.paths.logs / "multus-daemon.log").read_text(errors="replace")


def test_a_pod_patched_while_the_daemons_pod_watch_lags_runs_without_its_network(
    nad: str,
    thick: MultusInstall,
    gate: WatchGate,
    upstream_lab: UpstreamLab,
    admin: Cluster,
    pods: list[str],
) -> None:
    name = "thick-stale"
    pods.append(name)
    _cached(admin, gate, name)
    gate.hold("pods")
    try:
        mark = _select(admin, name, nad)
        _ungate(admin, name)
        status = _attached(admin, name)
    finally:
        gate.release("pods")
    assert set(status) == {"eth0"}, status
    said = _daemon_log(thick)
    assert f"GetPod for [{NAMESPACE}/{name}] will use informer cache" in said
    live = admin.get(r.PODS, name, NAMESPACE)
    assert live["metadata"]["annotations"][NETWORKS_ANNOTATION] == nad
    kubectl = Kubectl(upstream_lab.admin_kubeconfig)
    assert kubectl.exec(name, "ip", "link", "show", "net1").returncode != 0
    wait_for(
        lambda: gate.delivered("pods", mark.encode()),
        timeout=WAIT,
        interval=0.1,
        what="the held patch delivered to the daemon",
    )
    assert set(_status_by_interface(admin, name) or {}) == {"eth0"}
    assert kubectl.exec(name, "ip", "link", "show", "net1").returncode != 0
    assert not reservations(admin, f"{NAMESPACE}/{name}")


def test_the_same_pod_gets_net1_when_the_daemon_saw_the_patch_first(
    nad: str, gate: WatchGate, admin: Cluster, pods: list[str]
) -> None:
    name = "thick-fresh"
    pods.append(name)
    _cached(admin, gate, name)
    mark = _select(admin, name, nad)
    wait_for(
        lambda: gate.delivered("pods", mark.encode()),
        timeout=WAIT,
        interval=0.1,
        what="the patch delivered to the daemon",
    )
    _ungate(admin, name)
    status = _attached(admin, name)
    assert set(status) == {"eth0", "net1"}, status
    assert status["net1"]["name"] == f"{NAMESPACE}/{nad}", status
    _in(RANGE, status["net1"])


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_a_tampered_and_a_terminating_managed_nad_are_used_as_they_are(
    thick: MultusInstall, gate: WatchGate, admin: Cluster, pods: list[str]
) -> None:
    frozen = json.dumps(_config(thick, MANAGED, RANGE))
    binding = json.dumps({"configSHA256": _digest(frozen)})
    managed = network_attachment_definition(
        MANAGED, NAMESPACE, frozen, {BINDING_ANNOTATION: binding}
    )
    managed["metadata"]["finalizers"] = [FINALIZER]
    admin.create(NADS, managed, NAMESPACE)
    try:
        tampered = json.dumps(_config(thick, MANAGED, TAMPERED_RANGE))
        patch = {"spec": {"config": tampered}}
        admin.patch(NADS, MANAGED, patch, NAMESPACE)
        wait_for(
            lambda: gate.delivered(NADS.plural, TAMPERED_RANGE.encode()),
            timeout=WAIT,
            interval=0.1,
            what="the tampered NAD delivered to the daemon",
        )
        first = "thick-tampered"
        pods.append(first)
        _cached(admin, gate, first)
        _select(admin, first, MANAGED)
        _ungate(admin, first)
        status = _attached(admin, first)
        assert set(status) == {"eth0", "net1"}, status
        _in(TAMPERED_RANGE, status["net1"])
        stored = admin.get(NADS, MANAGED, NAMESPACE)
        recorded = json.loads(stored["metadata"]["annotations"][BINDING_ANNOTATION])
        assert recorded["configSHA256"] != _digest(stored["spec"]["config"])

        admin.delete(NADS, MANAGED, NAMESPACE)
        terminating = admin.get(NADS, MANAGED, NAMESPACE)
        assert terminating["metadata"].get("deletionTimestamp"), terminating["metadata"]
        wait_for(
            lambda: gate.delivered(NADS.plural, b'"deletionTimestamp"'),
            timeout=WAIT,
            interval=0.1,
            what="the NAD's deletion delivered to the daemon",
        )
        second = "thick-terminating"
        pods.append(second)
        _cached(admin, gate, second)
        _select(admin, second, MANAGED)
        _ungate(admin, second)
        status = _attached(admin, second)
        assert set(status) == {"eth0", "net1"}, status
        _in(TAMPERED_RANGE, status["net1"])

        lab_pods.remove(admin, first, second)
        wait_for(
            lambda: not any(reservations(admin, f"{NAMESPACE}/{n}") for n in (first, second)),
            timeout=WAIT,
            interval=0.5,
            what="no Whereabouts reservation left for the deleted Pods",
        )
    finally:
        with contextlib.suppress(NotFound):
            admin.patch(NADS, MANAGED, {"metadata": {"finalizers": None}}, NAMESPACE)
        with contextlib.suppress(NotFound):
            admin.delete(NADS, MANAGED, NAMESPACE)


@pytest.fixture(scope="module")
def auto(thick: MultusInstall, upstream_session: Session) -> Iterator[str]:
    admin = upstream_session.lab.admin()
    try:
        with automatic_mode(admin, thick) as device_class:
            yield device_class
    finally:
        admin.close()


def _refusals(admin: Cluster, name: str) -> list[str]:
    return [
        str(e.get("message"))
        for e in lab_pods.events(admin, name)
        if "E_MULTUS_NOT_ATTACHED" in str(e.get("message"))
    ]


def test_the_agents_gate_refuses_the_container_when_the_daemon_read_a_stale_pod(
    auto: str, gate: WatchGate, admin: Cluster, pods: list[str]
) -> None:
    name = "thick-auto"
    pods.append(name)
    manifest = auto_pod(name)
    manifest["spec"]["schedulingGates"] = [{"name": HOLD_GATE}]
    admin.create(r.PODS, manifest, NAMESPACE)
    wait_for(
        lambda: gate.delivered("pods", name.encode()),
        timeout=WAIT,
        interval=0.1,
        what=f"the daemon sent {name}'s creation",
    )
    gate.hold("pods")
    try:
        _ungate(admin, name)
        pod_uid = lab_pods.uid(admin, name)
        refused = wait_for(
            lambda: _refusals(admin, name),
            timeout=WAIT,
            interval=0.5,
            what=f"{name}'s container refused by the agent's gate",
        )
        (shadow,) = shadows(admin, pod_uid)
        live = admin.get(r.PODS, name, NAMESPACE)
        selection = json.loads(live["metadata"]["annotations"][NETWORKS_ANNOTATION])
        assert [e["name"] for e in selection] == [shadow["metadata"]["name"]], selection
        status = _status_by_interface(admin, name)
        assert status is not None and set(status) == {"eth0"}, status
        assert live["status"].get("phase") == "Pending", live["status"]
    finally:
        gate.release("pods")
    assert refused
    wait_for(
        lambda: gate.delivered("pods", shadow["metadata"]["name"].encode()),
        timeout=WAIT,
        interval=0.1,
        what="the held selection delivered to the daemon",
    )
    status = _status_by_interface(admin, name)
    assert status is not None and set(status) == {"eth0"}, status
    assert admin.get(r.PODS, name, NAMESPACE)["status"].get("phase") == "Pending"
    lab_pods.remove(admin, name)
    pods.clear()
    wait_for(lambda: not shadows(admin), timeout=WAIT, interval=0.5, what="no shadow left")
