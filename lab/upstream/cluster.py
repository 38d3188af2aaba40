"""``dmn lab up --backend upstream``: real Kubernetes on this one machine, and our driver on it.

:class:`UpstreamLab` starts, as detached processes recorded in ``<lab>/procs.json``: etcd,
kube-apiserver (Node+RBAC authorization, NodeRestriction, the DRA compatibility-groups
gate), kube-controller-manager, kube-scheduler, containerd (NRI on, runc, the reference
``bridge`` + ``host-local`` CNI plugins as the primary network), kubelet as node
``lab-node``; imports the lab's two images; then hands over to a
:class:`~dmn.lab.upstream.driver.DriverDeployment` for our CRDs, controller, webhook and
node agent, and (``multus=True``) adds Multus and Whereabouts. ``up`` returns when all of
that is ready; the processes keep running.

Everything lives below ``<state dir>/up``; what cannot (links in the host namespace, cgroup
roots, kernel settings kubelet writes, fixed host paths) is recorded in ``host.json``
before it is changed (:mod:`~dmn.lab.upstream.host_changes`). :meth:`down` stops every
recorded process, detaches every mount below the lab directory, kills what is left in the
lab's cgroups, removes them, the recorded links and created paths, restores the kernel
settings and removes the lab directory. A killed lab is cleaned by the next ``down`` (or
``up``, which runs ``down`` first over any record without live processes).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import ssl
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from dmn.api.cluster import ApiFailure, Cluster, NotFound, connect
from dmn.api.cluster import resources as r
from dmn.controller.conditions import condition_true
from dmn.lab.cluster import LabError
from dmn.lab.upstream import build, configs, host_changes, images
from dmn.lab.upstream import dranet as dranet_peer
from dmn.lab.upstream.configs import (
    DRIVER_NAMESPACE,
    NODE_IP,
    NODE_NAME,
    NODE_PEER_IP,
    POD_GATEWAY,
    POD_PREFIX,
    Layout,
    Ports,
)
from dmn.lab.upstream.driver import (
    LAB_LINKS,
    AgentNode,
    DriverContext,
    DriverDeployment,
    DriverError,
    ProcessDriver,
)
from dmn.lab.upstream.host_changes import CGROUP_NAME, HostRecord
from dmn.lab.upstream.lab_nodes import FABRIC_BRIDGE, MAX_INDEX, LabNode
from dmn.lab.upstream.multus import DaemonApi, MultusInstall
from dmn.lab.upstream.pki import LabCA
from dmn.lab.upstream.processes import ProcessTable
from dmn.lab.upstream.workloads import DAEMON_SETS, DEPLOYMENTS

log = logging.getLogger(__name__)

NODE_LINKS = ("dmnlab-n0", "dmnlab-n1")  # the pair carrying the node's address
CONTROL_PLANE_BINARIES = {"etcd": ("etcd",), "kubernetes": ("kube-apiserver",)}
NODE_BINARIES = {
    "etcd": ("etcd",),
    "kubernetes": ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet"),
    "containerd": ("containerd", "containerd-shim-runc-v2", "ctr"),
    "runc": ("runc",),
    "cni": ("bridge", "host-local", "loopback"),
    "pause": ("pause",),
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class UpstreamLab:
    def __init__(
        self,
        state_root: Path,
        driver: DriverDeployment | None = None,
        timeout: float = 180.0,
        with_node: bool = True,
        multus: bool | str = False,
        nodes: int = 1,
    ) -> None:
        """``with_node=False``: the control plane only (etcd, kube-apiserver, our controller
        and webhook) — no controller manager, scheduler, containerd, kubelet or agent.
        ``multus``: Multus and Whereabouts too (:mod:`~dmn.lab.upstream.multus`): True or
        ``"thin"``, or ``"thick"`` (daemon and shim); a running lab takes them with
        :meth:`enable_multus`. ``nodes``: how many nodes, ``lab-node`` and ``nodes - 1``
        further ones (:mod:`~dmn.lab.upstream.lab_nodes`); a running lab takes more with
        :meth:`add_node`."""
        if multus and not with_node:
            raise LabError("E_USAGE", "Multus needs the node (kubelet and containerd)")
        if not 1 <= nodes <= MAX_INDEX + 1:
            raise LabError("E_USAGE", f"--nodes: 1 … {MAX_INDEX + 1}, not {nodes}")
        if nodes > 1 and not with_node:
            raise LabError("E_USAGE", "further nodes need the first one")
        self.nodes = nodes
        self.with_node = with_node
        self.multus = multus
        self.multus_mode = "thin" if multus is True else str(multus or "thin")
        self.layout = Layout(state_root / "up")
        self.procs = ProcessTable(self.layout.root)
        self.driver = driver or ProcessDriver()
        self.timeout = timeout
        self.host_file = self.layout.root / "host.json"
        self.lab_file = self.layout.root / "lab.json"

    # --- state ---------------------------------------------------------------------------

    def running(self) -> list[str]:
        """Names of recorded processes that are still alive."""
        return [p.name for p in self.procs.load() if p.alive()]

    @property
    def admin_kubeconfig(self) -> Path:
        return self.layout.kubeconfig("admin")

    def admin(self) -> Cluster:
        return Cluster(connect(kubeconfig=str(self.admin_kubeconfig)))

    def info(self) -> dict[str, object]:
        try:
            return dict(json.loads(self.lab_file.read_text()))
        except (OSError, ValueError):
            return {}

    # --- up ------------------------------------------------------------------------------

    def up(self) -> str:
        """Start everything; returns the API server URL. Raises :class:`LabError`."""
        alive = self.running()
        if alive:
            raise LabError(
                "E_LAB_RUNNING",
                f"an upstream lab is already running in {self.layout.root} ({', '.join(alive)})",
            )
        if self.layout.root.exists():
            self.down()  # leftovers of a killed lab
        bins = self._binaries()
        try:
            return self._up(bins)
        except (LabError, DriverError, images.ImageError) as exc:
            code, message = exc.code, exc.message
        except (ApiFailure, OSError) as exc:
            code, message = "E_LAB_START", str(exc)
        log.error("event=lab-up-failed code=%s message=%s", code, message)
        self.down()
        raise LabError(code, message)

    def _binaries(self) -> dict[str, Path]:
        needed = NODE_BINARIES if self.with_node else CONTROL_PLANE_BINARIES
        out = {}
        for name, files in needed.items():
            directory = build.bin_dir(name)
            missing = [f for f in files if not (directory / f).is_file()]
            if missing:
                raise LabError(
                    "E_UPSTREAM_NOT_BUILT",
                    f"{name} is not built ({directory / missing[0]} is missing); "
                    "run: python3 lab/upstream/build.py",
                )
            out[name] = directory
        if self.multus:
            self._multus().binaries()
        return out

    def _up(self, bins: dict[str, Path]) -> str:
        layout = self.layout
        layout.root.mkdir(parents=True, exist_ok=True)
        host_changes.make_shared_mount(layout.root)
        record = HostRecord()
        host_changes.snapshot_host(record)
        record.save(self.host_file)
        self._links(record)
        host_changes.create_cgroups(record, self.host_file)
        ports = Ports(*(_free_port() for _ in range(6)))
        server = f"https://{NODE_IP}:{ports.apiserver}"
        ca = self._pki(server)
        self.lab_file.write_text(json.dumps({"server": server, "ports": asdict(ports)}))
        k8s = bins["kubernetes"]
        self._start("etcd", configs.etcd_argv(bins["etcd"] / "etcd", layout, ports))
        self._wait("etcd", lambda: _http_ok(f"http://127.0.0.1:{ports.etcd_client}/health"))
        self._start("kube-apiserver", configs.apiserver_argv(k8s / "kube-apiserver", layout, ports))
        ctx = ssl.create_default_context(cafile=str(ca.ca_cert))
        admin_cred = (layout.pki / "admin-client.crt", layout.pki / "admin-client.key")
        ctx.load_cert_chain(*map(str, admin_cred))
        self._wait("kube-apiserver", lambda: _http_ok(f"{server}/readyz", ctx), "kube-apiserver")
        if self.with_node:
            self._node(bins, record, ports)
        admin = self.admin()
        try:
            if self.with_node:
                self._wait("node lab-node Ready", lambda: node_ready(admin), "kubelet")
            self.driver.install(
                DriverContext(
                    layout=layout,
                    ca=ca,
                    admin=admin,
                    procs=self.procs,
                    webhook_port=ports.webhook,
                    server=server,
                    with_node=self.with_node,
                )
            )
            if self.multus:
                self._multus().install(admin, server, ports.apiserver)
        finally:
            admin.close()
        for index in range(1, self.nodes):
            self.add_node(index)
        log.info("event=lab-up server=%s root=%s nodes=%d", server, layout.root, self.nodes)
        return server

    def _node(self, bins: dict[str, Path], record: HostRecord, ports: Ports) -> None:
        layout, k8s = self.layout, bins["kubernetes"]
        self._start(
            "kube-controller-manager",
            configs.controller_manager_argv(k8s / "kube-controller-manager", layout),
        )
        self._start("kube-scheduler", configs.scheduler_argv(k8s / "kube-scheduler", layout))
        self._containerd(bins, layout, "containerd")
        kubelet = configs.KubeletNode(port=ports.kubelet, healthz_port=ports.kubelet_healthz)
        layout.kubelet_config.write_text(
            configs.kubelet_config(layout, kubelet, "/" + CGROUP_NAME, layout.pki)
        )
        argv = configs.kubelet_argv(k8s / "kubelet", layout, kubelet, layout.kubeconfig("kubelet"))
        self._start("kubelet", argv)

    # --- further nodes -------------------------------------------------------------------

    def further_nodes(self) -> list[LabNode]:
        """The running lab's nodes beyond ``lab-node``, in the order they were added."""
        indexes = self.info().get("nodes")
        return [LabNode(int(i)) for i in indexes] if isinstance(indexes, list) else []

    def _record_nodes(self, indexes: list[int]) -> None:
        info = self.info()
        info["nodes"] = indexes
        self.lab_file.write_text(json.dumps(info))

    def add_node(self, index: int) -> LabNode:
        """Start node ``lab-node-<index>`` in this running lab: its NICs on the fabric, its
        containerd, its kubelet (until its Node is Ready) and our agent (until it has
        published). Recorded before anything is made, so :meth:`down` (or
        :meth:`remove_node`) undoes a half-made node too. Raises :class:`LabError`."""
        node = LabNode(index)
        if not isinstance(self.driver, ProcessDriver):
            raise LabError("E_USAGE", "further nodes run our agent as a host process only")
        known = [n.index for n in self.further_nodes()]
        if index in known:
            raise LabError("E_LAB_RUNNING", f"{node.name} is already part of the lab")
        bins = self._binaries()
        self._record_nodes([*known, index])
        try:
            self._add_node(node, bins)
        except (LabError, DriverError, images.ImageError) as exc:
            raise LabError(exc.code, f"{node.name}: {exc.message}") from exc
        except (ApiFailure, OSError) as exc:
            raise LabError("E_LAB_START", f"{node.name}: {exc}") from exc
        log.info("event=lab-node-added node=%s", node.name)
        return node

    def _add_node(self, node: LabNode, bins: dict[str, Path]) -> None:
        record = HostRecord.load(self.host_file)
        self._fabric(node, record)
        host_changes.create_cgroups(record, self.host_file, node.cgroup)
        layout = node.layout(self.layout.root)
        layout.root.mkdir(parents=True, exist_ok=True)
        info = self.info()
        server = str(info["server"])
        ca = LabCA.load(self.layout.pki)
        ca.issue(
            node.cert,
            f"system:node:{node.name}",
            server_ips=(node.address,),
            server_names=(node.name,),
        )
        kubeconfig = self._kubeconfig(
            ca, server, node.cert, f"system:node:{node.name}", ("system:nodes",)
        )
        self._containerd(bins, layout, node.containerd_process)
        kubelet = configs.KubeletNode(
            name=node.name,
            address=node.address,
            cert=node.cert,
            port=_free_port(),
            healthz_port=_free_port(),
        )
        (layout.cni_conf / configs.PRIMARY_CONFLIST).write_text(
            configs.cni_conflist(layout, node.pod_block)
        )
        layout.kubelet_config.write_text(
            configs.kubelet_config(layout, kubelet, "/" + node.cgroup, self.layout.pki)
        )
        binary = bins["kubernetes"] / "kubelet"
        self._start(node.kubelet_process, configs.kubelet_argv(binary, layout, kubelet, kubeconfig))
        admin = self.admin()
        try:
            self._wait(
                f"node {node.name} Ready",
                lambda: node_ready(admin, node.name),
                node.kubelet_process,
            )
            assert isinstance(self.driver, ProcessDriver)
            self.driver.start_agent(
                DriverContext(
                    layout=layout,
                    ca=ca,
                    admin=admin,
                    procs=self.procs,
                    webhook_port=int(info["ports"]["webhook"]),  # type: ignore[index]
                    server=server,
                ),
                AgentNode(name=node.name, links=node.nics, process=node.agent_process),
            )
        finally:
            admin.close()

    def _fabric(self, node: LabNode, record: HostRecord) -> None:
        """The fabric bridge (once), the node's two NICs with their fabric ports, and the
        node's address beside the first node's."""
        from pyroute2 import IPRoute

        with IPRoute() as ip:
            existing = {link.get_attr("IFLA_IFNAME") for link in ip.get_links()}
            wanted = [*node.nics, *node.fabric_ports]
            if FABRIC_BRIDGE not in record.links:
                wanted.append(FABRIC_BRIDGE)
            clash = [n for n in wanted if n in existing]
            if clash:
                raise LabError("E_LAB_LINK_EXISTS", f"link {clash[0]} exists and is not ours")
            if FABRIC_BRIDGE not in record.links:
                record.links.append(FABRIC_BRIDGE)
                record.save(self.host_file)
                ip.link("add", ifname=FABRIC_BRIDGE, kind="bridge")
                ip.link("set", index=ip.link_lookup(ifname=FABRIC_BRIDGE)[0], state="up")
            fabric = ip.link_lookup(ifname=FABRIC_BRIDGE)[0]
            for nic, port in zip(node.nics, node.fabric_ports, strict=True):
                record.links.append(nic)
                record.save(self.host_file)
                ip.link("add", ifname=nic, kind="veth", peer=port)
                port_index = ip.link_lookup(ifname=port)[0]
                ip.link("set", index=port_index, master=fabric, state="up")
                ip.link("set", index=ip.link_lookup(ifname=nic)[0], state="up")
            n0 = ip.link_lookup(ifname=NODE_LINKS[0])[0]
            ip.addr("add", index=n0, address=node.address, prefixlen=32)

    def remove_node(self, index: int, timeout: float = 90.0) -> list[str]:
        """Take ``lab-node-<index>`` out of the running lab: its Pods deleted while its agent
        still runs (the agent undoes their attachments), then its agent, kubelet and
        containerd stopped, what is left in its cgroups killed, its mounts, cgroups, links
        and address removed and its Node deleted. Returns what could not be removed."""
        node = LabNode(index)
        admin = self.admin()
        try:
            deadline = time.monotonic() + timeout
            self._delete_pods_where(
                admin, lambda ns: True, deadline, lambda pod: _node_of(pod) == node.name
            )
        finally:
            admin.close()
        layout = node.layout(self.layout.root)
        for name in (node.agent_process, node.kubelet_process, node.containerd_process):
            self.procs.stop(name)
        self._kill_shims([layout.containerd_socket])
        record = HostRecord.load(self.host_file)
        mine = HostRecord(cgroups=[c for c in record.cgroups if Path(c).name == node.cgroup])
        host_changes.kill_cgroup_processes(mine)
        problems = [f"still mounted: {p}" for p in host_changes.unmount_under(layout.root)]
        problems += [f"cgroup not removed: {c}" for c in host_changes.remove_cgroups(mine)]
        problems += self._remove_links(HostRecord(links=list(node.nics)))
        self._remove_node_address(node)
        record.cgroups = [c for c in record.cgroups if c not in mine.cgroups]
        record.links = [n for n in record.links if n not in node.nics]
        others = [n for n in self.further_nodes() if n.index != index]
        if not others and FABRIC_BRIDGE in record.links:
            problems += self._remove_links(HostRecord(links=[FABRIC_BRIDGE]))
            record.links.remove(FABRIC_BRIDGE)
        record.save(self.host_file)
        admin = self.admin()
        try:
            with contextlib.suppress(NotFound):
                admin.delete(r.NODES, node.name)
        finally:
            admin.close()
        self._record_nodes([n.index for n in others])
        if not problems:
            shutil.rmtree(layout.root, ignore_errors=True)
        for p in problems:
            log.error("event=lab-node-remove-problem node=%s detail=%s", node.name, p)
        return problems

    @staticmethod
    def _remove_node_address(node: LabNode) -> None:
        from pyroute2 import IPRoute

        with IPRoute() as ip:
            index = ip.link_lookup(ifname=NODE_LINKS[0])
            if index:
                with contextlib.suppress(Exception):  # netlink: already gone
                    ip.addr("del", index=index[0], address=node.address, prefixlen=32)

    def _links(self, record: HostRecord) -> None:
        from pyroute2 import IPRoute

        with IPRoute() as ip:
            existing = {link.get_attr("IFLA_IFNAME") for link in ip.get_links()}
            for pair in (LAB_LINKS, NODE_LINKS, (configs.CNI_BRIDGE,)):
                clash = [n for n in pair if n in existing]
                if clash:
                    raise LabError("E_LAB_LINK_EXISTS", f"link {clash[0]} exists and is not ours")
                record.links.append(pair[0])  # deleting one end of a veth deletes both
                record.save(self.host_file)
                if len(pair) == 2:
                    ip.link("add", ifname=pair[0], kind="veth", peer=pair[1])
                else:  # the Pod network's bridge (the bridge plugin adopts an existing one)
                    ip.link("add", ifname=pair[0], kind="bridge", address=pod_bridge_address())
                for name in pair:
                    ip.link("set", index=ip.link_lookup(ifname=name)[0], state="up")
            n0 = ip.link_lookup(ifname=NODE_LINKS[0])[0]
            ip.addr("add", index=n0, address=NODE_IP, prefixlen=32)
            n1 = ip.link_lookup(ifname=NODE_LINKS[1])[0]
            ip.addr("add", index=n1, address=NODE_PEER_IP, prefixlen=32)
            bridge = ip.link_lookup(ifname=configs.CNI_BRIDGE)[0]
            ip.addr("add", index=bridge, address=POD_GATEWAY, prefixlen=POD_PREFIX)

    def _pki(self, server: str) -> LabCA:
        pki = self.layout.pki
        ca = LabCA(pki)
        ca.service_account_keys()
        ca.issue(
            "apiserver",
            "kube-apiserver",
            server_ips=("127.0.0.1", NODE_IP, "10.96.0.1"),
            server_names=(
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
            ),
        )
        ca.issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client", ("system:masters",))
        ca.issue(
            "kubelet", f"system:node:{NODE_NAME}", server_ips=(NODE_IP,), server_names=(NODE_NAME,)
        )
        for name, user, groups in (
            ("admin", "kubernetes-admin", ("system:masters",)),
            ("controller-manager", "system:kube-controller-manager", ()),
            ("scheduler", "system:kube-scheduler", ()),
            ("kubelet", f"system:node:{NODE_NAME}", ("system:nodes",)),
        ):
            self._kubeconfig(ca, server, name, user, groups)
        return ca

    def _kubeconfig(
        self, ca: LabCA, server: str, name: str, user: str, groups: tuple[str, ...]
    ) -> Path:
        cred = ca.issue(f"{name}-client", user, groups)
        path = self.layout.kubeconfig(name)
        path.write_text(configs.kubeconfig(server, ca.ca_cert, cred.cert, cred.key, user))
        return path

    def _containerd(self, bins: dict[str, Path], layout: Layout, process: str) -> None:
        layout.containerd.mkdir(parents=True, exist_ok=True)
        layout.nri_socket.parent.mkdir(parents=True, exist_ok=True)
        layout.cni_conf.mkdir(parents=True, exist_ok=True)
        layout.cni_bin.mkdir(parents=True, exist_ok=True)
        (layout.cni_conf / configs.PRIMARY_CONFLIST).write_text(configs.cni_conflist(layout))
        layout.containerd_config.write_text(
            configs.containerd_config(layout, bins["runc"] / "runc", bins["cni"])
        )
        env = {"PATH": f"{bins['containerd']}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
        argv = [str(bins["containerd"] / "containerd"), "--config", str(layout.containerd_config)]
        self._start(process, argv, env)
        self._wait(process, layout.containerd_socket.exists, process)
        archives = images.write_archives(layout.images, bins["pause"] / "pause")
        images.import_images(bins["containerd"] / "ctr", str(layout.containerd_socket), archives)

    def _start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.procs.start(name, argv, env)

    def _wait(self, what: str, check: object, proc: str | None = None) -> None:
        assert callable(check)
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError, ApiFailure):
                if check():
                    return
            if proc is not None:
                record = self.procs.get(proc)
                if record is None or not record.alive():
                    raise LabError("E_LAB_START", f"{proc} exited: {self.procs.tail(proc)}")
            time.sleep(0.3)
        where = f"; {self.procs.tail(proc)}" if proc else ""
        raise LabError("E_LAB_START", f"{what}: not ready after {self.timeout:.0f}s{where}")

    # --- Multus ---------------------------------------------------------------------------

    def _multus(
        self, mode: str | None = None, daemon_api: DaemonApi | None = None
    ) -> MultusInstall:
        return MultusInstall(
            self.layout, self.timeout, mode or self.multus_mode, self.procs, daemon_api
        )

    def enable_multus(
        self, mode: str = "thin", daemon_api: DaemonApi | None = None
    ) -> MultusInstall:
        """Put Multus (``mode``: thin, or thick — daemon and shim, the daemon reaching the
        API server at ``daemon_api`` when given) and Whereabouts into this running lab's Pod
        path (a no-op when they are, in that mode); returns the handle tests create
        networks with."""
        install = self._multus(mode, daemon_api)
        running = install.running_mode()
        if running == mode:
            return install
        if running is not None:
            raise LabError("E_USAGE", f"Multus runs {running} here; disable it first")
        info = self.info()
        port = int(info["ports"]["apiserver"])  # type: ignore[index]
        admin = self.admin()
        try:
            install.install(admin, str(info["server"]), port)
        finally:
            admin.close()
        return install

    def disable_multus(self) -> None:
        """Take Multus out of the Pod path again (Pods selecting networks are deleted)."""
        install = self._multus(self._multus().running_mode())
        admin = self.admin()
        try:
            install.uninstall(admin)
        finally:
            admin.close()

    # --- down ----------------------------------------------------------------------------

    def down(self) -> list[str]:
        """Stop and remove everything the lab made; returns what could not be removed."""
        problems: list[str] = []
        if not self.layout.root.exists():
            return problems
        record = HostRecord.load(self.host_file)
        if self.procs.get("kube-apiserver") and "kube-apiserver" in self.running():
            with contextlib.suppress(Exception):
                self._delete_pods()
        further = self.further_nodes()
        for name in (
            dranet_peer.PROCESS,  # a test peer's, if one was started beside our driver
            "dmn-node",
            *(n.agent_process for n in further),
            "dmn-controller",
            "kubelet",
            *(n.kubelet_process for n in further),
            "kube-scheduler",
            "kube-controller-manager",
        ):
            self.procs.stop(name)
        for name in ("containerd", *(n.containerd_process for n in further)):
            self.procs.stop(name)
        root = self.layout.root
        self._kill_shims(
            [self.layout.containerd_socket, *(n.layout(root).containerd_socket for n in further)]
        )
        host_changes.kill_cgroup_processes(record)
        self.procs.stop_all()
        problems += [f"still mounted: {p}" for p in host_changes.unmount_under(self.layout.root)]
        problems += [f"cgroup not removed: {c}" for c in host_changes.remove_cgroups(record)]
        problems += self._remove_links(record)
        host_changes.restore_sysctls(record)
        host_changes.remove_created_paths(record)
        if not problems:
            shutil.rmtree(self.layout.root, ignore_errors=True)
        for p in problems:
            log.error("event=lab-down-problem detail=%s", p)
        return problems

    def _delete_pods(self, timeout: float = 90.0) -> None:
        """Workload Pods first, while our driver still runs (it tears their attachments
        down); then our driver's own Pods, once their DaemonSet and Deployment are gone
        (a Helm-installed driver: else they would be recreated)."""
        admin = self.admin()
        try:
            deadline = time.monotonic() + timeout
            self._delete_pods_where(admin, lambda ns: ns != DRIVER_NAMESPACE, deadline)
            for resource in (DAEMON_SETS, DEPLOYMENTS):
                for obj in admin.list(resource, DRIVER_NAMESPACE).items:
                    with contextlib.suppress(NotFound):
                        admin.delete(resource, obj["metadata"]["name"], DRIVER_NAMESPACE)
            self._delete_pods_where(admin, lambda ns: True, deadline)
        finally:
            admin.close()

    @staticmethod
    def _delete_pods_where(
        admin: Cluster,
        chosen: Callable[[str], bool],
        deadline: float,
        where: Callable[[dict[str, Any]], bool] = lambda pod: True,
    ) -> None:
        def remaining() -> list[dict[str, Any]]:
            return [
                p
                for p in admin.list(r.PODS).items
                if chosen(p["metadata"]["namespace"]) and where(p)
            ]

        for pod in remaining():
            meta = pod["metadata"]
            with contextlib.suppress(NotFound):
                admin.delete(r.PODS, meta["name"], meta["namespace"])
        while time.monotonic() < deadline and remaining():
            time.sleep(0.5)

    @staticmethod
    def _kill_shims(sockets: list[Path]) -> None:
        """The runc shims of *our* containerds (their ``-address`` is one of our sockets)."""
        ours = {str(s).encode() for s in sockets}
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if not argv or not argv[0].endswith(b"containerd-shim-runc-v2"):
                continue
            if ours & set(argv):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(proc.name), signal.SIGKILL)

    def _remove_links(self, record: HostRecord) -> list[str]:
        from pyroute2 import IPRoute

        problems = []
        with IPRoute() as ip:
            for name in record.links:
                index = ip.link_lookup(ifname=name)
                if not index:
                    continue
                try:
                    ip.link("del", index=index[0])
                except Exception as exc:  # netlink errors
                    problems.append(f"link {name} not removed: {exc}")
        return problems


def _http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as resp:
            return int(resp.status) == 200
    except (OSError, ValueError):
        return False


def node_ready(admin: Cluster, name: str = NODE_NAME) -> bool:
    try:
        node = admin.get(r.NODES, name)
    except NotFound:
        return False
    return condition_true(node, "Ready")


def _node_of(pod: dict[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def pod_bridge_address() -> str:
    """A random locally administered unicast address for the Pod network's bridge.

    Given at creation, it is the bridge's for good (the kernel marks it set). A bridge
    created without one takes the lowest address of its ports and changes it as Pods come
    and go; the Pods' neighbour entries for the gateway then name an address nothing
    answers to until they expire: a controller replica's calls to the API server (a
    webhook review reading plugins) and its replies to kubelet's probes go nowhere, the
    likely cause of webhook reviews timing out during the helm rollout test."""
    octets = bytearray(os.urandom(6))
    octets[0] = (octets[0] & 0xFC) | 0x02
    return ":".join(f"{b:02x}" for b in octets)
