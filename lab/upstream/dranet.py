"""dranet beside our driver on a running upstream lab: a test and benchmark peer only.

dranet (Google's DRA network driver, pinned in ``versions.toml``, built by ``build.py
dranet``) hands whole kernel links to Pods: a claim allocates one of the links it
publishes, and at the Pod's sandbox start (NRI ``RunPodSandbox``) it moves that link into
the Pod's network namespace; at ``StopPodSandbox`` it moves it back. The product never
runs or ships it (``dmn.lab`` is not in the product's wheel); tests and benchmarks start
it with :class:`DranetPeer` to compare with our driver on the same kubelet and containerd.

Facts of v1.0.1 this follows (``cmd/dranet/app.go``, ``pkg/driver``, ``pkg/inventory``):

* driver name and NRI plugin name ``dra.net``, NRI plugin index ``00`` (ours is ``10``:
  containerd calls both, dranet first; each acts only on Pods whose claims it prepared);
* fixed paths: the kubelet plugin directory ``/var/lib/kubelet/plugins/dra.net``, the
  registration directory ``/var/lib/kubelet/plugins_registry`` and the NRI socket
  ``/var/run/nri/nri.sock``. dranet runs in a mount namespace of its own
  (:mod:`~dmn.lab.upstream.mount_exec`) where the lab's directories are bound at those
  paths. kubelet dials the endpoint dranet advertises (``/var/lib/kubelet/plugins/dra.net/
  dra.sock``) in the host's namespace, so the host gets one symbolic link there to the
  lab's plugin directory, recorded in ``host.json`` before it is made (``down`` removes it);
* it publishes every host link except loopback, the default-route links and those its
  ``--filter`` CEL expression drops (the default drops veths); a device's name is the
  link's name. The peer's filter keeps exactly the peer's own links, veth pairs
  ``dmnlab-dr<n>`` the peer creates (recorded, like the lab's NICs). Our agent inventories
  only the links it is given (``--lab-link``: the lab's ``dmnlab0``/``dmnlab1``), so each
  driver sees only its own;
* a Pod gets a link through a claim on the DeviceClass ``dra.net`` (selector ``device.driver
  == "dra.net"``, which dranet does not create: the peer does) — :func:`claim_template`;
  inside the Pod the link keeps its name unless the claim's opaque config renames it;
* at start its inventory asks the GCE metadata server about the machine. The peer points
  ``GCE_METADATA_HOST`` at a closed port on 127.0.0.1, so nothing leaves the machine; the
  client then retries for about 15 s before dranet publishes anything;
* it writes its PCI database to a fresh directory in ``$TMPDIR`` and never removes it:
  ``TMPDIR`` is below the lab directory;
* it writes a claim's ``status.devices`` by server-side apply. kube-apiserver v1.37.2
  re-encodes the allocation's opaque parameters on that path, so when they were stored in
  another JSON form (our Python client writes ``{"a": 1}``, kubectl ``{"a":1}``) the apply
  reads as a change of ``status.allocation`` and is refused (it would need
  ``resourceclaims/binding``): the Pod runs with its link but the claim shows nothing.
  :meth:`DranetPeer.add_claim_template` therefore writes templates through kubectl;
* the RBAC it ships lacks what kube-apiserver 1.37 requires for writing a claim's
  ``status.devices`` (``resourceclaims/driver``, see ``docs/upstream-lab.md``): the peer's
  ClusterRole grants ``associated-node:patch``/``update`` for ``dra.net``, and its token
  is bound to the lab's Node, as a DaemonSet Pod's token is.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dmn.api.cluster import ApiFailure, Cluster, NotFound
from dmn.api.cluster import resources as r
from dmn.lab.upstream import build
from dmn.lab.upstream.configs import NODE_NAME, kubeconfig
from dmn.lab.upstream.host_changes import HostRecord

if TYPE_CHECKING:
    from dmn.lab.upstream.cluster import UpstreamLab

log = logging.getLogger(__name__)

DRIVER = "dra.net"
DEVICE_CLASS = "dra.net"
PROCESS = "dranet"
NAMESPACE = "kube-system"
SERVICE_ACCOUNT = "dranet"
LINK_PREFIX = "dmnlab-dr"
PLUGINS_DIR = Path("/var/lib/kubelet/plugins")
REGISTRY_DIR = Path("/var/lib/kubelet/plugins_registry")
NRI_DIR = Path("/var/run/nri")
#: where kubelet (in the host's mount namespace) dials dranet's DRA socket
DIAL_DIR = PLUGINS_DIR / DRIVER


class PeerError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message = code, message


def link_names(pairs: int) -> tuple[str, ...]:
    """The peer's links: ``pairs`` veth pairs, both ends offered (as the lab's NICs are)."""
    return tuple(f"{LINK_PREFIX}{n}" for n in range(2 * pairs))


def filter_expression(links: Sequence[str]) -> str:
    """dranet's ``--filter``: keep a device only if its link is one of ``links``.

    dranet keeps a device whose expression fails to evaluate, so the name is tested only
    after its presence (a PCI function without a link has no ``ifName``)."""
    names = ", ".join(json.dumps(n) for n in links)
    return (
        f'"{DRIVER}/ifName" in attributes && attributes["{DRIVER}/ifName"].StringValue in [{names}]'
    )


def rbac() -> list[dict[str, Any]]:
    """What dranet v1.0.1 calls: the kubelet plugin helper reads claims and its Node and
    publishes ResourceSlices; its NRI hook applies each claim's ``status.devices``."""
    rules = [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceslices"],
            "verbs": ["get", "list", "watch", "create", "update", "delete"],
        },
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceclaims", "deviceclasses"],
            "verbs": ["get"],
        },
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceclaims/status"],
            "verbs": ["patch", "update"],
        },
        {
            "apiGroups": ["resource.k8s.io"],
            "resources": ["resourceclaims/driver"],
            "resourceNames": [DRIVER],
            "verbs": ["associated-node:patch", "associated-node:update"],
        },
    ]
    meta = {"name": SERVICE_ACCOUNT}
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {**meta, "namespace": NAMESPACE},
        },
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
                "name": SERVICE_ACCOUNT,
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}
            ],
        },
    ]


