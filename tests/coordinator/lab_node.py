"""A lab node with the real agent parts wired to the coordinator, for end-to-end tests.

:func:`lab_node` starts the real lab control plane (API server with the generated CRDs and
builtin NetworkPlugins, the real controller, slice publication of a node whose links are a
veth pair in a namespace the lab creates), applies the example IPPools (``examples/ipam``)
and ``examples/topologies/shared-macvlan`` (whose net1 is addressed from the pool
macvlan-v4), then the node agent: :class:`NodeServices` over a RocksDB journal in a private state
directory, the kubelet gRPC plugin server on unix sockets and the NRI plugin connected to
the lab NRI runtime. Everything is stopped and removed on exit, also after a failure.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dmn.agent.coordinator import NodeConfig, NodeServices
from dmn.agent.coordinator.handles import InventoryDevices
from dmn.agent.coordinator.maintenance import MaintenanceConfig
from dmn.agent.coordinator.node_agent import AgentSockets, NodeAgent
from dmn.agent.inventory import Inventory
from dmn.agent.kubelet.server import KubeletPluginServer
from dmn.agent.nri.plugin import PluginConfig
from dmn.api.cluster import Cluster, connect
from dmn.api.cluster import resources as r
from dmn.api.identity import DRIVER
from dmn.host.inventory_sources import LinkSource
from dmn.lab import manifests
from dmn.lab.cluster import LabCluster
from dmn.lab.demo import TopologyResult, apply_pools, claim_body, wait_settled
from dmn.lab.node import NODE_NAME, NODE_UID
from dmn.lab.node import inventory as inventory_of_lab
from dmn.lab.runtime.nri_runtime import LabNriRuntime
from dmn.lab.shipped import examples_dir
from dmn.lab.state_dir import StateDir
from dmn.opcodes.device_environment import OVSDB_REMOTE
from tests.kernel_lab.guest import GUEST_ENV
from tests.stalling_proxy import StallingProxy

TOPOLOGY = examples_dir() / "topologies" / "shared-macvlan.yaml"
# Inside the kernel lab every netlink call runs under qemu's TCG emulation, an order of
# magnitude slower than the host and slower still while CI's other tests share the two
# cores (a bond+VLAN RunPodSandbox overran 22.5 s there at load 15): hooks get the time the
# emulated kernel needs, not the host's. The controller's first compile in the guest took
# over 60 s at load 24 (the shared-macvlan topology was still Unknown).
IN_KERNEL_LAB = GUEST_ENV in os.environ
WAIT = 300.0 if IN_KERNEL_LAB else 60.0
NRI_REQUEST_TIMEOUT = 120.0 if IN_KERNEL_LAB else 30.0
NRI_HOOK_DEADLINE = 90.0 if IN_KERNEL_LAB else 25.0


KERNEL_TOPOLOGY = {
    "apiVersion": "networking.dra-multi-network.schseba.github.io/v1alpha1",
    "kind": "NetworkTopology",
    "metadata": {"name": "c1-kernel"},
    "spec": {
        "effectBudget": {"allow": ["linux/link-move/v1", "linux/link-configure/v1"]},
        "steps": [
            {
                "id": "nic",
                "kind": "Allocation",
                "pluginRef": {"name": "host-cni"},
                "config": {"mode": "kernel", "ifName": "net2", "mtu": 1400, "up": True},
            }
        ],
    },
}


def lab_devices(lab: LabCluster) -> InventoryDevices:
    """The coordinator's DeviceView over the lab's slice publication and inventory."""
    publication = lab.publication
    assert publication is not None
    return InventoryDevices(lambda: publication.publication.last, lambda: publication.inventory)


@dataclass
class LabNode:
    lab: LabCluster
    cluster: Cluster
    agent: NodeAgent
    runtime: LabNriRuntime
    device_class: str
    revision: str
    root: Path
    proxy: StallingProxy | None = None  # between the agent and the API server (brownouts)

    @property
    def services(self) -> NodeServices:
        assert self.agent.services is not None
        return self.agent.services

    @property
    def kubelet(self) -> KubeletPluginServer:
        assert self.agent.kubelet is not None
        return self.agent.kubelet

    def kernel_class(self) -> str:
        """Apply the whole-link (host-cni) topology; returns its DeviceClass."""
        self.cluster.apply(KERNEL_TOPOLOGY)
        (topo,) = wait_settled(self.cluster, ["c1-kernel"], WAIT)
        assert topo.ready == "True", topo
        return topo.device_classes[0]

    def restart_agent(self) -> NodeServices:
        """A restarted agent's services on the same state dir; the adapters follow."""
        return self.agent.restart_services()

    @property
    def host_ns(self) -> str:
        return self.lab.netns

    def claim(
        self, name: str, namespace: str = "default", device_class: str = ""
    ) -> dict[str, Any]:
        return create_claim(self.cluster, name, device_class or self.device_class, namespace)

    def pod(
        self,
        name: str,
        claim: str,
        namespace: str = "default",
        node_name: str = NODE_NAME,
        host_network: bool = False,
    ) -> dict[str, Any]:
        return create_pod(self.cluster, name, claim, namespace, node_name, host_network)


def create_claim(
    cluster: Cluster, name: str, device_class: str, namespace: str = "default"
) -> dict[str, Any]:
    """A ResourceClaim for one device of ``device_class`` (request ``net1``)."""
    body = claim_body(device_class, name, namespace)
    created: dict[str, Any] = cluster.create(r.RESOURCE_CLAIMS, body, namespace)
    return created


