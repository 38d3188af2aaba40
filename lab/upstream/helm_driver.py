"""``dmn lab up --backend upstream --install helm``: our driver installed the way users do.

:class:`HelmDriver` is the second :class:`~dmn.lab.upstream.driver.DriverDeployment`: it
builds (or reuses) the project's image for the current checkout (``image/build.py``: no
container engine), imports the OCI archive into the lab's containerd (``ctr -n k8s.io
images import``, pinned so kubelet's image GC keeps it), and runs the real ``helm install``
of ``charts/dra-multi-network``, so the node agent (DaemonSet) and the controller
(Deployment) run as Pods under the identities, RBAC and admission policy the chart gives
them. Then it applies the lab node's DeviceExposurePolicies and waits for the Pod agent's
ResourceSlices and its kubelet registration socket.

What the lab needs from the chart's values (:func:`lab_values`), each an ordinary option:

* the lab's own paths — kubelet's root, containerd's NRI socket and sandbox netns
  directory and the agent's state directory all live below the lab directory;
* ``apiServer.host/port`` — the lab runs no Service proxy (the ``kubernetes`` Service's
  cluster IP leads nowhere): both components reach the API server at the node address it
  listens on (the agent from the host network, the controller from the Pod network, whose
  one route to the node address goes through the host's address on the bridge);
* the controller as users run it: on the Pod network, the chart's two replicas behind the
  PodDisruptionBudget — the API server calls the webhook at a ready endpoint's Pod address
  (``--enable-aggregator-routing``), which the host reaches on the bridge, so a rollout
  surges a new replica before it retires an old one and the webhook serves throughout;
* ``image.pullPolicy=Never`` — the imported image is the only source;
* ``nodeAgent.extraArgs`` — the lab's two "NICs" (``--lab-link``);
* no device directories (the lab hands out no device nodes; kubelet would create them).

``uninstall`` is ``helm uninstall --wait``.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

import dmn
from dmn.api.cluster import Cluster, connect
from dmn.api.cluster import resources as r
from dmn.api.identity import DRIVER
from dmn.lab import node
from dmn.lab.cluster import CHART
from dmn.lab.upstream import build, images
from dmn.lab.upstream.configs import DRIVER_NAMESPACE, NODE_IP, Layout
from dmn.lab.upstream.driver import LAB_LINKS, DriverContext, DriverError, _wait
from dmn.lab.upstream.workloads import DAEMON_SETS, DEPLOYMENTS

log = logging.getLogger(__name__)

RELEASE = "dmn"
IMAGE_REPOSITORY = "dra-multi-network"
# the checkout's engine-free image build (absent from an installed wheel)
IMAGE_BUILD = Path(dmn.__file__).resolve().parent.parent / "image" / "build.py"
ARCHIVE_ENV = "DMN_IMAGE_ARCHIVE"  # an already built archive to import instead


def project_version() -> str:
    """The chart's appVersion is the project's version; the image is tagged with it."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    return str(chart["appVersion"])


def netns_dir(layout: Layout) -> Path:
    """Where the lab's containerd bind-mounts sandbox network namespaces
    (``netns_mounts_under_state_dir``: below the CRI plugin's state directory)."""
    return layout.containerd / "state" / "io.containerd.grpc.v1.cri" / "netns"


def nri_socket_dir(layout: Layout) -> Path:
    return layout.nri_socket.parent