def device_class() -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DEVICE_CLASS},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
    }


def claim_template(
    name: str, namespace: str, link: str | None = None, if_name: str | None = None
) -> dict[str, Any]:
    """A ResourceClaimTemplate for one dranet link (``link``, else any of the peer's);
    ``if_name`` renames it inside the Pod (dranet's opaque config), else it keeps its name."""
    exactly: dict[str, Any] = {"deviceClassName": DEVICE_CLASS}
    if link:
        expression = f'device.attributes["{DRIVER}"].ifName == {json.dumps(link)}'
        exactly["selectors"] = [{"cel": {"expression": expression}}]
    devices: dict[str, Any] = {"requests": [{"name": "net", "exactly": exactly}]}
    if if_name:
        parameters = {"interface": {"name": if_name}}
        devices["config"] = [
            {"requests": ["net"], "opaque": {"driver": DRIVER, "parameters": parameters}}
        ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": {"devices": devices}},
    }


def dranet_argv(
    binary: Path, kubeconfig_path: Path, links: Sequence[str], health_port: int, verbosity: int
) -> list[str]:
    return [
        str(binary),
        f"--kubeconfig={kubeconfig_path}",
        f"--hostname-override={NODE_NAME}",
        f"--bind-address=127.0.0.1:{health_port}",
        f"--filter={filter_expression(links)}",
        f"--v={verbosity}",
    ]


def launcher_argv(kubelet_root: Path, nri_dir: Path) -> list[str]:
    """The lab's process starter's first step: the mount namespace (see module docstring)."""
    binds = (
        (kubelet_root / "plugins", PLUGINS_DIR),
        (kubelet_root / "plugins_registry", REGISTRY_DIR),
        (nri_dir, NRI_DIR),
    )
    argv = [sys.executable, "-m", "dmn.lab.upstream.mount_exec"]
    for source, target in binds:
        argv += ["--bind", f"{source}:{target}"]
    return [*argv, "--"]


