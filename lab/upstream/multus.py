"""Multus and Whereabouts on the upstream lab (``dmn lab up --backend upstream --multus``).

Why: the driver's automatic mode hands an allocated device to Multus, which runs the
delegate CNI plugin and its IPAM when the sandbox is created. That can only be proven
against the real Multus, reading the Pod and its NetworkAttachmentDefinitions from the
real API server at ADD. :class:`MultusInstall` adds to a running lab (or at ``up``):

* the CRDs from the pinned modules (``build.py multus whereabouts``): NetworkAttachment-
  Definition, and Whereabouts' IPPool, OverlappingRangeIPReservation and NodeSlicePool;
* service accounts ``multus`` and ``whereabouts`` in ``kube-system`` with the permissions
  the programs use (``multus_configs.rbac``), and kubeconfigs carrying their tokens;
* the thin ``multus`` and ``whereabouts`` binaries linked into the lab's own CNI plugin
  directory (``Layout.cni_bin``, which containerd searches after the reference plugins);
* Whereabouts' configuration file (kubernetes datastore, that kubeconfig), named by each
  NetworkAttachmentDefinition's ``ipam.configuration_path`` (:meth:`MultusInstall.ipam`):
  the CNI binary otherwise reads it only from fixed paths under ``/etc``, which the lab
  does not write;
* Whereabouts' ``ip-control-loop`` as a Pod (host network, its own one-program image): it
  frees the addresses of deleted Pods that a CNI DEL left behind;
* Multus' configuration as ``00-multus.conflist`` ahead of the lab's primary network in
  containerd's CNI directory (containerd uses the first file only and reloads it when the
  directory changes); its one delegate is the primary conflist, so the bridge network
  stays every Pod's default network and Multus adds what the Pod's
  ``k8s.v1.cni.cncf.io/networks`` selects. A probe Pod then proves Multus answers ADD
  (its network-status annotation names the primary network).

Thick mode (``mode="thick"``, ``dmn lab up --backend upstream --multus thick``) puts
``multus-shim`` in the conflist instead and runs ``multus-daemon`` as a lab process: in a
mount namespace of its own (:mod:`~dmn.lab.upstream.mount_exec`) where a lab directory with
the ``multus`` account's token and a CA is bound at the in-cluster service-account path (the
daemon's client reads nothing else), its informers watching Pods (no node filter) and
NetworkAttachmentDefinitions. ``daemon_api`` points the daemon at another endpoint than the
API server (a :class:`~dmn.lab.upstream.watch_gate.WatchGate`).

Everything is written below the lab directory (the multus cache, logs, configuration), so
``down`` removes it with the lab; nothing on the host changes. :meth:`MultusInstall.
uninstall` takes Multus out of the Pod path again (its conflist and the control-loop Pod)
and leaves the CRDs, permissions and files, so it can be enabled again quickly.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dmn.api.cluster import AlreadyExists, ApiFailure, Cluster, NotFound
from dmn.api.cluster import resources as r
from dmn.controller.conditions import condition_true
from dmn.lab.cluster import LabError
from dmn.lab.upstream import build, images
from dmn.lab.upstream.configs import NODE_IP, Layout, kubeconfig
from dmn.lab.upstream.multus_configs import (
    CONTROL_LOOP_POD,
    DAEMON_PROCESS,
    MODES,
    MULTUS_BINARIES,
    MULTUS_SA,
    NETWORKS_ANNOTATION,
    OVERLAPPING_RESERVATIONS,
    PRIMARY_NETWORK,
    PROBE_NAMESPACE,
    PROBE_POD,
    SERVICE_ACCOUNT_DIR,
    SYSTEM_NAMESPACE,
    TOKEN_SECONDS,
    WHEREABOUTS_BINARIES,
    WHEREABOUTS_IP_POOLS,
    WHEREABOUTS_SA,
    MultusPaths,
    control_loop_pod,
    daemon_config,
    multus_conflist,
    network_status,
    probe_pod,
    rbac,
    shim_conflist,
    whereabouts_conf,
    whereabouts_image,
)
from dmn.lab.upstream.processes import ProcessTable

log = logging.getLogger(__name__)


def reservations(admin: Cluster, pod_ref: str) -> list[str]:
    """Every Whereabouts reservation held for ``pod_ref`` (``namespace/name``): pool
    allocations (``<pool>/<offset>``) and overlapping-range reservations (the address)."""
    held = []
    for pool in admin.list(WHEREABOUTS_IP_POOLS, SYSTEM_NAMESPACE).items:
        allocations = (pool.get("spec") or {}).get("allocations") or {}
        held += [
            f"{pool['metadata']['name']}/{offset}"
            for offset, allocation in allocations.items()
            if (allocation or {}).get("podref") == pod_ref
        ]
    for item in admin.list(OVERLAPPING_RESERVATIONS, SYSTEM_NAMESPACE).items:
        if (item.get("spec") or {}).get("podref") == pod_ref:
            held.append(str(item["metadata"]["name"]))
    return held


# --- installing it -----------------------------------------------------------------------


class MultusInstall:
    """Multus and Whereabouts in one lab (see the module docstring)."""

    def __init__(
        self,
        layout: Layout,
        timeout: float = 120.0,
        mode: str = "thin",
        procs: ProcessTable | None = None,
        daemon_api: DaemonApi | None = None,
    ) -> None:
        if mode not in MODES:
            raise LabError("E_USAGE", f"Multus mode {mode!r}: one of {', '.join(MODES)}")
        self.paths = MultusPaths(layout)
        self.timeout = timeout
        self.mode = mode
        self.procs = procs or ProcessTable(layout.root)
        self.daemon_api = daemon_api

    def running_mode(self) -> str | None:
        """The mode whose conflist is in containerd's directory, or None."""
        try:
            text = self.paths.conflist.read_text()
        except FileNotFoundError:
            return None
        return "thick" if '"multus-shim"' in text else "thin"

    @property
    def layout(self) -> Layout:
        return self.paths.layout

    def enabled(self) -> bool:
        """Whether Multus is in the Pod path (its conflist ahead of the primary network)."""
        return self.paths.conflist.exists()

    def ipam(self, ip_range: str, **options: Any) -> dict[str, Any]:
        """A Whereabouts ``ipam`` section for a NetworkAttachmentDefinition of this lab."""
        return {
            "type": "whereabouts",
            "range": ip_range,
            "configuration_path": str(self.paths.whereabouts_conf),
            **options,
        }

    def install(self, admin: Cluster, server: str, apiserver_port: int) -> None:
        """Add Multus and Whereabouts to the running lab whose API server is ``server``;
        returns once Multus has answered a probe Pod's ADD. Raises :class:`LabError`."""
        started = time.monotonic()
        bins = self.binaries()
        self._crds(admin)
        for doc in rbac():
            admin.apply(doc)
        paths = self.paths
        ca = self.layout.pki / "ca.crt"
        for path in (paths.cache, paths.conf_dir, paths.control_loop, paths.logs):
            path.mkdir(parents=True, exist_ok=True)
        _token_kubeconfig(admin, server, ca, MULTUS_SA, paths.kubeconfig)
        _token_kubeconfig(admin, server, ca, WHEREABOUTS_SA, paths.whereabouts_kubeconfig)
        paths.whereabouts_conf.write_text(
            whereabouts_conf(paths.whereabouts_kubeconfig, paths.logs / "whereabouts.log")
        )
        # the control loop never reads the kubeconfig (it uses its service account): only
        # the datastore and schedule matter there
        (paths.control_loop / "whereabouts.conf").write_text(
            whereabouts_conf(paths.whereabouts_kubeconfig, None)
        )
        self.layout.cni_bin.mkdir(parents=True, exist_ok=True)
        links = (("multus", "multus"), ("multus", "multus-shim"), ("whereabouts", "whereabouts"))
        for component, name in links:
            directory = bins[component]
            link = self.layout.cni_bin / name
            link.unlink(missing_ok=True)
            link.symlink_to(directory / name)
        self._control_loop(admin, bins["whereabouts"], apiserver_port)
        primary = paths.primary.read_text()
        if self.mode == "thick":
            api = self.daemon_api or DaemonApi(NODE_IP, apiserver_port, ca)
            self._daemon(admin, bins["multus"], primary, api)
            conflist = shim_conflist(paths)
        else:
            conflist = multus_conflist(paths, primary)
        _write_atomically(paths.conflist, conflist)
        self._probe(admin)
        spent = time.monotonic() - started
        log.info(
            "event=multus-enabled mode=%s conflist=%s seconds=%.1f",
            self.mode,
            paths.conflist,
            spent,
        )

    def uninstall(self, admin: Cluster) -> None:
        """Take Multus out of the Pod path and stop the control loop. Every Pod that still
        selects networks (``k8s.v1.cni.cncf.io/networks``) is deleted first: its DEL must
        go through Multus, or its delegates' interfaces and addresses would leak."""
        selecting = [
            p["metadata"]
            for p in admin.list(r.PODS).items
            if NETWORKS_ANNOTATION in (p["metadata"].get("annotations") or {})
        ]
        for meta in selecting:
            with contextlib.suppress(NotFound):
                admin.delete(r.PODS, meta["name"], meta["namespace"])
        self._wait(
            "the Pods selecting networks gone",
            lambda: all(_gone(admin, m["name"], m["namespace"]) for m in selecting),
        )
        self.paths.conflist.unlink(missing_ok=True)
        self.procs.stop(DAEMON_PROCESS)
        with contextlib.suppress(NotFound):
            admin.delete(r.PODS, CONTROL_LOOP_POD, SYSTEM_NAMESPACE, grace_period_seconds=0)
        self._wait("the control loop Pod gone", lambda: _gone(admin, CONTROL_LOOP_POD))
        log.info("event=multus-disabled")

    # --- steps -----------------------------------------------------------------------

    @staticmethod
    def binaries() -> dict[str, Path]:
        """The bin directories of the built ``multus`` and ``whereabouts`` components, or
        :class:`LabError` naming the build command."""
        out = {}
        for name, files in _BINARIES.items():
            directory = build.bin_dir(name)
            missing = [f for f in files if not (directory / f).is_file()]
            if missing:
                raise LabError(
                    "E_UPSTREAM_NOT_BUILT",
                    f"{name} is not built ({directory / missing[0]} is missing); "
                    f"run: python3 lab/upstream/build.py {name}",
                )
            out[name] = directory
        return out

    def _crds(self, admin: Cluster) -> None:
        names = []
        for component in ("multus", "whereabouts"):
            for path in sorted(build.crd_dir(component).glob("*.yaml")):
                doc = yaml.safe_load(path.read_text())
                admin.apply(doc)
                names.append(doc["metadata"]["name"])

        def established() -> bool:
            crds = [admin.get(r.CUSTOM_RESOURCE_DEFINITIONS, n) for n in names]
            return all(condition_true(c, "Established") for c in crds)

        self._wait("the Multus and Whereabouts CRDs established", established)

    def _control_loop(self, admin: Cluster, bins: Path, apiserver_port: int) -> None:
        image = whereabouts_image()
        data = images.program_archive(image, bins / "ip-control-loop")
        archive = images.write_archive(self.layout.images, image, data)
        ctr = build.bin_dir("containerd") / "ctr"
        images.import_images(ctr, str(self.layout.containerd_socket), {image: archive})
        manifest = control_loop_pod(self.paths, image, apiserver_port)
        with contextlib.suppress(AlreadyExists):
            admin.create(r.PODS, manifest, SYSTEM_NAMESPACE)
        self._wait("the Whereabouts control loop Pod running", lambda: _running(admin))

    def _daemon(self, admin: Cluster, bins: Path, primary: str, api: DaemonApi) -> None:
        """Start ``multus-daemon`` (see the module docstring); returns once its socket
        answers. A daemon of an earlier enable is stopped first."""
        paths = self.paths
        self.procs.stop(DAEMON_PROCESS)
        for path in (paths.daemon_primary, paths.daemon_copy_dir, paths.service_account):
            path.mkdir(parents=True, exist_ok=True)
        token = _token(admin, MULTUS_SA)
        account = paths.service_account
        _write_atomically(account / "token", token, mode=0o600)
        _write_atomically(account / "ca.crt", api.ca.read_text())
        _write_atomically(account / "namespace", SYSTEM_NAMESPACE)
        _write_atomically(paths.daemon_primary / paths.primary.name, primary)
        _write_atomically(paths.daemon_config, daemon_config(paths, primary))
        argv = [
            sys.executable,
            "-m",
            "dmn.lab.upstream.mount_exec",
            "--bind",
            f"{account}:{SERVICE_ACCOUNT_DIR}",
            "--",
            str(bins / "multus-daemon"),
            "-config",
            str(paths.daemon_config),
        ]
        # the daemon looks delegates up in binDir and then in its *own* CNI_PATH (a call's
        # CNI_PATH stays with the shim): containerd's directories, in containerd's order
        cni_path = os.pathsep.join([str(build.bin_dir("cni")), str(self.layout.cni_bin)])
        env = {
            "KUBERNETES_SERVICE_HOST": api.host,
            "KUBERNETES_SERVICE_PORT": str(api.port),
            "CNI_PATH": cni_path,
        }
        self.procs.start(DAEMON_PROCESS, argv, env)
        socket_path = paths.daemon_socket_dir / "multus.sock"

        def serving() -> bool:
            record = self.procs.get(DAEMON_PROCESS)
            if record is None or not record.alive():
                tail = self.procs.tail(DAEMON_PROCESS)
                raise LabError("E_LAB_START", f"multus-daemon exited: {tail}")
            return _healthy(socket_path)

        self._wait("multus-daemon answering on its socket", serving)

    def _probe(self, admin: Cluster) -> None:
        """A Pod created now must get its network from Multus: its network-status names
        the primary network as default. containerd reloads the CNI directory on a file
        event, so a sandbox started in the moment before may still have gone to the
        bridge directly: then the probe is made again."""

        def multus_answered() -> bool:
            pod = admin.get(r.PODS, PROBE_POD, PROBE_NAMESPACE)
            entries = network_status(pod)
            return any(e.get("name") == PRIMARY_NETWORK and e.get("default") for e in entries)

        deadline = time.monotonic() + self.timeout
        try:
            while True:
                with contextlib.suppress(AlreadyExists):
                    admin.create(r.PODS, probe_pod(), PROBE_NAMESPACE)
                running = _wait_until(
                    lambda: _phase(admin, PROBE_POD, PROBE_NAMESPACE) == "Running",
                    deadline,
                )
                if running and _wait_until(multus_answered, min(deadline, time.monotonic() + 5)):
                    return
                if time.monotonic() >= deadline:
                    log_name = "multus-daemon.log" if self.mode == "thick" else "multus.log"
                    where = self.paths.logs / log_name
                    raise LabError("E_LAB_START", f"Multus did not attach a probe Pod; see {where}")
                self._delete_probe(admin)
        finally:
            self._delete_probe(admin)

    def _delete_probe(self, admin: Cluster) -> None:
        with contextlib.suppress(NotFound):
            admin.delete(r.PODS, PROBE_POD, PROBE_NAMESPACE, grace_period_seconds=0)
        self._wait("the Multus probe Pod gone", lambda: _gone(admin, PROBE_POD, PROBE_NAMESPACE))

    def _wait(self, what: str, check: Callable[[], bool]) -> None:
        if not _wait_until(check, time.monotonic() + self.timeout):
            raise LabError("E_LAB_START", f"{what}: not after {self.timeout:.0f}s")


