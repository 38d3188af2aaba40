"""AdmissionReview v1 JSON over HTTPS to the real webhook server (throwaway CA), and
end to end: the lab API server calling the webhook while the real controller runs."""

from __future__ import annotations

import base64
import contextlib
import copy
import http.client
import json
import ssl
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dmn.api.cluster import ApiFailure, Cluster, connect
from dmn.api.cluster import resources as r
from dmn.controller.compile.compiler import compile_topology
from dmn.controller.manager import Controller
from dmn.controller.webhook.server import WebhookServer
from dmn.interpreter.loader import load_builtin_plugins
from dmn.lab.apiserver import LabApiServer
from dmn.lab.apiserver.identity import UserInfo
from dmn.opcodes.registry import default_registry
from tests.chart.helm import find, render
from tests.controller.support import (
    PLUGIN_DIR,
    example,
    install,
    ready,
    topology_settled,
    wait_for,
)
from tests.webhook.certs import ThrowawayCA

CONTROLLER = "system:serviceaccount:dra-multi-network:dra-multi-network-controller"


@pytest.fixture(scope="module")
def ca() -> ThrowawayCA:
    return ThrowawayCA()


@pytest.fixture(scope="module")
def pki(ca: ThrowawayCA, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    d = tmp_path_factory.mktemp("pki")
    (d / "ca.crt").write_bytes(ca.pem())
    ca.issue(d / "tls.crt", d / "tls.key")
    return d / "ca.crt", d / "tls.crt", d / "tls.key"


@pytest.fixture(scope="module")
def lab() -> Iterator[LabApiServer]:
    tokens = {
        "ctl": UserInfo(CONTROLLER, ("system:authenticated",)),
        "alice": UserInfo("alice", ("system:authenticated",)),
    }
    with LabApiServer(tokens=tokens, bookmark_interval=0.5) as server:
        with Cluster(connect(url=server.url, token="ctl")) as c:
            install(c)
        yield server


@pytest.fixture(scope="module")
def webhook(lab: LabApiServer, pki: tuple[Path, Path, Path]) -> Iterator[WebhookServer]:
    _, cert, key = pki
    with Cluster(connect(url=lab.url, token="ctl")) as c:
        server = WebhookServer(
            c,
            default_registry(),
            cert_file=str(cert),
            key_file=str(key),
            controller_users=frozenset({CONTROLLER}),
        )
        server.start()
        yield server
        server.stop()


def post(
    webhook: WebhookServer, ca_file: Path, request: dict[str, Any]
) -> tuple[dict[str, Any], int]:
    ctx = ssl.create_default_context(cafile=str(ca_file))
    host, port = webhook.url.removeprefix("https://").split(":")
    conn = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=60)
    try:
        body = json.dumps(
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
        )
        conn.request("POST", "/validate", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = json.loads(resp.read())
        serial = conn.sock.getpeercert()["serialNumber"]  # type: ignore[union-attr]
        assert data["response"]["uid"] == request["uid"]
        return data["response"], int(serial, 16)
    finally:
        conn.close()


def req(
    kind: str, group: str, op: str, obj: Any, old: Any = None, user: str = "alice"
) -> dict[str, Any]:
    plural = {
        "NetworkTopology": "networktopologies",
        "NetworkPlugin": "networkplugins",
        "NetworkTopologyRevision": "networktopologyrevisions",
        "DeviceClass": "deviceclasses",
        "DeviceExposurePolicy": "deviceexposurepolicies",
    }[kind]
    version = "v1" if group == "resource.k8s.io" else "v1alpha1"
    return {
        "uid": str(uuid.uuid4()),
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": plural},
        "name": ((obj or old) or {}).get("metadata", {}).get("name", ""),
        "operation": op,
        "userInfo": {"username": user, "groups": ["system:authenticated"]},
        "object": obj,
        "oldObject": old,
        "dryRun": False,
    }


G = "networking.dra-multi-network.schseba.github.io"


def test_topology_validation(webhook: WebhookServer, pki: tuple[Path, Path, Path]) -> None:
    ca_file = pki[0]
    good = example("dual-vf-bond-vlan")
    resp, _ = post(webhook, ca_file, req("NetworkTopology", G, "CREATE", good))
    assert resp["allowed"] is True
    bad = copy.deepcopy(good)
    bad["spec"]["steps"][2]["inputs"]["members"][0]["from"] = "tenant.interface"
    resp, _ = post(webhook, ca_file, req("NetworkTopology", G, "UPDATE", bad, good))
    assert resp["allowed"] is False
    causes = resp["status"]["details"]["causes"]
    assert causes[0]["reason"] == "E_CYCLE" and causes[0]["field"].startswith("spec.steps[")
    assert "E_CYCLE" in resp["status"]["message"]


def test_plugin_validation(webhook: WebhookServer, pki: tuple[Path, Path, Path]) -> None:
    builtin = yaml.safe_load((PLUGIN_DIR / "vlan-cni.yaml").read_text())
    resp, _ = post(webhook, pki[0], req("NetworkPlugin", G, "CREATE", builtin))
    assert resp["allowed"] is True
    widened = copy.deepcopy(builtin)
    widened["spec"]["allowedEffects"].append("linux/link-move/v1")
    resp, _ = post(webhook, pki[0], req("NetworkPlugin", G, "UPDATE", widened, builtin))
    assert resp["allowed"] is False
    assert resp["status"]["details"]["causes"][0]["reason"] == "E_CONFLICT"
    custom = copy.deepcopy(builtin)
    custom["metadata"]["name"] = "my-vlan"
    custom["spec"]["implementation"] = {"type": "EffectProgram"}
    resp, _ = post(webhook, pki[0], req("NetworkPlugin", G, "CREATE", custom))
    assert resp["allowed"] is True
    custom["spec"]["allowedEffects"] = ["linux/create-vlan/v1"]
    resp, _ = post(webhook, pki[0], req("NetworkPlugin", G, "CREATE", custom))
    assert resp["allowed"] is False
    assert "E_EFFECT_DENIED" in {c["reason"] for c in resp["status"]["details"]["causes"]}


def test_policy_validation(webhook: WebhookServer, pki: tuple[Path, Path, Path]) -> None:
    bad = {
        "apiVersion": f"{G}/v1alpha1",
        "kind": "DeviceExposurePolicy",
        "metadata": {"name": "p"},
        "spec": {"priority": "high"},
    }
    resp, _ = post(webhook, pki[0], req("DeviceExposurePolicy", G, "CREATE", bad))
    assert resp["allowed"] is False and resp["status"]["details"]["causes"]


def _revision() -> dict[str, Any]:
    topo = example("vfio")
    topo["metadata"]["uid"] = "uid-1"
    compiled = compile_topology(topo, load_builtin_plugins()).compiled
    assert compiled is not None
    return compiled.revision


def test_revision_protection(webhook: WebhookServer, pki: tuple[Path, Path, Path]) -> None:
    rev = _revision()
    resp, _ = post(webhook, pki[0], req("NetworkTopologyRevision", G, "CREATE", rev, user="alice"))
    assert resp["allowed"] is False and resp["status"]["code"] == 403
    resp, _ = post(
        webhook, pki[0], req("NetworkTopologyRevision", G, "CREATE", rev, user=CONTROLLER)
    )
    assert resp["allowed"] is True
    forged = copy.deepcopy(rev)
    forged["spec"]["normalizedSpec"]["steps"][0]["config"]["accessBackend"] = "cdev"
    resp, _ = post(
        webhook, pki[0], req("NetworkTopologyRevision", G, "CREATE", forged, user=CONTROLLER)
    )
    assert resp["allowed"] is False
    assert resp["status"]["details"]["causes"][0]["field"] == "spec.digest"
    resp, _ = post(
        webhook, pki[0], req("NetworkTopologyRevision", G, "UPDATE", forged, rev, user=CONTROLLER)
    )
    assert resp["allowed"] is False and "immutable" in resp["status"]["message"]
    status_only = copy.deepcopy(rev)
    status_only["status"] = {"phase": "Ready"}
    resp, _ = post(
        webhook,
        pki[0],
        req("NetworkTopologyRevision", G, "UPDATE", status_only, rev, user=CONTROLLER),
    )
    assert resp["allowed"] is True


def test_generated_class_protection(webhook: WebhookServer, pki: tuple[Path, Path, Path]) -> None:
    topo = example("vfio")
    compiled = compile_topology(topo, load_builtin_plugins()).compiled
    assert compiled is not None
    cls = compiled.device_classes("rev-uid")[0]
    edited = copy.deepcopy(cls)
    edited["spec"]["selectors"] = [{"cel": {"expression": "true"}}]
    edited["metadata"]["labels"] = {}
    for op, obj, old in (("UPDATE", edited, cls), ("DELETE", None, cls), ("CREATE", cls, None)):
        resp, _ = post(webhook, pki[0], req("DeviceClass", "resource.k8s.io", op, obj, old))
        assert resp["allowed"] is False and resp["status"]["code"] == 403, op
        resp, _ = post(
            webhook, pki[0], req("DeviceClass", "resource.k8s.io", op, obj, old, user=CONTROLLER)
        )
        assert resp["allowed"] is True, op
    other = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpu"},
        "spec": {},
    }
    resp, _ = post(webhook, pki[0], req("DeviceClass", "resource.k8s.io", "CREATE", other))
    assert resp["allowed"] is True