def free_local_port() -> int:
    """A loopback port nothing listens on (bound, then released): dranet's health server
    takes one; the metadata client's connections to another are refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _shallowest_missing(path: Path) -> Path | None:
    missing = None
    for candidate in (path, *path.parents):
        if os.path.lexists(candidate):
            break
        missing = candidate
    return missing


class DranetPeer:
    """Start and stop dranet on a running upstream lab (``lab.up()`` returned).

    ``start`` creates the peer's links, its identity and RBAC, the DeviceClass, kubelet's
    dial path, then the process (``dranet`` in the lab's process table, log
    ``<lab>/logs/dranet.log``); it returns once kubelet has registered dranet and its
    ResourceSlice lists exactly the peer's links. ``stop`` ends the process, deletes its
    ResourceSlices and undoes the host changes; the lab's ``down`` does the same for a
    peer never stopped. Delete the Pods that hold its links first: a link still in a Pod
    goes with the Pod's namespace."""

    def __init__(
        self, lab: UpstreamLab, pairs: int = 1, timeout: float = 120.0, verbosity: int = 2
    ) -> None:
        self.lab = lab
        self.links = link_names(pairs)
        self.timeout = timeout
        self.verbosity = verbosity
        self.root = lab.layout.root / "dranet"

    # --- start -------------------------------------------------------------------------

    def start(self) -> None:
        binary = build.bin_dir("dranet") / "dranet"
        if not binary.is_file():
            raise PeerError(
                "E_UPSTREAM_NOT_BUILT",
                f"dranet is not built ({binary} is missing); "
                "run: python3 lab/upstream/build.py dranet",
            )
        layout = self.lab.layout
        (self.root / "tmp").mkdir(parents=True, exist_ok=True)
        for sub in ("plugins", "plugins_registry"):
            (layout.kubelet_root / sub).mkdir(parents=True, exist_ok=True)
        self._links()
        self._dial_path(layout.kubelet_root / "plugins" / DRIVER)
        admin = self.lab.admin()
        try:
            for doc in rbac():
                admin.apply(doc)
            admin.apply(device_class())
            kc = self._kubeconfig(admin)
            health = free_local_port()
            argv = launcher_argv(layout.kubelet_root, layout.nri_socket.parent)
            argv += dranet_argv(binary, kc, self.links, health, self.verbosity)
            metadata = free_local_port()
            while metadata == health:
                metadata = free_local_port()
            env = {
                "GCE_METADATA_HOST": f"127.0.0.1:{metadata}",
                "TMPDIR": str(self.root / "tmp"),
            }
            self.lab.procs.start(PROCESS, argv, env)
            try:
                self._wait("dranet /healthz", lambda: _healthy(health))
                wanted = tuple(sorted(self.links))
                self._wait("dranet's ResourceSlice", lambda: self.published(admin) == wanted)
            except PeerError:
                self.stop()
                raise
        finally:
            admin.close()
        log.info("event=dranet-started links=%s", ",".join(self.links))

    def _record(self, change: Callable[[HostRecord], None]) -> None:
        record = HostRecord.load(self.lab.host_file)
        change(record)
        record.save(self.lab.host_file)

    def _links(self) -> None:
        """Each veth pair recorded in ``host.json`` before it is made; a pair already
        recorded there (an earlier start on this lab) is reused, any other link of one of
        the names is refused."""
        from pyroute2 import IPRoute

        with IPRoute() as ip:
            for first, second in zip(self.links[::2], self.links[1::2], strict=True):
                recorded = first in HostRecord.load(self.lab.host_file).links
                present = [n for n in (first, second) if ip.link_lookup(ifname=n)]
                if present and recorded:
                    continue
                if present:
                    message = f"link {present[0]} exists and is not ours"
                    raise PeerError("E_LAB_LINK_EXISTS", message)
                self._record(_add_link(first))
                ip.link("add", ifname=first, kind="veth", peer=second)
                for name in (first, second):
                    ip.link("set", index=ip.link_lookup(ifname=name)[0], state="up")

    def _dial_path(self, target: Path) -> None:
        target.mkdir(parents=True, exist_ok=True)
        if os.path.lexists(DIAL_DIR):
            if DIAL_DIR.is_symlink() and Path(os.readlink(DIAL_DIR)) == target:
                return
            raise PeerError(
                "E_DRANET_DIAL_PATH", f"{DIAL_DIR} exists and is not this lab's (a real dranet?)"
            )
        created = _shallowest_missing(DIAL_DIR)
        assert created is not None
        self._record(_add_path(str(created)))
        DIAL_DIR.parent.mkdir(parents=True, exist_ok=True)
        DIAL_DIR.symlink_to(target)

    def _kubeconfig(self, admin: Cluster) -> Path:
        """A token of dranet's service account bound to the lab's Node (the node-name
        claim a DaemonSet Pod's token carries, which ``associated-node`` needs)."""
        node = admin.get(r.NODES, NODE_NAME)
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "expirationSeconds": 86400,
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": NODE_NAME,
                    "uid": node["metadata"]["uid"],
                },
            },
        }
        path = f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{SERVICE_ACCOUNT}/token"
        token = str(admin.request("POST", path, body=request)["status"]["token"])
        user = f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"
        server = str(self.lab.info()["server"])
        out = self.lab.layout.kubeconfig(PROCESS)
        ca = self.lab.layout.pki / "ca.crt"
        out.write_text(kubeconfig(server, ca, None, None, user, token))
        out.chmod(0o600)
        return out

    def _wait(self, what: str, check: Callable[[], bool]) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            record = self.lab.procs.get(PROCESS)
            if record is None or not record.alive():
                raise PeerError("E_DRANET_START", f"dranet exited: {self.lab.procs.tail(PROCESS)}")
            with contextlib.suppress(ApiFailure, OSError):
                if check():
                    return
            time.sleep(0.5)
        raise PeerError(
            "E_DRANET_START",
            f"{what}: not ready after {self.timeout:.0f}s; {self.lab.procs.tail(PROCESS)}",
        )

    # --- workloads ---------------------------------------------------------------------

    def add_claim_template(
        self, name: str, namespace: str, link: str | None = None, if_name: str | None = None
    ) -> None:
        """Create :func:`claim_template` through kubectl, as compact JSON (see the module
        docstring: with our client's JSON dranet's status write would be refused)."""
        doc = claim_template(name, namespace, link, if_name)
        kubectl = build.bin_dir("kubernetes") / "kubectl"
        argv = [str(kubectl), "--kubeconfig", str(self.lab.admin_kubeconfig), "apply", "-f", "-"]
        text = json.dumps(doc, separators=(",", ":"))
        out = subprocess.run(argv, input=text, capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise PeerError("E_DRANET_TEMPLATE", f"kubectl apply {name}: {out.stderr.strip()}")

    # --- state -------------------------------------------------------------------------

    def running(self) -> bool:
        record = self.lab.procs.get(PROCESS)
        return record is not None and record.alive()

    @staticmethod
    def slices(admin: Cluster) -> list[dict[str, Any]]:
        return [
            s
            for s in admin.list(r.RESOURCE_SLICES).items
            if s["spec"].get("driver") == DRIVER and s["spec"].get("nodeName") == NODE_NAME
        ]

    def published(self, admin: Cluster) -> tuple[str, ...]:
        """The device names in dranet's ResourceSlices for the lab node, sorted (``dmnlab-dr10``
        before ``dmnlab-dr2``: compare with ``sorted(links)``)."""
        return tuple(
            sorted(d["name"] for s in self.slices(admin) for d in s["spec"].get("devices") or [])
        )

    # --- stop --------------------------------------------------------------------------

    def stop(self) -> None:
        self.lab.procs.stop(PROCESS)
        admin = self.lab.admin()
        try:
            for piece in self.slices(admin):
                with contextlib.suppress(NotFound):
                    admin.delete(r.RESOURCE_SLICES, piece["metadata"]["name"])
        finally:
            admin.close()
        self._remove_links()
        self._remove_dial_path()
        log.info("event=dranet-stopped")

    def _remove_links(self) -> None:
        """Delete each pair still (half) in the host (one end deletes both); a pair with
        an end inside a Pod stays recorded: it goes with the Pod's namespace, or ``down``."""
        from pyroute2 import IPRoute

        with IPRoute() as ip:
            for name in self.links:
                for index in ip.link_lookup(ifname=name):
                    ip.link("del", index=index)
            left = {n for n in self.links if ip.link_lookup(ifname=n)}
        pairs = zip(self.links[::2], self.links[1::2], strict=True)
        gone = {first for first, second in pairs if not {first, second} & left}
        self._record(_drop("links", gone))

    def _remove_dial_path(self) -> None:
        """The link, then each directory the peer created for it if it is empty now (kubelet
        may have put something of its own beside it meanwhile); what is left stays recorded
        for ``down``."""
        record = HostRecord.load(self.lab.host_file)
        ours = [p for p in record.paths if _below(DIAL_DIR, Path(p))]
        if DIAL_DIR.is_symlink():
            DIAL_DIR.unlink()
        for created in ours:
            for directory in (DIAL_DIR.parent, *DIAL_DIR.parent.parents):
                if not _below(directory, Path(created)):
                    break
                with contextlib.suppress(OSError):
                    directory.rmdir()
        self._record(_drop("paths", {p for p in ours if not os.path.lexists(p)}))

    @contextlib.contextmanager
    def running_beside(self) -> Iterator[DranetPeer]:
        """``with DranetPeer(lab).running_beside() as peer:`` — started, then stopped."""
        self.start()
        try:
            yield self
        finally:
            self.stop()


def _drop(field: str, names: set[str]) -> Callable[[HostRecord], None]:
    """A change that removes ``names`` from the record's list ``field``."""

    def change(record: HostRecord) -> None:
        setattr(record, field, [n for n in getattr(record, field) if n not in names])

    return change


def _add_link(name: str) -> Callable[[HostRecord], None]:
    def change(record: HostRecord) -> None:
        record.links.append(name)

    return change


def _add_path(path: str) -> Callable[[HostRecord], None]:
    def change(record: HostRecord) -> None:
        record.paths.append(path)

    return change


def _below(path: Path, top: Path) -> bool:
    return path == top or top in path.parents


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as resp:
            return int(resp.status) == 200
    except (OSError, ValueError):
        return False


__all__ = [
    "DEVICE_CLASS",
    "DRIVER",
    "DranetPeer",
    "PeerError",
    "claim_template",
    "filter_expression",
    "link_names",
]
