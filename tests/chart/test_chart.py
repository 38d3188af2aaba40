"""The Helm chart through the real Helm: ``helm lint --strict``, ``helm template`` for the
default values and for values files that turn every option on, every rendered object
validated strictly (core kinds with ``kubernetes-validate`` 1.37, our custom resources
against our CRDs), the values schema refusing bad values, and the chart's admission CEL
(DeviceClass webhook matchConditions, node ResourceSlice policy) evaluated with a real
CEL implementation."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import cel
import jsonschema
import kubernetes_validate
import pytest
import yaml
from cryptography import x509

from dmn.api.identity import DRIVER, GROUP
from dmn.controller.webhook.review import _is_generated_class

from .helm import CHART, VALUES, find, helm, render
from .policy_eval import evaluate_policy

VALUE_SETS = [(), ("all-options.yaml",), ("secret-certs.yaml",), ("issuer-ref.yaml",)]
CERT_MANAGER_KINDS = {"Issuer", "Certificate"}
TOLERATE = "tolerate-missing-nri-plugins.noderesource.dev"
EVENT_WRITER = {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "get", "patch"]}


def _crd_schemas() -> dict[str, dict[str, Any]]:
    out = {}
    for path in sorted((CHART / "crds").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        out[crd["spec"]["names"]["kind"]] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return out


def test_values_files_cover_every_value() -> None:
    """all-options.yaml sets every leaf of values.yaml (so 'every option' stays true)."""

    def leaves(node: Any, prefix: str = "") -> set[str]:
        if isinstance(node, dict) and node:
            return set().union(*(leaves(v, f"{prefix}.{k}") for k, v in node.items()))
        return {prefix}

    defaults = leaves(yaml.safe_load((CHART / "values.yaml").read_text()))
    covered: set[str] = set()
    for name in ("all-options.yaml", "secret-certs.yaml", "issuer-ref.yaml"):
        covered |= leaves(yaml.safe_load((VALUES / name).read_text()))
    # a leaf is covered if the values files set it or something below it
    missing = {d for d in defaults if not any(c == d or c.startswith(d + ".") for c in covered)}
    assert missing == set()


@pytest.mark.parametrize("values", VALUE_SETS, ids=lambda v: v[0] if v else "defaults")
def test_helm_lint_strict(values: tuple[str, ...]) -> None:
    args = ["lint", "--strict", str(CHART), "--namespace", "dmn-system"]
    for name in values:
        args += ["--values", str(VALUES / name)]
    helm(*args)


@pytest.mark.parametrize("values", VALUE_SETS, ids=lambda v: v[0] if v else "defaults")
def test_every_rendered_object_is_valid(values: tuple[str, ...]) -> None:
    docs = render(values)
    crds = _crd_schemas()
    kinds = set()
    for doc in docs:
        kinds.add(doc["kind"])
        group = doc["apiVersion"].split("/")[0]
        if group == GROUP:
            jsonschema.validate(doc, crds[doc["kind"]])
        elif group == "cert-manager.io":
            # no cert-manager schema is available here: its objects are checked by shape
            assert doc["kind"] in CERT_MANAGER_KINDS and doc["apiVersion"] == "cert-manager.io/v1"
            assert set(doc) == {"apiVersion", "kind", "metadata", "spec"}
        elif group == "monitoring.coreos.com":
            # nor a prometheus-operator schema: the ServiceMonitor is checked by shape
            assert doc["kind"] == "ServiceMonitor" and doc["apiVersion"].endswith("/v1")
            assert set(doc) == {"apiVersion", "kind", "metadata", "spec"}
            assert {"selector", "endpoints", "namespaceSelector"} == set(doc["spec"])
        else:
            kubernetes_validate.validate(doc, "1.37.0", strict=True)
    assert "CustomResourceDefinition" in kinds and "NetworkPlugin" in kinds


def test_default_install_objects() -> None:
    docs = render()
    ds = find(docs, "DaemonSet", "dra-multi-network-node")["spec"]["template"]["spec"]
    assert ds["hostNetwork"] is True
    assert ds["priorityClassName"] == "system-node-critical"
    assert ds["tolerations"] == [{"operator": "Exists"}]
    agent = ds["containers"][0]
    assert agent["securityContext"]["privileged"] is True
    mounts = {m["name"]: m for m in agent["volumeMounts"]}
    assert mounts["state"]["mountPropagation"] == "Bidirectional"
    assert mounts["state"]["mountPath"] == "/var/lib/dra-multi-network"
    assert {m["mountPath"] for m in mounts.values()} >= {
        "/var/lib/kubelet/plugins",
        "/var/lib/kubelet/plugins_registry",
        "/var/run/nri",
        "/var/run/netns",
        "/sys",
        "/dev/vfio",
        "/dev/infiniband",
        "/var/run/cdi",
    }
    assert "ovs" not in mounts  # off by default: no OVSDB socket directory from the host
    assert not [a for a in agent["command"] if a.startswith("--ovsdb-remote")]
    probe = agent["readinessProbe"]["exec"]["command"]
    assert probe[:2] == ["/opt/dmn/bin/dmn", "node-ready"]
    assert agent["ports"] == [{"name": "metrics", "containerPort": 9811}]
    assert "--health-port=9811" in agent["command"]
    for kind in ("startupProbe", "livenessProbe"):
        assert agent[kind]["httpGet"] == {"path": "/livez", "port": "metrics"}
    assert "--nri-socket=/var/run/nri/nri.sock" in agent["command"]

    ctl = find(docs, "Deployment", "dra-multi-network-controller")["spec"]["template"]["spec"]
    assert ctl["securityContext"]["runAsNonRoot"] is True
    assert ctl["securityContext"]["runAsUser"] == 65532
    assert ctl["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    ctl_container = ctl["containers"][0]
    assert {"name": "metrics", "containerPort": 8081} in ctl_container["ports"]
    assert "--health-port=8081" in ctl_container["command"]
    assert ctl_container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "metrics"}
    # a busy node's TLS handshake may outlast kubelet's 1 s default (a serving replica NotReady)
    assert ctl_container["readinessProbe"]["timeoutSeconds"] == 5
    # a deleted replica serves 5 s more before SIGTERM: the API server's endpoint view drops it
    assert ctl_container["lifecycle"] == {"preStop": {"sleep": {"seconds": 5}}}
    # metrics Services and the ServiceMonitor are opt-in
    assert not [d for d in docs if d["kind"] == "ServiceMonitor"]
    assert not [d for d in docs if d["metadata"]["name"].endswith("-metrics")]
    assert find(docs, "PodDisruptionBudget")["spec"]["minAvailable"] == 1
    assert "hostNetwork" not in ctl
    assert "strategy" not in find(docs, "Deployment")["spec"]
    assert [e["name"] for e in ctl_container["env"]] == ["POD_NAME", "POD_NAMESPACE"]
    assert [e["name"] for e in agent["env"]] == ["NODE_NAME"]
    lease = find(docs, "Role", "dra-multi-network-controller-lease")["rules"][0]
    assert lease["resourceNames"] == ["dra-multi-network-controller"]

    vwc = find(docs, "ValidatingWebhookConfiguration", "dra-multi-network")
    for hook in vwc["webhooks"]:
        assert hook["failurePolicy"] == "Fail"
        assert all("*" not in res for rule in hook["rules"] for res in rule["resources"])
    # Pod admission never blocks a Pod: a down controller admits Pods unchanged
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        (hook,) = find(docs, kind, "dra-multi-network-pods")["webhooks"]
        assert hook["failurePolicy"] == "Ignore" and hook["timeoutSeconds"] == 5
        assert hook["rules"][0]["resources"] == ["pods"]
    (mutating,) = find(docs, "MutatingWebhookConfiguration")["webhooks"]
    assert mutating["reinvocationPolicy"] == "IfNeeded"
    assert mutating["clientConfig"]["service"]["path"] == "/mutate-pods"
    assert mutating["rules"][0]["operations"] == ["CREATE"]
    template = find(docs, "DaemonSet", "dra-multi-network-node")["spec"]["template"]
    assert template["metadata"]["annotations"] == {TOLERATE: "true"}
    templates = find(docs, "ClusterRole", "dra-multi-network-controller")["rules"]
    assert {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaimtemplates"],
            "verbs": ["get"]} in templates  # fmt: skip


def test_chart_generates_a_serving_certificate_its_bundle_trusts() -> None:
    docs = render()
    secret = find(docs, "Secret", "dra-multi-network-webhook-tls")
    assert secret["type"] == "kubernetes.io/tls"
    ca = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["ca.crt"]))
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "dra-multi-network-webhook.dmn-system.svc" in names.get_values_for_type(x509.DNSName)
    configs = [d for d in docs if d["kind"].endswith("WebhookConfiguration")]
    assert len(configs) == 3
    for config in configs:
        for hook in config["webhooks"]:
            assert hook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]


def test_cert_manager_source() -> None:
    docs = render(["all-options.yaml"])
    assert not [d for d in docs if d["kind"] == "Secret"]
    ref = "dmn-system/dra-multi-network-webhook"
    for vwc in [d for d in docs if d["kind"].endswith("WebhookConfiguration")]:
        assert vwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == ref
        assert all("caBundle" not in h["clientConfig"] for h in vwc["webhooks"])
    serving = find(docs, "Certificate", "dra-multi-network-webhook")["spec"]
    # not the chart source's Secret: cert-manager and Helm do not race for one name
    assert serving["secretName"] == "dra-multi-network-webhook-cert-manager-tls"
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    assert volumes[0]["secret"]["secretName"] == serving["secretName"]
    assert serving["issuerRef"]["name"] == "dra-multi-network-ca"
    issuer = find(render(["issuer-ref.yaml"]), "Certificate")["spec"]["issuerRef"]
    assert issuer == {"name": "cluster-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}


def test_all_options_reach_the_objects() -> None:
    docs = render(["all-options.yaml"])
    agent = find(docs, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]
    ctx = agent["securityContext"]
    assert ctx["privileged"] is False and ctx["allowPrivilegeEscalation"] is False
    assert ctx["capabilities"] == {"drop": ["ALL"], "add": ["NET_ADMIN", "SYS_ADMIN"]}
    assert ctx["seccompProfile"] == {"type": "RuntimeDefault"}
    state = next(m for m in agent["volumeMounts"] if m["name"] == "state")
    assert state["mountPropagation"] == "HostToContainer"
    assert agent["image"] == "registry.example/dra-multi-network:0.1.0-test"
    ctl = find(docs, "Deployment")["spec"]
    assert ctl["replicas"] == 3
    assert "--lease-name=dmn-leader" in ctl["template"]["spec"]["containers"][0]["command"]
    assert "--webhook-port=10443" in ctl["template"]["spec"]["containers"][0]["command"]
    webhook_service = find(docs, "Service", "dra-multi-network-webhook")
    assert webhook_service["spec"]["ports"][0]["targetPort"] == 10443
    assert "--health-port=19811" in agent["command"]
    assert agent["command"][-2:] == ["--sysfs=/sys", "--lab-link=dmnlab0"]
    assert "--ovsdb-remote=unix:/var/run/openvswitch/db.sock" in agent["command"]
    agent_pod = find(docs, "DaemonSet")["spec"]["template"]["spec"]
    host_dirs = {v["name"]: v["hostPath"]["path"] for v in agent_pod["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in agent["volumeMounts"]}
    assert (host_dirs["ovs"], mounts["ovs"]) == ("/var/run/openvswitch",) * 2
    assert (host_dirs["cdi"], mounts["cdi"]) == ("/etc/cdi", "/var/run/cdi")
    api_env = [
        {"name": "KUBERNETES_SERVICE_HOST", "value": "10.0.0.10"},
        {"name": "KUBERNETES_SERVICE_PORT", "value": "6443"},
    ]
    assert agent["env"][1:] == api_env
    ctl_pod = ctl["template"]["spec"]
    assert ctl_pod["hostNetwork"] is True and ctl_pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert ctl["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    assert ctl_pod["containers"][0]["env"][2:] == api_env
    assert "--health-port=18081" in ctl["template"]["spec"]["containers"][0]["command"]
    assert ctl_pod["containers"][0]["lifecycle"]["preStop"] == {"sleep": {"seconds": 10}}
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    node_metrics = services["dra-multi-network-node-metrics"]["spec"]
    assert node_metrics["ports"] == [{"name": "metrics", "port": 19811, "targetPort": "metrics"}]
    ctl_metrics = services["dra-multi-network-controller-metrics"]["spec"]["ports"][0]
    assert ctl_metrics["port"] == 18081
    monitor = find(docs, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["endpoints"] == [
        {"port": "metrics", "path": "/metrics", "interval": "15s"}
    ]
    selected = monitor["spec"]["selector"]["matchLabels"].items()
    assert all(
        selected <= s["metadata"]["labels"].items()
        for s in services.values()
        if s["metadata"]["name"].endswith("-metrics")
    )
    secret_docs = render(["secret-certs.yaml"])
    assert not [d for d in secret_docs if d["kind"] in ("DaemonSet", "PodDisruptionBudget")]
    ctl_volumes = find(secret_docs, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert ctl_volumes[0]["secret"]["secretName"] == "my-webhook-tls"


@pytest.mark.parametrize("values", VALUE_SETS, ids=lambda v: v[0] if v else "defaults")
def test_install_creates_the_plugins_before_the_webhook_that_judges_them(
    values: tuple[str, ...],
) -> None:
    """``helm install`` creates objects in Helm's kind order (``helm template`` prints that
    order): the builtin NetworkPlugins must exist before the ValidatingWebhookConfiguration
    that would send their creation to a controller not yet running (failurePolicy Fail)."""
    kinds = [d["kind"] for d in render(values)]
    webhook = kinds.index("ValidatingWebhookConfiguration")
    assert max(i for i, k in enumerate(kinds) if k == "NetworkPlugin") < webhook
    # the Pod one too (nothing follows them); the Pod mutation may come earlier: it never
    # refuses anything and no object of the chart is a Pod with claims
    assert kinds[webhook:] == ["ValidatingWebhookConfiguration"] * 2


@pytest.mark.parametrize("values", VALUE_SETS, ids=lambda v: v[0] if v else "defaults")
def test_every_object_carries_helms_ownership_metadata(values: tuple[str, ...]) -> None:
    """Helm adds this label and these annotations to the objects it applies but not to the
    manifest it stores, and ``helm upgrade`` patches every object whose stored manifest
    differs from the new one with them added: rendered by the chart, an unchanged object
    gives an empty patch and is not touched (a patch of a NetworkPlugin needs our webhook)."""
    for doc in render(values, namespace="dmn-ns"):
        if doc["kind"] == "CustomResourceDefinition":
            continue  # crds/ is applied once by install, never patched by upgrade
        meta = doc["metadata"]
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "Helm", doc["kind"]
        assert {k: v for k, v in meta["annotations"].items() if k.startswith("meta.helm.sh/")} == {
            "meta.helm.sh/release-name": "dmn",
            "meta.helm.sh/release-namespace": "dmn-ns",
        }


def test_builtin_plugins_render_as_generated_with_no_version_in_their_labels() -> None:
    """templates/plugins.yaml renders each file of plugins/ (``dmn generate``) unchanged but
    for its metadata, which holds nothing tied to the chart's version: a chart upgrade
    patches a builtin only when its contract changed."""
    rendered = {d["metadata"]["name"]: d for d in render() if d["kind"] == "NetworkPlugin"}
    files = sorted((CHART / "plugins").glob("*.yaml"))
    assert files and len(rendered) == len(files)
    for path in files:
        generated = yaml.safe_load(path.read_text())
        doc = rendered[generated["metadata"]["name"]]
        # JSON text tells 9000 from 9000.0: the round trip through Helm keeps every type
        assert json.dumps(doc["spec"], sort_keys=True) == json.dumps(
            generated["spec"], sort_keys=True
        )
        assert set(doc["metadata"]["labels"]) == {
            "app.kubernetes.io/part-of",
            "app.kubernetes.io/instance",
            "app.kubernetes.io/managed-by",
        }


def test_a_changed_controller_value_changes_only_the_controller_deployment() -> None:
    """What ``helm upgrade --set controller.logLevel=DEBUG`` patches: the Deployment alone
    (certificates from a Secret, so nothing is generated anew by either render)."""

    def objects(*sets: str) -> dict[tuple[str, str], dict[str, Any]]:
        docs = render(["secret-certs.yaml"], sets)
        return {(d["kind"], d["metadata"]["name"]): d for d in docs}

    before, after = objects(), objects("controller.logLevel=DEBUG")
    assert before.keys() == after.keys()
    changed = [key for key in before if before[key] != after[key]]
    assert changed == [("Deployment", "dra-multi-network-controller")]


def test_both_components_may_write_events_and_nothing_more_of_them() -> None:
    """The agent and the controller write Events (dmn/api/cluster/events.py: create, and get
    + patch to bump a repeat) in the involved object's namespace: a ClusterRole rule with
    exactly those verbs, no list/watch/delete."""
    docs = render()
    for name in ("dra-multi-network-node", "dra-multi-network-controller"):
        rules = find(docs, "ClusterRole", name)["rules"]
        events = [r for r in rules if "events" in r["resources"]]
        assert events == [EVENT_WRITER], name


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("webhook.certificates.source=selfmade", "source"),
        ("nodeAgent.capabilities={ALL}", "capabilities"),
        ("nodeAgent.stateDir=relative/dir", "stateDir"),
        ("nodeAgent.deviceDirs={/etc}", "deviceDirs"),
        ("nodeAgent.ovs.socketDir=run/openvswitch", "socketDir"),
        ("nodeAgent.cdiDir=/var/run/cdi/", "cdiDir"),
        ("controller.replicas=0", "replicas"),
        ("controller.shutdownDelaySeconds=60", "shutdownDelaySeconds"),
        ("controller.unknownOption=1", "unknownOption"),
        ("nodeAgent.healthPort=0", "healthPort"),
        ("nodeAgent.extraArgs={rm -rf}", "extraArgs"),
        ("apiServer.host=10.0.0.1", "port"),
        ("metrics.serviceMonitor.interval=often", "interval"),
        ("webhook.certificates.source=secret", "secretName"),
        ("webhook.pods.timeoutSeconds=31", "timeoutSeconds"),
        ("nri.tolerateMissingPluginsAnnotation=a b", "tolerateMissingPluginsAnnotation"),
        ("nodeAgent.capability.refreshSeconds=0", "refreshSeconds"),
        ("nodeAgent.capability.refreshSeconds=601", "refreshSeconds"),
        ("controller.capability.graceSeconds=-1", "graceSeconds"),
        ("controller.capability.other=1", "other"),
    ],
)
def test_values_schema_refuses_bad_values(setting: str, message: str) -> None:
    proc = helm("template", "dmn", str(CHART), "--set", setting, check=False)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr


# --- the DeviceClass webhook's matchConditions -------------------------------------------

OURS_LABEL = {"app.kubernetes.io/managed-by": "dra-multi-network-controller"}


def _class(labels: dict[str, str] | None = None, driver: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "c"}
    if labels is not None:
        meta["labels"] = labels
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": "true"}}]}
    if driver is not None:
        params = {"apiVersion": "x/v1", "kind": "TopologyRootConfiguration"}
        spec["config"] = [{"opaque": {"driver": driver, "parameters": params}}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": meta,
        "spec": spec,
    }


CLASSES = {
    "other-driver": _class(),
    "other-driver-labels": _class({"app": "gpu"}),
    "other-driver-config": _class(driver="gpu.example.com"),
    "ours-by-label": _class(OURS_LABEL),
    "ours-by-config-unlabelled": _class(driver=DRIVER),
    "ours-by-both": _class(OURS_LABEL, DRIVER),
}


@pytest.mark.parametrize("old", [None, *CLASSES], ids=lambda n: f"old={n}")
@pytest.mark.parametrize("new", [None, *CLASSES], ids=lambda n: f"new={n}")
def test_deviceclass_match_condition_equals_the_webhooks_own_test(
    new: str | None, old: str | None
) -> None:
    """The API server sends a DeviceClass request to our webhook exactly when the webhook
    would judge it ours (before or after the change): nothing of ours escapes it, nothing
    of other drivers reaches it (and so nothing of theirs is blocked while it is down)."""
    if new is None and old is None:
        return
    hook = next(
        h
        for h in find(render(), "ValidatingWebhookConfiguration", "dra-multi-network")["webhooks"]
        if h["name"].startswith("deviceclasses.")
    )
    (condition,) = hook["matchConditions"]
    obj, old_obj = CLASSES.get(new or ""), CLASSES.get(old or "")
    sent = cel.evaluate(condition["expression"], {"object": obj, "oldObject": old_obj})
    assert sent is (_is_generated_class(obj) or _is_generated_class(old_obj))


# --- the node agent's ResourceSlice policy -------------------------------------------------

NODE_USER = "system:serviceaccount:dmn-system:dra-multi-network-node"


def _slice(node: str | None, driver: str = DRIVER) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "driver": driver,
        "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
    }
    if node is not None:
        spec["nodeName"] = node
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "s"},
        "spec": spec,
    }


def _policy_verdict(
    user: str,
    bound_node: str | None,
    obj: Any,
    old: Any,
    name: str = "dra-multi-network-node-resourceslices",
) -> tuple[str, list[str]]:
    """('skip' (not matched), 'allow' or 'deny', the messages of the failed validations), as
    the API server evaluates the policy: the operation follows from which object is there,
    the variables are evaluated in order (a later one may use an earlier one)."""
    policy = find(render(), "ValidatingAdmissionPolicy", name)["spec"]
    return evaluate_policy(policy, user, bound_node, obj, old)


def _policy_decision(
    user: str,
    bound_node: str | None,
    obj: Any,
    old: Any,
    name: str = "dra-multi-network-node-resourceslices",
) -> str:
    """'skip' (not matched), 'allow', or 'deny', as the API server evaluates the policy."""
    return _policy_verdict(user, bound_node, obj, old, name)[0]


@pytest.mark.adversarial
@pytest.mark.parametrize(
    ("bound", "obj", "old", "decision"),
    [
        ("n1", _slice("n1"), None, "allow"),  # create own
        ("n1", _slice("n1"), _slice("n1"), "allow"),  # update own
        ("n1", None, _slice("n1"), "allow"),  # delete own
        ("n1", _slice("n2"), None, "deny"),  # create for another node
        ("n1", _slice("n1"), _slice("n2"), "deny"),  # take over another node's slice
        ("n1", None, _slice("n2"), "deny"),  # delete another node's slice
        ("n1", _slice("n1", driver="gpu.example.com"), None, "deny"),  # another driver
        ("n1", _slice(None), None, "deny"),  # a node-less (network-wide) slice
        (None, _slice("n1"), None, "deny"),  # a credential not bound to a node
    ],
)
def test_node_agent_writes_only_its_own_slices(
    bound: str | None, obj: Any, old: Any, decision: str
) -> None:
    assert _policy_decision(NODE_USER, bound, obj, old) == decision


def test_policy_does_not_touch_other_writers() -> None:
    other = "system:serviceaccount:kube-system:other-driver"
    assert _policy_decision(other, None, _slice("n2", "gpu.example.com"), None) == "skip"
    assert _policy_decision("system:node:n1", "n1", _slice("n2"), None) == "skip"


def _allocation(node: str) -> dict[str, Any]:
    owner = {
        "claimNamespace": "ns",
        "claimName": "c",
        "claimUID": "u",
        "nodeName": node,
        "operationID": "op",
    }
    return {
        "apiVersion": "networking.dra-multi-network.schseba.github.io/v1alpha1",
        "kind": "IPAllocation",
        "metadata": {"name": "p-10-56-0-5"},
        "spec": {"pool": "p", "address": "10.56.0.5", "owner": owner},
    }


@pytest.mark.adversarial
@pytest.mark.parametrize(
    ("bound", "obj", "old", "decision"),
    [
        ("n1", _allocation("n1"), None, "allow"),  # take an address for its own Pod
        ("n1", None, _allocation("n1"), "allow"),  # release its own
        ("n1", _allocation("n2"), None, "deny"),  # take one in another node's name
        ("n1", None, _allocation("n2"), "deny"),  # free another node's address
        (None, _allocation("n1"), None, "deny"),  # a credential not bound to a node
    ],
)
def test_node_agent_takes_and_releases_only_its_own_addresses(
    bound: str | None, obj: Any, old: Any, decision: str
) -> None:
    name = "dra-multi-network-node-ipallocations"
    assert _policy_decision(NODE_USER, bound, obj, old, name) == decision
    assert _policy_decision("system:serviceaccount:x:controller", None, obj, old, name) == "skip"


def _attachment_status(node: str) -> dict[str, Any]:
    return {
        "apiVersion": "networking.dra-multi-network.schseba.github.io/v1alpha1",
        "kind": "NetworkAttachmentStatus",
        "metadata": {"name": "a", "namespace": "ns"},
        "spec": {"nodeName": node, "podUID": "u"},
    }


@pytest.mark.adversarial
@pytest.mark.parametrize(
    ("bound", "obj", "old", "decision"),
    [
        ("n1", _attachment_status("n1"), None, "allow"),  # record its own attachment
        ("n1", _attachment_status("n1"), _attachment_status("n1"), "allow"),  # report it
        ("n1", None, _attachment_status("n1"), "allow"),  # delete its own
        ("n1", _attachment_status("n2"), None, "deny"),  # forge another node's attachment
        ("n1", _attachment_status("n1"), _attachment_status("n2"), "deny"),  # overwrite one
        ("n1", None, _attachment_status("n2"), "deny"),  # delete another node's
        (None, _attachment_status("n1"), None, "deny"),  # a credential not bound to a node
    ],
)
def test_node_agent_reports_only_its_own_attachments(
    bound: str | None, obj: Any, old: Any, decision: str
) -> None:
    name = "dra-multi-network-node-attachmentstatuses"
    assert _policy_decision(NODE_USER, bound, obj, old, name) == decision
    assert _policy_decision("system:serviceaccount:x:controller", None, obj, old, name) == "skip"


def test_node_status_policies_match_the_status_subresource() -> None:
    """The agent reports through ``networkattachmentstatuses/status``: a policy on the main
    resource alone would let it rewrite another node's status there."""
    name = "dra-multi-network-node-attachmentstatuses"
    (rule,) = find(render(), "ValidatingAdmissionPolicy", name)["spec"]["matchConstraints"][
        "resourceRules"
    ]
    assert set(rule["resources"]) == {
        "networkattachmentstatuses",
        "networkattachmentstatuses/status",
    }
    assert set(rule["operations"]) == {"CREATE", "UPDATE", "DELETE"}