def test_malformed_review_is_400(webhook: WebhookServer, pki: tuple[Path, Path, Path]) -> None:
    ctx = ssl.create_default_context(cafile=str(pki[0]))
    host, port = webhook.url.removeprefix("https://").split(":")
    conn = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=60)
    conn.request("POST", "/validate", b"{not json", {"Content-Type": "application/json"})
    assert conn.getresponse().status == 400
    conn.close()
    # a Content-Length that is not a number is a 400 too, never a dropped connection
    conn = http.client.HTTPSConnection(host, int(port), context=ctx, timeout=30)
    conn.putrequest("POST", "/validate")
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Content-Length", "twelve")
    conn.endheaders()
    assert conn.getresponse().status == 400
    conn.close()


def test_certificate_rotation(
    webhook: WebhookServer, ca: ThrowawayCA, pki: tuple[Path, Path, Path]
) -> None:
    ca_file, cert, key = pki
    _, before = post(webhook, ca_file, req("NetworkTopology", G, "CREATE", example("vfio")))
    # no sleep: the files are replaced by rename, so the inode changes even when the
    # coarse file timestamps do not
    serial = ca.issue(cert, key)
    _, after = post(webhook, ca_file, req("NetworkTopology", G, "CREATE", example("vfio")))
    assert after == serial != before
    # a half-written rotation keeps the previous pair in service
    key.write_text("garbage")
    resp, still = post(webhook, ca_file, req("NetworkTopology", G, "CREATE", example("vfio")))
    assert resp["allowed"] is True and still == serial
    ca.issue(cert, key)


