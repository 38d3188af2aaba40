"""Configuration files and command lines of the upstream lab's components (pure rendering).

Every listener is on loopback except kubelet's and kube-apiserver's, which bind the lab
node's own address (:data:`NODE_IP` on a veth pair the lab creates; kubelet refuses a
loopback node IP, and Pods reach the API server there, as they reach a node's address in a
cluster), and every path is below the lab directory ``Layout.root``. Facts these follow:
kube-apiserver/kubelet/containerd flags and config fields of v1.37.2 / v2.3 (see
``docs/upstream-lab.md``).
"""

from __future__ import annotations

import ipaddress
import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from dmn.lab.runtime.required_plugins import TOLERATE_MISSING_PLUGINS
from dmn.lab.upstream.images import PAUSE_IMAGE

NODE_NAME = "lab-node"
NODE_IP = "10.254.254.1"  # host-side address of the lab's node-address veth pair
NODE_PEER_IP = "10.254.254.2"
SERVICE_CIDR = "10.96.0.0/24"
#: the Pod network: one L2 segment (the bridge :data:`CNI_BRIDGE`) shared by every lab node,
#: each node's Pods addressed from its own /24 block of it (``lab-node``'s is
#: :data:`POD_CIDR`), so Pods of two nodes reach each other on-link: no route and no
#: forwarding on the host
POD_NETWORK = "10.244.0.0/16"
POD_CIDR = "10.244.0.0/24"
#: the host's address on the Pod network's bridge (the lab creates the bridge with it): the
#: API server reaches Pods on the Pod network (an admission webhook's endpoints), and Pods
#: reach the node address through it — one /32 route, no default route, no forwarding
POD_GATEWAY = "10.244.0.1"
POD_PREFIX = 16
CNI_BRIDGE = "dmnlab-cni0"
#: the primary Pod network's file in the CNI configuration directory (``--multus`` puts
#: Multus' ahead of it, naming this file as Multus' cluster network)
PRIMARY_CONFLIST = "10-dmn-lab.conflist"
FEATURE_GATES = "DRADeviceCompatibilityGroups=true"
DRIVER_NAMESPACE = "dra-multi-network"
#: containerd's NRI request timeout (its default, written out: the fail-closed tests outlast
#: it on purpose)
NRI_REQUEST_TIMEOUT_S = 2


@dataclass(frozen=True)
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int
    kubelet: int
    kubelet_healthz: int
    webhook: int


@dataclass(frozen=True)
class Layout:
    """Where every component keeps its files, below ``root``."""

    root: Path

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd"

    @property
    def containerd(self) -> Path:
        return self.root / "containerd"

    @property
    def containerd_socket(self) -> Path:
        return self.root / "containerd" / "containerd.sock"

    @property
    def containerd_config(self) -> Path:
        return self.root / "containerd" / "config.toml"

    @property
    def nri_socket(self) -> Path:
        return self.root / "nri" / "nri.sock"

    @property
    def kubelet_root(self) -> Path:
        return self.root / "kubelet"

    @property
    def kubelet_config(self) -> Path:
        return self.root / "kubelet.yaml"

    @property
    def cni_conf(self) -> Path:
        return self.root / "cni" / "net.d"

    @property
    def cni_bin(self) -> Path:
        """The lab's own CNI plugin directory, searched after the reference plugins' (it
        starts empty; ``--multus`` installs Multus and Whereabouts there)."""
        return self.root / "cni" / "bin"

    @property
    def cni_data(self) -> Path:
        return self.root / "cni" / "ipam"

    @property
    def images(self) -> Path:
        return self.root / "images"

    @property
    def agent_state(self) -> Path:
        return self.root / "agent"

    @property
    def cdi_specs(self) -> Path:
        """The node agent's CDI directory in helm mode (the chart's default is the host's)."""
        return self.root / "cdi"

    @property
    def pod_logs(self) -> Path:
        return self.root / "pod-logs"

    def kubeconfig(self, who: str) -> Path:
        return self.root / f"{who}.kubeconfig"