# --- the node agent and the DeviceExposurePolicies ----------------------------------------


def test_the_agent_reads_policies_and_writes_nothing_of_them() -> None:
    """The agent reports on the policies in an annotation of its own Node (design §5.2,
    templates/node-capabilities.yaml); only the controller writes their status, so the agent
    has no permission on ``deviceexposurepolicies/status`` and no admission policy narrows
    a write it cannot make."""
    docs = render()
    rules = find(docs, "ClusterRole", "dra-multi-network-node")["rules"]
    granted = {
        (res, verb)
        for rule in rules
        if GROUP in rule["apiGroups"] or "*" in rule["apiGroups"]
        for res in rule["resources"]
        if res.startswith("deviceexposurepolicies") or res.startswith("*")
        for verb in rule["verbs"]
    }
    assert granted == {
        ("deviceexposurepolicies", "get"),
        ("deviceexposurepolicies", "list"),
        ("deviceexposurepolicies", "watch"),
    }
    policies = {d["metadata"]["name"] for d in docs if d["kind"].startswith("ValidatingAdmission")}
    assert "dra-multi-network-node-policystatus" not in policies


@pytest.mark.parametrize(
    ("sets", "expected"),
    [
        ((), "namespace pins survive agent restarts"),
        (("nodeAgent.privileged=false",), "NET_ADMIN, SYS_ADMIN: namespace pins do NOT survive"),
        (("nodeAgent.enabled=false",), "Node agent: not installed"),
    ],
)
def test_notes_render(tmp_path: Path, sets: tuple[str, ...], expected: str) -> None:
    """NOTES.txt rendered by Helm's own engine (``tpl`` over a copy of the chart: ``helm
    install --dry-run`` would need a cluster)."""
    import shutil

    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    shutil.copy(CHART / "templates" / "NOTES.txt", chart / "notes-source.txt")
    (chart / "templates" / "notes-check.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\n"
        'data:\n  notes: {{ tpl (.Files.Get "notes-source.txt") . | quote }}\n'
    )
    args = ["template", "dmn", str(chart), "-n", "dmn-system"]
    args += ["--show-only", "templates/notes-check.yaml"]
    for item in sets:
        args += ["--set", item]
    notes = yaml.safe_load(helm(*args).stdout)["data"]["notes"]
    assert expected in notes
    assert "kubectl -n dmn-system rollout status deployment/dra-multi-network-controller" in notes