def lab_values(layout: Layout, apiserver_port: int, agent_health: int) -> dict[str, Any]:
    """The chart values of a lab install (see the module docstring for why each)."""
    return {
        "image": {
            "repository": IMAGE_REPOSITORY,
            "tag": project_version(),
            "pullPolicy": "Never",
        },
        "apiServer": {"host": NODE_IP, "port": apiserver_port},
        "controller": {"resources": {"requests": {"cpu": "10m", "memory": "64Mi"}}},
        "nodeAgent": {
            "stateDir": str(layout.agent_state),
            "kubeletDir": str(layout.kubelet_root),
            "nriSocketDir": str(nri_socket_dir(layout)),
            "netnsDir": str(netns_dir(layout)),
            "deviceDirs": [],
            "cdiDir": str(layout.cdi_specs),
            "healthPort": agent_health,
            "readiness": {"intervalSeconds": 1, "periodSeconds": 2},
            "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}},
            "extraArgs": [f"--lab-link={link}" for link in LAB_LINKS],
        },
    }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Helm:
    """The pinned helm binary against the lab's API server (admin kubeconfig), with its
    cache/config/data homes below the lab directory."""

    def __init__(self, layout: Layout) -> None:
        self.binary = build.bin_dir("helm") / "helm"
        self.layout = layout

    def run(self, *args: str, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
        home = self.layout.root / "helm"
        env = {
            **os.environ,
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
            "KUBECONFIG": str(self.layout.kubeconfig("admin")),
        }
        argv = [str(self.binary), *args]
        log.info("event=helm argv=%s", " ".join(args))
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)

    def check(self, *args: str, timeout: float = 300.0) -> str:
        proc = self.run(*args, timeout=timeout)
        if proc.returncode != 0:
            detail = (proc.stderr or proc.stdout).strip()[-2000:]
            raise DriverError("E_HELM", f"helm {' '.join(args[:1])}: {detail}")
        return proc.stdout


def image_archive() -> Path:
    """``$DMN_IMAGE_ARCHIVE``, else the checkout's image built (or reused from its cache)
    by ``image/build.py`` for the current sources."""
    given = os.environ.get(ARCHIVE_ENV)
    if given:
        return Path(given)
    if not IMAGE_BUILD.is_file():
        raise DriverError(
            "E_IMAGE_BUILD", f"{IMAGE_BUILD} not found; set {ARCHIVE_ENV} to an image archive"
        )
    argv = ["python3", str(IMAGE_BUILD), "--python", sys.executable]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        detail = proc.stderr.strip().splitlines()[-3:]
        raise DriverError("E_IMAGE_BUILD", f"image/build.py failed: {' | '.join(detail)}")
    return Path(json.loads(proc.stdout.strip().splitlines()[-1])["archive"])


def image_ref() -> str:
    """The reference kubelet resolves the chart's image to (Docker Hub's normalization of
    ``dra-multi-network:<appVersion>``), which the archive's index names it."""
    return f"docker.io/library/{IMAGE_REPOSITORY}:{project_version()}"


