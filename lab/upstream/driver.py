"""How the upstream lab brings up *our* driver: the one replaceable piece of ``up``.

:class:`ProcessDriver` (the default) installs what the Helm chart would — generated CRDs,
the builtin NetworkPlugins, the namespace and the chart's controller RBAC, a ClusterRole
for the node agent — then runs ``dmn controller`` (webhook on 127.0.0.1 with a serving
certificate from the lab CA) and registers the chart's webhook configurations (validating,
and the Pod mutation) pointed at it by URL and the chart's NRI toleration policy, applies
the lab node's DeviceExposurePolicies, and runs ``dmn node`` against the lab's kubelet and
containerd. Each runs as a host process under the identity the chart gives it (a client
certificate whose CN is the service account's user name).

Another way to install (``helm install`` of the chart) is a second class with the same two
methods, ``install`` and ``uninstall``; the lab takes any :class:`DriverDeployment`.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

from dmn.api.cluster import AlreadyExists, Cluster
from dmn.api.cluster import resources as r
from dmn.api.identity import DRIVER
from dmn.controller.conditions import condition_true
from dmn.lab import node
from dmn.lab.cluster import CHART, CRD_DIR, PLUGIN_DIR, chart_manifests
from dmn.lab.upstream import build
from dmn.lab.upstream.configs import DRIVER_NAMESPACE, NODE_NAME, Layout, kubeconfig
from dmn.lab.upstream.pki import LabCA
from dmn.lab.upstream.processes import ProcessTable

# the C (libyaml) parser when PyYAML has it: the same documents, parsed several times faster
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

log = logging.getLogger(__name__)

CONTROLLER_SA = "dra-multi-network-controller"
NODE_SA = "dra-multi-network-node"
LAB_LINKS = ("dmnlab0", "dmnlab1")  # the node's "NICs": a veth pair the lab creates


def sa_user(name: str) -> str:
    return f"system:serviceaccount:{DRIVER_NAMESPACE}:{name}"


class DriverError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message = code, message


@dataclass(frozen=True)
class DriverContext:
    """What a deployment gets from the lab."""

    layout: Layout
    ca: LabCA
    admin: Cluster
    procs: ProcessTable
    webhook_port: int
    server: str  # the API server URL
    with_node: bool = True  # False: a control-plane-only lab (no kubelet: no node agent)


@dataclass(frozen=True)
class AgentNode:
    """Which node an agent serves: its name, the links it takes as NICs and the name of
    its process in the lab's table (the defaults are the first node's)."""

    name: str = NODE_NAME
    links: tuple[str, ...] = LAB_LINKS
    process: str = "dmn-node"


class DriverDeployment(Protocol):
    def install(self, ctx: DriverContext) -> None: ...

    def uninstall(self, ctx: DriverContext) -> None: ...


def _render(path: Path) -> list[dict[str, Any]]:
    """The chart template's documents as the real Helm renders them (default values, release
    namespace = the lab's driver namespace); only RBAC and webhook documents are used."""
    helm = build.bin_dir("helm") / "helm"
    show = str(path.resolve().relative_to(CHART.resolve()))
    argv = [str(helm), "template", "dmn", str(CHART), "--namespace", DRIVER_NAMESPACE]
    proc = subprocess.run(
        [*argv, "--show-only", show], capture_output=True, text=True, timeout=120, check=False
    )
    if proc.returncode != 0:
        raise DriverError("E_CHART", f"helm template --show-only {show}: {proc.stderr.strip()}")
    return [doc for doc in yaml.load_all(proc.stdout, Loader=_SAFE_LOADER) if isinstance(doc, dict)]


RBAC_KINDS = ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
WEBHOOK_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")


