"""The real operators the chart's optional objects are written for, on the upstream lab.

``metrics.serviceMonitor`` renders a prometheus-operator ServiceMonitor and
``webhook.certificates.source=certManager`` renders cert-manager Issuers and Certificates.
Neither is worth anything if the real operator reads it differently, so the helm e2e
module checks them against the real parts the pinned build step brings
(``lab/upstream/build.py``):

* prometheus-operator: its CRDs in the lab's API server, its ``operator`` command run on
  the host against that API server (the lab's admin credential), and the configuration it
  generates (no Prometheus server scrapes with it here);
* cert-manager: its CRDs, and its own certificate controllers and CA injector (the
  packages of its root module) run on the host against that API server. Its commands live
  in modules the module proxy does not serve, so the lab's two small mains
  (``lab/upstream/cert-manager``) start those packages; cert-manager's own webhook, which
  only validates cert-manager's objects, is not run.

Processes started here log to files below the lab directory and are killed on exit.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import gzip
import logging
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from dmn.api.cluster import AlreadyExists, Cluster, NotFound
from dmn.api.cluster import resources as r
from dmn.api.cluster.resources import Resource
from dmn.controller.conditions import condition, condition_true
from dmn.lab.upstream import build
from dmn.lab.upstream.cluster import UpstreamLab
from dmn.lab.upstream.demo import wait_for

log = logging.getLogger(__name__)

PROMETHEUSES = Resource("monitoring.coreos.com", "v1", "prometheuses", "Prometheus", True)
SERVICE_MONITORS = Resource(
    "monitoring.coreos.com", "v1", "servicemonitors", "ServiceMonitor", True
)
CERTIFICATES = Resource("cert-manager.io", "v1", "certificates", "Certificate", True)
ISSUERS = Resource("cert-manager.io", "v1", "issuers", "Issuer", True)
#: the Prometheus version the operator is told it configures: the newest of its
#: compatibility matrix (no Prometheus server runs here)
PROMETHEUS_VERSION = "v3.5.0"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _CrdLoader(yaml.SafeLoader):
    """YAML 1.2's reading of a plain ``=``: a string. PyYAML (YAML 1.1) resolves it to the
    ``value`` tag it cannot construct, and prometheus-operator's CRDs list ``=`` among
    their enum values."""


_CrdLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:value"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def crds(component: str) -> list[dict[str, Any]]:
    """The CRDs ``component``'s pinned module ships (copied by the build step)."""
    found = sorted(build.crd_dir(component).glob("*.yaml"))
    assert found, f"no CRDs for {component}: run python3 lab/upstream/build.py {component}"
    return [yaml.load(f.read_text(), Loader=_CrdLoader) for f in found]


@contextlib.contextmanager
def installed_crds(admin: Cluster, component: str, timeout: float = 60.0) -> Iterator[list[str]]:
    """``component``'s CRDs created and Established; deleted on exit (those this call made),
    and waited for until gone. A CRD deletion finishes asynchronously: an earlier test's
    CRD still terminating made the next create meet AlreadyExists, the CRD then vanished
    under the test, and cert-manager never found its resources (seen twice: the helm
    upgrade to cert-manager certificates waited out its 4 min)."""
    made: list[str] = []
    try:
        for crd in crds(component):
            name = crd["metadata"]["name"]
            _wait_gone_if_terminating(admin, name, timeout)
            try:
                admin.create(r.CUSTOM_RESOURCE_DEFINITIONS, crd)
                made.append(name)
            except AlreadyExists:
                pass

        def established() -> bool:
            return all(
                condition_true(admin.get(r.CUSTOM_RESOURCE_DEFINITIONS, name), "Established")
                for name in made
            )

        assert wait_for(established, timeout), f"{component} CRDs not Established"
        yield made
    finally:
        for name in made:
            with contextlib.suppress(NotFound):
                admin.delete(r.CUSTOM_RESOURCE_DEFINITIONS, name)
        for name in made:
            _wait_gone(admin, name, timeout)


def _exists(admin: Cluster, crd: str) -> bool:
    try:
        admin.get(r.CUSTOM_RESOURCE_DEFINITIONS, crd)
    except NotFound:
        return False
    return True


def _wait_gone_if_terminating(admin: Cluster, crd: str, timeout: float) -> None:
    try:
        meta = admin.get(r.CUSTOM_RESOURCE_DEFINITIONS, crd)["metadata"]
    except NotFound:
        return
    if meta.get("deletionTimestamp"):
        _wait_gone(admin, crd, timeout)