class HelmDriver:
    """The chart installed by the real Helm, its image imported (module docstring)."""

    def __init__(self, timeout: float = 240.0) -> None:
        self.timeout = timeout
        self.values: dict[str, Any] = {}  # the values of the last install or upgrade
        self.layout: Layout | None = None

    def install(self, ctx: DriverContext) -> None:
        if not ctx.with_node:
            raise DriverError("E_USAGE", "--install helm needs the node (kubelet, containerd)")
        archive = image_archive()
        ctr = build.bin_dir("containerd") / "ctr"
        try:
            images.import_images(ctr, str(ctx.layout.containerd_socket), {image_ref(): archive})
        except images.ImageError as exc:
            raise DriverError(exc.code, exc.message) from exc
        port = int(ctx.server.rsplit(":", 1)[1])
        self.layout = ctx.layout
        self.values = lab_values(ctx.layout, port, _free_port())
        values = self._write_values(ctx.layout)
        helm = Helm(ctx.layout)
        helm.check(
            "install",
            RELEASE,
            str(CHART),
            "--namespace",
            DRIVER_NAMESPACE,
            "--create-namespace",
            "--values",
            str(values),
            "--wait",
            "--timeout",
            f"{int(self.timeout)}s",
            timeout=self.timeout + 60,
        )
        _wait("the chart's Pods ready", lambda: rolled_out(ctx.admin), self.timeout)
        for doc in node.policies():
            ctx.admin.apply(doc)

        def published() -> bool:
            slices = ctx.admin.list(r.RESOURCE_SLICES).items
            return any((s.get("spec") or {}).get("driver") == DRIVER for s in slices)

        _wait("the node agent Pod's ResourceSlices", published, self.timeout)
        sock = ctx.layout.kubelet_root / "plugins_registry" / f"{DRIVER}-reg.sock"
        _wait("the node agent Pod's kubelet registration socket", sock.exists, self.timeout)

    def _write_values(self, layout: Layout) -> Path:
        path = layout.root / "helm-values.yaml"
        path.write_text(yaml.safe_dump(self.values, sort_keys=False))
        return path

    def upgrade(self, overrides: dict[str, Any]) -> str:
        """``helm upgrade --wait`` of the installed release with ``overrides`` merged into
        its values (the lab's own values stay); returns Helm's ``--debug`` log (stderr), which names
        every object the upgrade patched ("Patch KIND ...") or left alone ("Looks like
        there are no changes for KIND ...")."""
        if self.layout is None:
            raise DriverError("E_HELM", "helm upgrade before install")
        _merge(self.values, overrides)
        values = self._write_values(self.layout)
        helm = Helm(self.layout)
        proc = helm.run(
            "upgrade",
            RELEASE,
            str(CHART),
            "--namespace",
            DRIVER_NAMESPACE,
            "--values",
            str(values),
            "--wait",
            "--timeout",
            f"{int(self.timeout)}s",
            "--debug",
            timeout=self.timeout + 60,
        )
        if proc.returncode != 0:  # the error is stderr's last line (stdout: the manifest)
            raise DriverError("E_HELM", f"helm upgrade: {proc.stderr.strip()[-2000:]}")
        admin = Cluster(connect(kubeconfig=str(self.layout.kubeconfig("admin"))))
        try:
            _wait(
                "the chart's Pods ready after the upgrade", lambda: rolled_out(admin), self.timeout
            )
        finally:
            admin.close()
        return proc.stderr

    def render(self, overrides: dict[str, Any]) -> list[dict[str, Any]]:
        """``helm template`` of the chart with the installed release's values and
        ``overrides`` merged in (the release is left alone): the manifests an upgrade to
        those values would apply, as documents."""
        if self.layout is None:
            raise DriverError("E_HELM", "helm template before install")
        values = json.loads(json.dumps(self.values))
        _merge(values, overrides)
        path = self.layout.root / "helm-render-values.yaml"
        path.write_text(yaml.safe_dump(values, sort_keys=False))
        out = Helm(self.layout).check(
            "template", RELEASE, str(CHART), "--namespace", DRIVER_NAMESPACE, "--values", str(path)
        )
        return [d for d in yaml.safe_load_all(out) if d]

    def uninstall(self, ctx: DriverContext) -> None:
        helm = Helm(ctx.layout)
        proc = helm.run("status", RELEASE, "--namespace", DRIVER_NAMESPACE)
        if proc.returncode != 0:
            return  # never installed (or already uninstalled)
        helm.check(
            "uninstall",
            RELEASE,
            "--namespace",
            DRIVER_NAMESPACE,
            "--wait",
            "--timeout",
            f"{int(self.timeout)}s",
            timeout=self.timeout + 60,
        )


def rolled_out(admin: Cluster) -> bool:
    """Every Pod of the node agent's DaemonSet and the controller's Deployment is of the
    current template and Ready, and no older one is left.

    Why not ``helm --wait`` alone: Helm counts a workload ready once ``replicas -
    maxUnavailable`` Pods are — zero for the DaemonSet on one node (its ``maxUnavailable:
    1``) — so it returns before the agent's Pod is."""
    ds = admin.get(DAEMON_SETS, "dra-multi-network-node", DRIVER_NAMESPACE)
    dep = admin.get(DEPLOYMENTS, "dra-multi-network-controller", DRIVER_NAMESPACE)
    d, s = ds.get("status") or {}, dep.get("status") or {}
    want = int(dep["spec"].get("replicas", 1))
    return (
        d.get("observedGeneration") == ds["metadata"]["generation"]
        and int(d.get("desiredNumberScheduled", 0)) > 0
        and d.get("numberReady") == d.get("desiredNumberScheduled")
        and d.get("updatedNumberScheduled") == d.get("desiredNumberScheduled")
        and int(d.get("currentNumberScheduled", 0)) == int(d.get("desiredNumberScheduled", 0))
        and s.get("observedGeneration") == dep["metadata"]["generation"]
        and s.get("readyReplicas") == want
        and s.get("updatedReplicas") == want
        and s.get("replicas") == want
    )


def _merge(into: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value