def kubeconfig(
    server: str, ca: Path, cert: Path | None, key: Path | None, user: str, token: str = ""
) -> str:
    """A kubeconfig for ``user``: a client certificate, or a bearer token."""
    credentials: dict[str, str] = (
        {"token": token} if token else {"client-certificate": str(cert), "client-key": str(key)}
    )
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "dmn-lab", "cluster": {"server": server, "certificate-authority": str(ca)}}
        ],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": "dmn-lab", "context": {"cluster": "dmn-lab", "user": user}}],
        "current-context": "dmn-lab",
    }
    return yaml.safe_dump(doc, sort_keys=False)


def etcd_argv(etcd: Path, layout: Layout, ports: Ports) -> list[str]:
    client = f"http://127.0.0.1:{ports.etcd_client}"
    peer = f"http://127.0.0.1:{ports.etcd_peer}"
    return [
        str(etcd),
        "--name=dmn-lab",
        f"--data-dir={layout.etcd_data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=dmn-lab={peer}",
        "--unsafe-no-fsync",  # a throwaway lab: speed over durability
        "--log-level=warn",
    ]


def apiserver_argv(binary: Path, layout: Layout, ports: Ports) -> list[str]:
    pki = layout.pki
    return [
        str(binary),
        f"--etcd-servers=http://127.0.0.1:{ports.etcd_client}",
        f"--bind-address={NODE_IP}",
        f"--secure-port={ports.apiserver}",
        f"--advertise-address={NODE_IP}",
        "--endpoint-reconciler-type=none",
        f"--tls-cert-file={pki / 'apiserver.crt'}",
        f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--client-ca-file={pki / 'ca.crt'}",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        f"--service-account-issuer=https://127.0.0.1:{ports.apiserver}",
        f"--service-account-key-file={pki / 'sa.pub'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
        f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
        f"--kubelet-certificate-authority={pki / 'ca.crt'}",
        "--kubelet-preferred-address-types=InternalIP",
        "--allow-privileged=true",
        # call webhooks (and aggregated APIs) at their endpoint addresses: the lab runs no
        # Service proxy, so a Service's cluster IP leads nowhere
        "--enable-aggregator-routing=true",
        f"--feature-gates={FEATURE_GATES}",
        "--profiling=false",
        "--v=1",
    ]


def controller_manager_argv(binary: Path, layout: Layout) -> list[str]:
    pki = layout.pki
    kc = layout.kubeconfig("controller-manager")
    return [
        str(binary),
        f"--kubeconfig={kc}",
        f"--authentication-kubeconfig={kc}",
        f"--authorization-kubeconfig={kc}",
        "--bind-address=127.0.0.1",
        "--secure-port=0",
        "--leader-elect=false",
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={pki / 'sa.key'}",
        f"--root-ca-file={pki / 'ca.crt'}",
        "--controllers=*,-node-ipam-controller,-certificatesigningrequest-signing-controller",
        f"--feature-gates={FEATURE_GATES}",
        "--profiling=false",
        "--v=1",
    ]


def scheduler_argv(binary: Path, layout: Layout) -> list[str]:
    kc = layout.kubeconfig("scheduler")
    return [
        str(binary),
        f"--kubeconfig={kc}",
        f"--authentication-kubeconfig={kc}",
        f"--authorization-kubeconfig={kc}",
        "--bind-address=127.0.0.1",
        "--secure-port=0",
        "--leader-elect=false",
        f"--feature-gates={FEATURE_GATES}",
        "--profiling=false",
        "--v=1",
    ]