def node_agent_rbac() -> list[dict[str, Any]]:
    """The node agent's permissions (the chart has no agent DaemonSet yet)."""
    group = "networking.dra-multi-network.schseba.github.io"
    rules = [
        # policies are only read: the agent reports on them in an annotation of its own Node
        # (the nodes rule below), the controller writes their status
        {"apiGroups": [group], "resources": ["*"], "verbs": ["get", "list", "watch"]},
        {
            "apiGroups": [group],
            "resources": ["networkattachmentstatuses", "networkattachmentstatuses/status"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        },
        # the chart's IPAM rules (design §5.7)
        {
            "apiGroups": [group],
            "resources": ["ipallocations"],
            "verbs": ["get", "list", "create", "delete"],
        },
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceslices"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        },
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceclaims", "deviceclasses"],
            "verbs": ["get", "list", "watch"],
        },
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceclaims/status"],
            "verbs": ["get", "update", "patch"],
        },
        # kube-apiserver 1.37 authorizes every change of a driver's status.devices entries
        # on the synthetic subresource resourceclaims/driver named after the driver, with
        # verb "associated-node:<verb>" (a service account bound to the claim's node) or
        # "arbitrary-node:<verb>" (pkg/registry/resource/utils.go AuthorizedForDeviceStatus)
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceclaims/driver"],
            "resourceNames": [DRIVER],
            "verbs": [
                "associated-node:update",
                "associated-node:patch",
                "arbitrary-node:update",
                "arbitrary-node:patch",
            ],
        },
        # get: its own Node; patch: its capability and policy-status annotations
        # (dmn/agent/capability_report.py, dmn/agent/personas/status_report.py)
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch"]},
        # Multus automatic mode (the chart's rule, design §6.8): templates read, shadows
        # created, deleted with a UID precondition and their finalizer patched away
        {
            "apiGroups": ["k8s.cni.cncf.io"],
            "resources": ["network-attachment-definitions"],
            "verbs": ["get", "create", "delete", "patch"],
        },
        {
            "apiGroups": ["", "events.k8s.io"],
            "resources": ["events"],
            "verbs": ["get", "create", "update", "patch"],
        },
    ]
    meta = {"name": NODE_SA}
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": meta,
            "rules": rules,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": meta,
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": NODE_SA,
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": NODE_SA, "namespace": DRIVER_NAMESPACE}
            ],
        },
    ]


def sa_kubeconfig(ctx: DriverContext, name: str) -> Path:
    """A kubeconfig carrying a real token of the service account ``name`` (TokenRequest,
    24 h), so the process acts under exactly the identity the chart binds."""
    sa = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": name, "namespace": DRIVER_NAMESPACE},
    }
    with contextlib.suppress(AlreadyExists):
        ctx.admin.create(r.SERVICE_ACCOUNTS, sa, DRIVER_NAMESPACE)
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": 86400},
    }
    path = f"/api/v1/namespaces/{DRIVER_NAMESPACE}/serviceaccounts/{name}/token"
    token = str(ctx.admin.request("POST", path, body=request)["status"]["token"])
    out = ctx.layout.kubeconfig(name)
    out.write_text(kubeconfig(ctx.server, ctx.ca.ca_cert, None, None, sa_user(name), token))
    out.chmod(0o600)
    return out


def _wait(what: str, check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.3)
    raise DriverError("E_LAB_START", f"{what}: not ready after {timeout:.0f}s")