def _register(cluster: Cluster, webhook: WebhookServer, ca_file: Path) -> None:
    """The chart's ValidatingWebhookConfiguration (rendered by the real Helm), pointed at
    the test's webhook server."""
    config = find(render(), "ValidatingWebhookConfiguration", "dra-multi-network")
    bundle = base64.b64encode(ca_file.read_bytes()).decode()
    for hook in config["webhooks"]:
        hook["clientConfig"] = {"url": webhook.url + "/validate", "caBundle": bundle}
    config["metadata"] = {"name": "dra-multi-network"}
    cluster.create(r.VALIDATING_WEBHOOK_CONFIGURATIONS, config)


def test_end_to_end_through_the_api_server(
    lab: LabApiServer, webhook: WebhookServer, pki: tuple[Path, Path, Path]
) -> None:
    with (
        Cluster(connect(url=lab.url, token="ctl")) as ctl,
        Cluster(connect(url=lab.url, token="alice")) as alice,
    ):
        _register(ctl, webhook, pki[0])
        controller = Controller(ctl, default_registry(), resync=1.0)
        controller.start()
        try:
            bad = example("dual-vf-bond-vlan")
            bad["metadata"]["name"] = "e2e-bad"
            bad["spec"]["steps"][3]["config"]["ifName"] = "vfleft"
            with pytest.raises(ApiFailure) as err:
                alice.create(r.NETWORK_TOPOLOGIES, bad)
            assert "E_IFNAME" in str(err.value)
            good = example("dual-vf-bond-vlan")
            good["metadata"]["name"] = "e2e"
            alice.create(r.NETWORK_TOPOLOGIES, good)
            topo = wait_for(topology_settled(alice, "e2e"), what="e2e Ready")
            assert (ready(topo) or {}).get("status") == "True", topo["status"]
            cls_name = topo["status"]["roots"][0]["deviceClassName"]
            cls = alice.get(r.DEVICE_CLASSES, cls_name)
            cls["spec"]["selectors"] = [{"cel": {"expression": "true"}}]
            with pytest.raises(ApiFailure) as err:
                alice.replace(r.DEVICE_CLASSES, cls)
            assert "only by the controller" in str(err.value)
            with pytest.raises(ApiFailure):
                alice.delete(r.NETWORK_TOPOLOGY_REVISIONS, topo["status"]["revision"]["name"])
        finally:
            controller.stop()