_BINARIES = {"multus": MULTUS_BINARIES, "whereabouts": WHEREABOUTS_BINARIES}


def _wait_until(check: Callable[[], bool], deadline: float) -> bool:
    while True:
        with contextlib.suppress(ApiFailure, OSError):
            if check():
                return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.3)


def _healthy(socket_path: Path) -> bool:
    """Whether multus-daemon answers ``/healthz`` on its socket: it listens before its
    informers have synced, and serves only after."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(2.0)
        try:
            conn.connect(str(socket_path))
            conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: multus\r\nConnection: close\r\n\r\n")
            answer = conn.recv(64)
        except OSError:
            return False
    return answer.startswith(b"HTTP/1.1 200")


def _phase(admin: Cluster, name: str, namespace: str) -> str:
    try:
        pod = admin.get(r.PODS, name, namespace)
    except NotFound:
        return "Gone"
    return str((pod.get("status") or {}).get("phase") or "")


def _gone(admin: Cluster, name: str, namespace: str = SYSTEM_NAMESPACE) -> bool:
    return _phase(admin, name, namespace) == "Gone"


def _running(admin: Cluster) -> bool:
    return _phase(admin, CONTROL_LOOP_POD, SYSTEM_NAMESPACE) == "Running"


@dataclass(frozen=True)
class DaemonApi:
    """Where thick mode's daemon reaches the API server: address, port, the CA it trusts."""

    host: str
    port: int
    ca: Path


def _token(admin: Cluster, sa: str) -> str:
    """A token of service account ``sa`` (TokenRequest)."""
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"expirationSeconds": TOKEN_SECONDS},
    }
    path = f"/api/v1/namespaces/{SYSTEM_NAMESPACE}/serviceaccounts/{sa}/token"
    return str(admin.request("POST", path, body=request)["status"]["token"])


def _token_kubeconfig(admin: Cluster, server: str, ca: Path, sa: str, out: Path) -> None:
    """A kubeconfig with a token of service account ``sa``."""
    token = _token(admin, sa)
    user = f"system:serviceaccount:{SYSTEM_NAMESPACE}:{sa}"
    _write_atomically(out, kubeconfig(server, ca, None, None, user, token), mode=0o600)


def _write_atomically(path: Path, text: str, mode: int = 0o644) -> None:
    """Write beside ``path`` under a name no CNI loader reads, then rename: containerd
    reacts to the directory's events and must never read a half-written file."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)