def create_pod(
    cluster: Cluster,
    name: str,
    claim: str,
    namespace: str = "default",
    node_name: str = NODE_NAME,
    host_network: bool = False,
) -> dict[str, Any]:
    """A Pod on ``node_name`` with one container and the claim ``claim`` as ``net``."""
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeName": node_name,
            "hostNetwork": host_network,
            "containers": [{"name": "app", "image": "busybox"}],
            "resourceClaims": [{"name": "net", "resourceClaimName": claim}],
        },
    }
    created: dict[str, Any] = cluster.create(r.PODS, body, namespace)
    return created


def _teardown(agent: NodeAgent) -> None:
    """Stop the agent, then release the pins under our private state dir (ours, also after
    a failure) so that the directory can be removed."""
    agent.stop(1.0)
    if agent.services is None:
        return
    pins = agent.services.pins
    for ref in pins.list():
        pins.release(Path(ref.path).name, cleanup_verified=True)
    pins.close()


@contextmanager
def lab_control_plane(
    root: Path,
    follow_links: bool = False,
    inventory: Callable[[Path, LinkSource | None], Inventory] = inventory_of_lab,
    topology_edit: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> Iterator[tuple[LabCluster, Cluster, TopologyResult]]:
    """The lab's control plane under ``root``/lab: API server, controller and slice
    publication of the lab node (links in a namespace the lab owns), with the example
    IPPools and the ``shared-macvlan`` topology applied and settled Ready; stopped on
    exit. ``topology_edit`` changes the topology document before it is applied (a
    benchmark compares it with and without its pool)."""
    with ExitStack() as stack:
        lab = LabCluster(
            StateDir(root / "lab"),
            resync=5.0,
            links="netns",
            follow_links=follow_links,
            inventory=inventory,
        )
        lab.start()
        stack.callback(lab.stop)
        cluster = lab.client()
        apply_pools(cluster)  # before any Pod of shared-macvlan attaches (pool: macvlan-v4)
        for doc in manifests.load(TOPOLOGY):
            cluster.apply(topology_edit(doc.doc) if topology_edit else doc.doc)
        (topo,) = wait_settled(cluster, ["shared-macvlan"], WAIT)
        assert topo.ready == "True", topo
        yield lab, cluster, topo


@contextmanager
def lab_node(
    follow_links: bool = False,
    proxied: bool = False,
    state_dir: Path | None = None,
    inventory: Callable[[Path, LinkSource | None], Inventory] = inventory_of_lab,
    ovsdb_remote: str = OVSDB_REMOTE,
    device_metadata: bool = False,
) -> Iterator[LabNode]:
    """``follow_links``: the lab's publisher rescans on rtnetlink events of its namespace
    (and so the agent's device health follows link changes). ``proxied``: the agent talks
    to the API server through a :class:`StallingProxy` (``node.proxy``) with a 5 s request
    timeout, so that a test can stall the API server for the agent alone. ``state_dir``:
    the agent's journal and pins there (e.g. on a failing disk) instead of the private dir.
    ``inventory``: how the lab node is scanned (the kernel lab joins a netdevsim
    representor to a lab link); ``ovsdb_remote``: the agent's ``--ovsdb-remote``;
    ``device_metadata``: the agent's ``--device-metadata`` (CDI specs in ``<root>/cdi``)."""
    # short paths: unix socket paths must fit sockaddr_un
    root = Path(tempfile.mkdtemp(prefix="dmn-c1-", dir="/tmp"))
    with ExitStack() as stack:
        stack.callback(shutil.rmtree, root, True)
        lab, cluster, topo = stack.enter_context(
            lab_control_plane(root, follow_links=follow_links, inventory=inventory)
        )
        config = NodeConfig(
            node_name=NODE_NAME,
            node_uid=NODE_UID,
            state_dir=state_dir or root / "agent",
            host_netns=f"/var/run/netns/{lab.netns}",
            ovsdb_remote=ovsdb_remote,
            **(
                {"cdi_root": root / "cdi", "plugin_data_dir": root / "plugins" / DRIVER}
                if device_metadata
                else {}
            ),
        )
        sock = str(root / "nri.sock")
        runtime = LabNriRuntime(
            sock, request_timeout=NRI_REQUEST_TIMEOUT, registration_timeout=20.0
        ).start()
        stack.callback(runtime.stop)
        sockets = AgentSockets(
            registry_dir=root / "reg",
            plugins_dir=root / "plugins",
            nri=PluginConfig(
                socket_path=sock, hook_deadline=NRI_HOOK_DEADLINE, use_env_socket=False
            ),
            nri_ready_timeout=WAIT,
        )
        # maintenance passes only when a test runs them (tick, run_once): deterministic
        quiet = MaintenanceConfig(reconcile_interval=3600.0, retention_interval=3600.0)
        proxy: StallingProxy | None = None
        agent_cluster = cluster
        if proxied:
            proxy = StallingProxy(("127.0.0.1", int(lab.url.rsplit(":", 1)[1])))
            stack.callback(proxy.close)
            agent_cluster = Cluster(connect(url=proxy.url), request_timeout=5.0)
            stack.callback(agent_cluster.close)
        agent = NodeAgent(
            config,
            agent_cluster,
            lab_devices(lab),
            sockets,
            health_from=lab.publication,
            maintenance=quiet,
        )
        stack.callback(_teardown, agent)
        agent.start()
        assert runtime.wait_ready(1, WAIT) and agent.wait_nri_ready()
        node = LabNode(
            lab, cluster, agent, runtime, topo.device_classes[0], topo.revision, root, proxy
        )
        yield node