def listening(port: int) -> bool:
    """Whether something accepts TCP connections on 127.0.0.1:``port``."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


class ProcessDriver:
    """Our controller and node agent as host processes (see the module docstring)."""

    def __init__(self, timeout: float = 120.0) -> None:
        self.timeout = timeout

    def install(self, ctx: DriverContext) -> None:
        admin = ctx.admin
        for doc in chart_manifests(CRD_DIR):
            admin.apply(doc)
        _wait("CRDs established", lambda: _crds_established(admin), self.timeout)
        namespace = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": DRIVER_NAMESPACE},
        }
        with contextlib.suppress(AlreadyExists):
            admin.create(r.NAMESPACES, namespace)
        for doc in _render(CHART / "templates" / "controller.yaml"):
            if doc.get("kind") in RBAC_KINDS:
                admin.apply(doc)
        for doc in node_agent_rbac():
            admin.apply(doc)
        for doc in chart_manifests(PLUGIN_DIR):
            admin.apply(doc)
        self._controller(ctx)
        self._webhook(ctx)
        for doc in node.policies():
            admin.apply(doc)
        if ctx.with_node:
            self._agent(ctx)

    def _controller(self, ctx: DriverContext) -> None:
        user = sa_user(CONTROLLER_SA)
        kc = sa_kubeconfig(ctx, CONTROLLER_SA)
        serving = ctx.ca.issue("webhook", "dmn-webhook", server_ips=("127.0.0.1",))
        argv = [sys.executable, "-m", "dmn", "controller", "--kubeconfig", str(kc)]
        argv += ["--no-leader-election", "--resync", "10"]
        argv += ["--webhook-cert", str(serving.cert), "--webhook-key", str(serving.key)]
        argv += ["--webhook-host", "127.0.0.1", "--webhook-port", str(ctx.webhook_port)]
        argv += ["--controller-user", user]
        ctx.procs.start("dmn-controller", argv)
        _wait("our admission webhook", lambda: listening(ctx.webhook_port), self.timeout)

    def _webhook(self, ctx: DriverContext) -> None:
        """The chart's webhook configurations (validating and the Pod mutation), each hook
        pointed by URL at the controller's port on the path the chart gives it, and the
        chart's NRI toleration policy (the API server evaluates it itself)."""
        bundle = base64.b64encode(ctx.ca.ca_cert.read_bytes()).decode()
        base = f"https://127.0.0.1:{ctx.webhook_port}"
        for doc in _render(CHART / "templates" / "webhook.yaml"):
            if doc.get("kind") not in WEBHOOK_KINDS:
                continue
            for hook in doc["webhooks"]:
                path = str(hook["clientConfig"]["service"].get("path") or "/validate")
                hook["clientConfig"] = {"url": base + path, "caBundle": bundle}
            ctx.admin.apply(doc)
        for doc in _render(CHART / "templates" / "nri-admission.yaml"):
            ctx.admin.apply(doc)

    def _agent(self, ctx: DriverContext) -> None:
        self.start_agent(ctx, AgentNode())

    def start_agent(self, ctx: DriverContext, node: AgentNode) -> None:
        """Run ``dmn node`` for ``node`` (its files below ``ctx.layout``) and wait until it
        has published its slices and registered with its kubelet."""
        kc = sa_kubeconfig(ctx, NODE_SA)
        kubelet = ctx.layout.kubelet_root
        argv = [sys.executable, "-m", "dmn", "node", "--kubeconfig", str(kc)]
        argv += ["--node-name", node.name, "--state-dir", str(ctx.layout.agent_state)]
        argv += ["--kubelet-registry-dir", str(kubelet / "plugins_registry")]
        argv += ["--kubelet-plugins-dir", str(kubelet / "plugins")]
        argv += ["--nri-socket", str(ctx.layout.nri_socket)]
        # the agent's own namespace is the host's: /proc/1/ns/net may be closed to us
        # (PID 1 of this machine is not in our user's reach), /proc/self is always ours
        argv += ["--host-netns", "/proc/self/ns/net"]
        for link in node.links:
            argv += ["--lab-link", link]
        ctx.procs.start(node.process, argv)

        def published() -> bool:
            record = ctx.procs.get(node.process)
            if record is None or not record.alive():
                raise DriverError("E_LAB_START", f"dmn node exited: {ctx.procs.tail(node.process)}")
            slices = ctx.admin.list(r.RESOURCE_SLICES).items
            return any(
                (s.get("spec") or {}).get("driver") == DRIVER
                and (s.get("spec") or {}).get("nodeName") == node.name
                for s in slices
            )

        _wait(f"the node agent's ResourceSlices of {node.name}", published, self.timeout)
        sock = kubelet / "plugins_registry" / f"{DRIVER}-reg.sock"
        _wait("the node agent's kubelet registration socket", sock.exists, self.timeout)

    def uninstall(self, ctx: DriverContext) -> None:
        ctx.procs.stop("dmn-node")
        ctx.procs.stop("dmn-controller")


def _crds_established(admin: Cluster) -> bool:
    crds = admin.list(r.CUSTOM_RESOURCE_DEFINITIONS).items
    ours = [c for c in crds if c["spec"]["group"].endswith("dra-multi-network.schseba.github.io")]
    return bool(ours) and all(condition_true(c, "Established") for c in ours)