def test_unreachable_api_server_fails_closed(pki: tuple[Path, Path, Path]) -> None:
    ca_file, cert, key = pki
    with Cluster(connect(url="http://127.0.0.1:9")) as dead:
        server = WebhookServer(dead, default_registry(), cert_file=str(cert), key_file=str(key))
        server.start()
        try:
            resp, _ = post(server, ca_file, req("NetworkTopology", G, "CREATE", example("vfio")))
        finally:
            server.stop()
    assert resp["allowed"] is False and "could not validate" in resp["status"]["message"]


def test_warnings_admit_with_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Admission refuses exactly what the controller refuses (errors); a warning admits
    the object and reaches the client as an AdmissionReview warning."""
    import dataclasses

    from dmn.controller.webhook import review as review_module
    from dmn.interpreter.diagnostics import Code, Diagnostic, Severity

    real = review_module.compile_topology

    def with_warning(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        note = Diagnostic(Code.E_IFNAME, "a note", path="spec", severity=Severity.WARNING)
        return dataclasses.replace(result, diagnostics=(*result.diagnostics, note))

    monkeypatch.setattr(review_module, "compile_topology", with_warning)
    ctx = review_module.ReviewContext(default_registry(), load_builtin_plugins)
    resp = review_module.review(req("NetworkTopology", G, "CREATE", example("vfio")), ctx)
    assert resp["allowed"] is True
    assert resp["warnings"] == ["E_IFNAME at spec: a note"]


@pytest.mark.parametrize("name", ["host-cni", "sriov-cni", "vlan-cni"])
def test_builtin_as_an_api_server_stores_it_is_admitted(
    lab: LabApiServer, webhook: WebhookServer, pki: tuple[Path, Path, Path], name: str
) -> None:
    """The API server applies the CRD's defaults (ports' minItems/maxItems) before
    admission; the shipped builtin must still be recognised as exactly its contract."""
    with Cluster(connect(url=lab.url, token="ctl")) as c:
        stored = c.get(r.NETWORK_PLUGINS, name)
    resp, _ = post(webhook, pki[0], req("NetworkPlugin", G, "UPDATE", stored, stored))
    assert resp["allowed"] is True, resp
    # ... and a real change is still refused
    stored["spec"]["allowedEffects"] = [*stored["spec"]["allowedEffects"], "pci/driver-bind/v1"]
    resp, _ = post(webhook, pki[0], req("NetworkPlugin", G, "UPDATE", stored, stored))
    assert resp["allowed"] is False


@contextlib.contextmanager
def _pod_webhooks(ctl: Cluster, webhook: WebhookServer, ca_file: Path) -> Iterator[None]:
    """The chart's Pod webhooks (mutating on /mutate-pods, validating on /validate), pointed
    at the test's webhook server, registered for the duration."""
    docs = render()
    bundle = base64.b64encode(ca_file.read_bytes()).decode()
    for kind, res in (
        ("MutatingWebhookConfiguration", r.MUTATING_WEBHOOK_CONFIGURATIONS),
        ("ValidatingWebhookConfiguration", r.VALIDATING_WEBHOOK_CONFIGURATIONS),
    ):
        config = find(docs, kind, "dra-multi-network-pods")
        for hook in config["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": webhook.url + path, "caBundle": bundle}
        config["metadata"] = {"name": "dra-multi-network-pods"}
        ctl.create(res, config)
    try:
        yield
    finally:
        ctl.delete(r.MUTATING_WEBHOOK_CONFIGURATIONS, "dra-multi-network-pods")
        ctl.delete(r.VALIDATING_WEBHOOK_CONFIGURATIONS, "dra-multi-network-pods")