def containerd_config(layout: Layout, runc: Path, cni_bin: Path) -> str:
    """containerd 2.x config version 3; every path below the lab directory. CNI plugins are
    looked up in the reference plugins' build, then in the lab's own directory."""
    c = layout.containerd
    return f"""version = 3
root = "{c / "root"}"
state = "{c / "state"}"

[grpc]
  address = "{layout.containerd_socket}"

[ttrpc]
  address = "{layout.containerd_socket}.ttrpc"

[debug]
  address = ""

[metrics]
  address = ""

[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    path = "{c / "opt"}"

  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = "{PAUSE_IMAGE}"

  [plugins.'io.containerd.cri.v1.runtime']
    enable_selinux = false
    netns_mounts_under_state_dir = true
    # this machine refuses to lower oom_score_adj (no CAP_SYS_RESOURCE over it): kubelet asks
    # -998 for sandboxes, runc init then fails; clamp to containerd's own value instead
    restrict_oom_score_adj = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = "{runc}"
          Root = "{c / "runc"}"
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ["{cni_bin}", "{layout.cni_bin}"]
      conf_dir = "{layout.cni_conf}"
      max_conf_num = 1

  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"

  [plugins.'io.containerd.nri.v1.nri']
    disable = false
    socket_path = "{layout.nri_socket}"
    plugin_path = "{layout.root / "nri" / "plugins"}"
    plugin_config_path = "{layout.root / "nri" / "conf.d"}"
    plugin_registration_timeout = "5s"
    plugin_request_timeout = "{NRI_REQUEST_TIMEOUT_S}s"
    [plugins.'io.containerd.nri.v1.nri'.default_validator]
      enable = true
      tolerate_missing_plugins_annotation = "{TOLERATE_MISSING_PLUGINS}"
"""


def cni_conflist(layout: Layout, block: str = POD_CIDR) -> str:
    """The primary Pod network: the reference bridge + host-local plugins on the bridge the
    lab created with the host's address :data:`POD_GATEWAY` (the plugin's ``isGateway``
    is off: it would also switch on the host's IP forwarding). A Pod gets an address of
    the node's ``block`` with the whole :data:`POD_NETWORK` on-link, and one route to the
    node address via the host, no default route and no masquerade: it reaches the host
    (the API server) and the Pods of every lab node, nothing beyond."""
    first, last = _block_range(block)
    doc = {
        "cniVersion": "1.0.0",
        "name": "dmn-lab",
        "plugins": [
            {
                "type": "bridge",
                "bridge": CNI_BRIDGE,
                "isGateway": False,
                "ipMasq": False,
                "hairpinMode": False,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(layout.cni_data),
                    "ranges": [
                        [
                            {
                                "subnet": POD_NETWORK,
                                "gateway": POD_GATEWAY,
                                "rangeStart": first,
                                "rangeEnd": last,
                            }
                        ]
                    ],
                    "routes": [{"dst": f"{NODE_IP}/32", "gw": POD_GATEWAY}],
                },
            }
        ],
    }
    return json.dumps(doc, indent=2)


def _block_range(block: str) -> tuple[str, str]:
    """The addresses host-local hands out of a node's /24 block (the gateway's and the
    first few stay free)."""
    net = ipaddress.ip_network(block)
    return str(net.network_address + 10), str(net.broadcast_address - 1)


@dataclass(frozen=True)
class KubeletNode:
    """Who one kubelet is: its node name and address, its serving certificate's name in
    the lab's PKI directory and its ports."""

    name: str = NODE_NAME
    address: str = NODE_IP
    cert: str = "kubelet"
    port: int = 0
    healthz_port: int = 0


def kubelet_config(layout: Layout, node: KubeletNode, cgroup_root: str, pki: Path) -> str:
    doc = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": node.address,
        "port": node.port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": node.healthz_port,
        "tlsCertFile": str(pki / f"{node.cert}.crt"),
        "tlsPrivateKeyFile": str(pki / f"{node.cert}.key"),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(pki / "ca.crt")},
        },
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": cgroup_root,
        "failCgroupV1": False,
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{layout.containerd_socket}",
        "podLogsDir": str(layout.pod_logs),
        "volumePluginDir": str(layout.root / "volume-plugins"),
        "registerNode": True,
        "resolvConf": "/etc/resolv.conf",
        "evictionHard": {
            "memory.available": "1Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "localStorageCapacityIsolation": False,
        "syncFrequency": "10s",
        "nodeStatusUpdateFrequency": "5s",
        "shutdownGracePeriod": "0s",
    }
    return yaml.safe_dump(doc, sort_keys=False)


def kubelet_argv(binary: Path, layout: Layout, node: KubeletNode, kubeconfig: Path) -> list[str]:
    return [
        str(binary),
        f"--config={layout.kubelet_config}",
        f"--kubeconfig={kubeconfig}",
        f"--root-dir={layout.kubelet_root}",
        f"--hostname-override={node.name}",
        f"--node-ip={node.address}",
        "--v=1",
    ]