def test_chart_metadata() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["apiVersion"] == "v2" and Path(CHART / "values.schema.json").is_file()


def test_upstream_lab_takes_rbac_and_webhook_from_the_rendered_chart() -> None:
    """The upstream lab's process driver applies the chart's RBAC and webhook configuration
    as Helm renders them (lab/upstream/driver.py)."""
    from dmn.lab.upstream import driver

    controller = driver._render(CHART / "templates" / "controller.yaml")
    kinds = {d["kind"] for d in controller}
    assert {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"} <= kinds
    for doc in controller:
        assert doc["metadata"].get("namespace") in (None, driver.DRIVER_NAMESPACE)
    configs = {
        (d["kind"], d["metadata"]["name"]): d
        for d in driver._render(CHART / "templates" / "webhook.yaml")
        if d["kind"].endswith("WebhookConfiguration")
    }
    assert len(configs["ValidatingWebhookConfiguration", "dra-multi-network"]["webhooks"]) == 3
    assert set(configs) == {
        ("ValidatingWebhookConfiguration", "dra-multi-network"),
        ("ValidatingWebhookConfiguration", "dra-multi-network-pods"),
        ("MutatingWebhookConfiguration", "dra-multi-network-pods"),
    }
    kinds = {d["kind"] for d in driver._render(CHART / "templates" / "nri-admission.yaml")}
    assert kinds == {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}


def test_the_upstream_labs_values_run_the_controller_as_the_defaults_do(tmp_path: Path) -> None:
    """``dmn lab up --backend upstream --install helm`` (lab/upstream/helm_driver.py) keeps
    the chart's controller defaults — two replicas on the Pod network behind the
    PodDisruptionBudget, surge rollouts, the preStop drain — and points both components at
    the API server's node address (the lab has no Service proxy)."""
    from dmn.lab.upstream.configs import NODE_IP, Layout
    from dmn.lab.upstream.helm_driver import lab_values

    values = tmp_path / "lab-values.yaml"
    values.write_text(yaml.safe_dump(lab_values(Layout(tmp_path / "up"), 6443, 19811)))
    docs = render([str(values)], namespace="dra-multi-network")
    deployment = find(docs, "Deployment")["spec"]
    pod = deployment["template"]["spec"]
    assert deployment["replicas"] == 2 and "strategy" not in deployment
    assert "hostNetwork" not in pod
    assert pod["containers"][0]["lifecycle"]["preStop"] == {"sleep": {"seconds": 5}}
    assert find(docs, "PodDisruptionBudget")["spec"]["minAvailable"] == 1
    agent = find(docs, "DaemonSet")["spec"]["template"]["spec"]
    assert agent["hostNetwork"] is True
    api_env = [
        {"name": "KUBERNETES_SERVICE_HOST", "value": NODE_IP},
        {"name": "KUBERNETES_SERVICE_PORT", "value": "6443"},
    ]
    assert pod["containers"][0]["env"][2:] == api_env
    assert agent["containers"][0]["env"][1:] == api_env


# --- Pod admission: the webhooks' matchConditions and the NRI toleration policy -----------


def _pod(
    claims: bool = False,
    limits: dict[str, str] | None = None,
    init_limits: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    namespace: str = "t",
    service_account: str = "default",
) -> dict[str, Any]:
    def container(name: str, lim: dict[str, str] | None) -> dict[str, Any]:
        return {"name": name, "image": "x", **({"resources": {"limits": lim}} if lim else {})}

    spec: dict[str, Any] = {
        "serviceAccountName": service_account,
        "containers": [container("app", limits)],
    }
    if init_limits:
        spec["initContainers"] = [container("init", init_limits)]
    if claims:
        spec["resourceClaims"] = [{"name": "n", "resourceClaimTemplateName": "t"}]
    meta: dict[str, Any] = {"name": "p", "namespace": namespace}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


POD_CASES = {
    "no-claims": (_pod(), False),
    "cpu-memory-hugepages": (
        _pod(limits={"cpu": "1", "memory": "1Gi", "hugepages-2Mi": "2Mi"}),
        False,
    ),
    "claims": (_pod(claims=True), True),
    "extended": (_pod(limits={"example.com/net": "1"}), True),
    "implicit-extended-init": (
        _pod(init_limits={"deviceclass.resource.kubernetes.io/net-root": "1"}),
        True,
    ),
}


@pytest.mark.parametrize("case", POD_CASES)
def test_pod_webhooks_are_sent_only_pods_with_claims_or_extended_resources(case: str) -> None:
    """A Pod without claims and without extended-resource limits never reaches our webhooks
    (so nothing about our controller can delay or change it)."""
    pod, sent = POD_CASES[case]
    docs = render()
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        (hook,) = find(docs, kind, "dra-multi-network-pods")["webhooks"]
        (condition,) = hook["matchConditions"]
        got = cel.evaluate(condition["expression"], {"object": pod, "oldObject": None})
        assert got is sent, (kind, case)


REQ = "required-plugins.noderesource.dev"
OURS = '["dra-multi-network"]'
UPDATE_CASES = {
    "removes-ours": ({f"{REQ}/pod": OURS}, {}, True),
    "changes-ours": ({f"{REQ}/pod": OURS}, {f"{REQ}/pod": "[]"}, True),
    "adds-a-container-key": (
        {f"{REQ}/pod": OURS},
        {f"{REQ}/pod": OURS, f"{REQ}/container.app": "[]"},
        True,
    ),
    "adds-the-bare-key": ({}, {REQ: "[]"}, True),
    "network-status-only": (
        {f"{REQ}/pod": OURS},
        {f"{REQ}/pod": OURS, "k8s.v1.cni.cncf.io/network-status": "[]"},
        False,
    ),
    "no-annotations-either-side": (None, None, False),
    "unrelated-label-edit": ({"a": "b"}, {"a": "c"}, False),
}


@pytest.mark.parametrize("case", UPDATE_CASES)
def test_pod_validation_sees_an_update_only_when_required_plugins_change(case: str) -> None:
    """Claims and limits are immutable: an update matters to the webhook only when it adds,
    changes or removes a required-plugins annotation; every other update of our Pods (the
    node agent's network-status patch) is not sent."""
    (hook,) = find(render(), "ValidatingWebhookConfiguration", "dra-multi-network-pods")["webhooks"]
    (condition,) = hook["matchConditions"]
    before, after, sent = UPDATE_CASES[case]
    ctx = {
        "object": _pod(claims=True, annotations=after),
        "oldObject": _pod(claims=True, annotations=before),
    }
    assert cel.evaluate(condition["expression"], ctx) is sent, case


def _toleration_decision(
    obj: dict[str, Any], old: dict[str, Any] | None = None, values: tuple[str, ...] = ()
) -> str:
    """'skip', 'allow' or 'deny' as the API server evaluates the toleration policy."""
    policy = find(render(values), "ValidatingAdmissionPolicy", "dra-multi-network-nri-toleration")
    spec = policy["spec"]
    request = {"namespace": obj["metadata"]["namespace"], "userInfo": {"username": "u"}}
    ctx: dict[str, Any] = {"request": request, "object": obj, "oldObject": old}
    if not all(cel.evaluate(m["expression"], ctx) for m in spec["matchConditions"]):
        return "skip"
    return (
        "allow" if all(cel.evaluate(v["expression"], ctx) for v in spec["validations"]) else "deny"
    )


AGENT = {"namespace": "dmn-system", "service_account": "dra-multi-network-node"}


@pytest.mark.adversarial
@pytest.mark.parametrize(
    ("pod", "old", "decision"),
    [
        (_pod(annotations={TOLERATE: "true"}), None, "deny"),  # a tenant
        (_pod(annotations={f"{TOLERATE}/pod": "true"}), None, "deny"),
        (_pod(annotations={f"{TOLERATE}/container.app": "true"}), None, "deny"),
        (_pod(annotations={TOLERATE: "true"}, namespace="dmn-system"), None, "deny"),  # not the SA
        (
            _pod(annotations={TOLERATE: "true"}, service_account="dra-multi-network-node"),
            None,
            "deny",
        ),  # the agent's SA name in another namespace
        (_pod(annotations={TOLERATE: "true"}, **AGENT), None, "allow"),  # the agent
        (_pod(annotations={f"{TOLERATE}x": "true"}), None, "skip"),  # another key
        (_pod(annotations={"a": "b"}), None, "skip"),
        (_pod(), None, "skip"),
        (_pod(annotations={TOLERATE: "true"}), _pod(annotations={}), "deny"),  # added by update
        (_pod(annotations={TOLERATE: "true"}), _pod(annotations={TOLERATE: "false"}), "deny"),
        (
            _pod(annotations={TOLERATE: "true", "x": "y"}),
            _pod(annotations={TOLERATE: "true"}),
            "skip",
        ),  # a value it already had
    ],
)
def test_only_the_node_agent_may_carry_the_nri_toleration(
    pod: dict[str, Any], old: dict[str, Any] | None, decision: str
) -> None:
    assert _toleration_decision(pod, old) == decision


def test_the_toleration_key_is_a_value() -> None:
    docs = render(("all-options.yaml",))
    template = find(docs, "DaemonSet")["spec"]["template"]
    assert template["metadata"]["annotations"] == {"example.com/tolerate-nri": "true"}
    tenant = _pod(annotations={"example.com/tolerate-nri": "true"})
    assert _toleration_decision(tenant, values=("all-options.yaml",)) == "deny"
    assert (
        _toleration_decision(_pod(annotations={TOLERATE: "true"}), values=("all-options.yaml",))
        == "skip"
    )
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        (hook,) = find(docs, kind, "dra-multi-network-pods")["webhooks"]
        assert hook["timeoutSeconds"] == 3