def _wait_gone(admin: Cluster, crd: str, timeout: float) -> None:
    """Wait until ``crd`` is gone, waking kube-apiserver's CRD finalizer when it stalls.

    The finalizer (apiextensions-apiserver v0.37.2, ``CRDFinalizer``) can lose its retry: a
    first pass fails with "storage is (re)initializing" (the CRD's watch cache is not ready
    yet), writes ``Terminating=InstanceDeletionFailed`` and requeues; the retry, reading its
    informer before that write arrived, meets a Conflict and returns as done, and the write's
    update event is ignored because only the Terminating condition changed. Nothing then
    retries until the informer's 5-minute resync. Any other change to the CRD requeues it,
    so an annotation is written while the condition says the instance deletion failed."""
    nudges = 0

    def gone() -> bool:
        nonlocal nudges
        try:
            stuck = admin.get(r.CUSTOM_RESOURCE_DEFINITIONS, crd)
        except NotFound:
            return True
        terminating = condition(stuck, "Terminating") or {}
        if terminating.get("reason") == "InstanceDeletionFailed":
            nudges += 1
            with contextlib.suppress(NotFound):
                admin.patch(
                    r.CUSTOM_RESOURCE_DEFINITIONS,
                    crd,
                    {"metadata": {"annotations": {"dmn.test/finalizer-nudge": str(nudges)}}},
                )
        return False

    if wait_for(gone, timeout):
        if nudges:
            log.info("event=crd-finalizer-nudged crd=%s nudges=%d", crd, nudges)
        return
    try:
        stuck = admin.get(r.CUSTOM_RESOURCE_DEFINITIONS, crd)
    except NotFound:
        return
    meta, status = stuck["metadata"], stuck.get("status") or {}
    raise AssertionError(
        f"CRD {crd} stays after {nudges} nudges: finalizers={meta.get('finalizers')} "
        f"deletionTimestamp={meta.get('deletionTimestamp')} "
        f"conditions={status.get('conditions')}"
    )


def _process(argv: list[str], log_file: Path) -> subprocess.Popen[bytes]:
    log.info("event=start argv=%s", " ".join(argv))
    with log_file.open("ab") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextlib.contextmanager
def prometheus_operator(lab: UpstreamLab, namespace: str) -> Iterator[Path]:
    """The pinned ``operator`` on the host, reconciling ``namespace`` against the lab's API
    server with the admin client certificate; yields its log file."""
    binary = build.bin_dir("prometheus-operator") / "operator"
    assert binary.is_file(), f"{binary} missing: run python3 lab/upstream/build.py"
    pki = lab.layout.pki
    log_file = lab.layout.root / "prometheus-operator.log"
    argv = [
        str(binary),
        f"--apiserver={lab.info()['server']}",
        f"--ca-file={pki / 'ca.crt'}",
        f"--cert-file={pki / 'admin-client.crt'}",
        f"--key-file={pki / 'admin-client.key'}",
        f"--namespaces={namespace}",
        f"--web.listen-address=127.0.0.1:{_free_port()}",
        "--log-level=info",
    ]
    proc = _process(argv, log_file)
    try:
        yield log_file
    finally:
        _stop(proc)


def generated_config(admin: Cluster, name: str, namespace: str) -> dict[str, Any] | None:
    """The Prometheus configuration the operator wrote for Prometheus ``name`` (its Secret
    ``prometheus-<name>``, key ``prometheus.yaml.gz``), or None before it has."""
    try:
        secret = admin.get(r.SECRETS, f"prometheus-{name}", namespace)
    except NotFound:
        return None
    data = (secret.get("data") or {}).get("prometheus.yaml.gz")
    if not data:
        return None

    config = yaml.safe_load(gzip.decompress(base64.b64decode(data)))
    return config if isinstance(config, dict) else None


@contextlib.contextmanager
def cert_manager(lab: UpstreamLab, cluster_resource_namespace: str) -> Iterator[CertManagerLogs]:
    """cert-manager's controller and cainjector (built by the lab from its pinned root
    module) on the host, against the lab's API server with the admin kubeconfig; yields
    their log files. Both are stopped on exit."""
    binaries = build.bin_dir("cert-manager")
    for program in ("controller", "cainjector"):
        assert (binaries / program).is_file(), f"{binaries / program} missing: run build.py"
    logs = CertManagerLogs(
        lab.layout.root / "cert-manager-controller.log",
        lab.layout.root / "cert-manager-cainjector.log",
    )
    kubeconfig = f"--kubeconfig={lab.admin_kubeconfig}"
    procs = [
        _process(
            [
                str(binaries / "controller"),
                kubeconfig,
                f"--cluster-resource-namespace={cluster_resource_namespace}",
            ],
            logs.controller,
        )
    ]
    try:
        procs.append(_process([str(binaries / "cainjector"), kubeconfig], logs.cainjector))
        yield logs
    finally:
        for proc in procs:
            _stop(proc)


@dataclasses.dataclass(frozen=True)
class CertManagerLogs:
    """Where cert-manager's two programs log, and their tails for assertion messages."""

    controller: Path
    cainjector: Path

    def tail(self, chars: int = 3000) -> str:
        return "\n".join(
            f"--- {path.name}\n{path.read_text(errors='replace')[-chars:]}"
            for path in (self.controller, self.cainjector)
            if path.exists()
        )


def ready(admin: Cluster, resource: Resource, name: str, namespace: str) -> bool:
    """Whether the cert-manager object (a Certificate or an Issuer) reports Ready=True."""
    try:
        obj = admin.get(resource, name, namespace)
    except NotFound:
        return False
    return (condition(obj, "Ready") or {}).get("status") == "True"