def test_pod_admission_through_the_lab_api_server(
    lab: LabApiServer, webhook: WebhookServer, pki: tuple[Path, Path, Path]
) -> None:
    """The chart's Pod webhooks (mutating on /mutate-pods, validating on /validate) pointed
    at the real server, which reads the template and classes from the lab API server: a Pod
    naming a template of one of our classes is stored with our NRI plugin required; a Pod of
    another driver's class is stored unchanged; an update dropping our plugin is refused.
    (The lab API server does not evaluate matchConditions: every Pod is sent here.)"""
    from dmn import NRI_PLUGIN_NAME
    from dmn.controller.webhook.pods import POD_KEY

    with (
        Cluster(connect(url=lab.url, token="ctl")) as ctl,
        Cluster(connect(url=lab.url, token="alice")) as alice,
        _pod_webhooks(ctl, webhook, pki[0]),
    ):
        ours = {"app.kubernetes.io/managed-by": "dra-multi-network-controller"}
        for name, labels in (("pods-ours", ours), ("pods-other", {})):
            ctl.create(
                r.DEVICE_CLASSES,
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "DeviceClass",
                    "metadata": {"name": name, "labels": labels},
                    "spec": {},
                },
            )
            requests = [{"name": "n", "exactly": {"deviceClassName": name}}]
            template = {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": name},
                "spec": {"spec": {"devices": {"requests": requests}}},
            }
            alice.create(r.RESOURCE_CLAIM_TEMPLATES, template, "default")
        stored = {}
        for name in ("pods-ours", "pods-other"):
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name},
                "spec": {
                    "containers": [{"name": "app", "image": "x"}],
                    "resourceClaims": [{"name": "n", "resourceClaimTemplateName": name}],
                },
            }
            stored[name] = alice.create(r.PODS, pod, "default")
        annotations = stored["pods-ours"]["metadata"]["annotations"]
        assert json.loads(annotations[POD_KEY]) == [NRI_PLUGIN_NAME]
        assert POD_KEY not in (stored["pods-other"]["metadata"].get("annotations") or {})
        with pytest.raises(ApiFailure) as dropped:
            alice.patch(
                r.PODS, "pods-ours", {"metadata": {"annotations": {POD_KEY: "[]"}}}, "default"
            )
        assert "E_POD_NRI_REQUIREMENT_REMOVED" in str(dropped.value)


def test_pod_admission_adds_node_capability_through_the_lab_api_server(
    lab: LabApiServer, webhook: WebhookServer, pki: tuple[Path, Path, Path]
) -> None:
    """A revision and its class as the controller writes them, read back by the webhook
    from the lab API server: a Pod naming a template of the class is stored with a required
    node affinity on the revision's capability label; a Pod bound by spec.nodeName to a Node
    without the label, or to no Node, is refused; one bound to a labelled Node is stored."""
    from dmn.api.node_capability import revision_requirement
    from dmn.controller.webhook.pod_affinity import REQUIRED

    topo = example("vfio")
    topo["metadata"].update(name="pods-affinity", uid="uid-pods-affinity")
    compiled = compile_topology(topo, load_builtin_plugins()).compiled
    assert compiled is not None
    requirement = revision_requirement(compiled.revision)
    assert requirement is not None
    key = requirement.key
    with (
        Cluster(connect(url=lab.url, token="ctl")) as ctl,
        Cluster(connect(url=lab.url, token="alice")) as alice,
        _pod_webhooks(ctl, webhook, pki[0]),
    ):
        revision = ctl.create(r.NETWORK_TOPOLOGY_REVISIONS, compiled.revision)
        (cls,) = compiled.device_classes(revision["metadata"]["uid"])
        ctl.create(r.DEVICE_CLASSES, cls)
        for name, labels in (("capable", {key: "true"}), ("plain", {})):
            ctl.create(
                r.NODES,
                {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}},
            )
        requests = [{"name": "n", "exactly": {"deviceClassName": cls["metadata"]["name"]}}]
        alice.create(
            r.RESOURCE_CLAIM_TEMPLATES,
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": "pods-affinity"},
                "spec": {"spec": {"devices": {"requests": requests}}},
            },
            "default",
        )

        def pod(name: str, **spec: Any) -> dict[str, Any]:
            return {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name},
                "spec": {
                    "containers": [{"name": "app", "image": "x"}],
                    "resourceClaims": [{"name": "n", "resourceClaimTemplateName": "pods-affinity"}],
                    **spec,
                },
            }

        anti = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}
        stored = alice.create(r.PODS, pod("affinity-free", affinity=anti), "default")
        assert stored["spec"]["affinity"]["nodeAffinity"][REQUIRED]["nodeSelectorTerms"] == [
            {"matchExpressions": [{"key": key, "operator": "Exists"}]}
        ]
        assert stored["spec"]["affinity"]["podAntiAffinity"] == anti["podAntiAffinity"]
        for node in ("plain", "nowhere"):
            with pytest.raises(ApiFailure) as bypass:
                alice.create(r.PODS, pod(f"affinity-{node}", nodeName=node), "default")
            assert "E_POD_NODE_BYPASS" in str(bypass.value), node
        bound = alice.create(r.PODS, pod("affinity-capable", nodeName="capable"), "default")
        assert bound["spec"]["nodeName"] == "capable"
