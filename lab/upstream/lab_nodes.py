"""The upstream lab's further nodes: ``lab-node-1``, ``lab-node-2``, … beside ``lab-node``.

Each is a node of its own on this one machine: a kubelet (own root directory, node name,
node address, ports, serving certificate and cgroup root), a containerd with NRI (own
root, state, sockets and CNI configuration) and our node agent (own journal, kubelet
plugin registration and NRI connection). They share the host's network namespace, as
the first node does, so what keeps them apart is names and addresses, all derived here
from the node's index (pure; :class:`~dmn.lab.upstream.cluster.UpstreamLab` does the I/O):

* the node address ``10.254.254.<10+i>`` (a /32 beside :data:`~.configs.NODE_IP` on the
  lab's node-address link: kubelet binds it and the API server calls kubelet there);
* the Pod addresses: the block ``10.244.<i>.0/24`` of the one Pod network every node's
  Pods share on-link (:data:`~.configs.POD_NETWORK`);
* two "NICs" ``dmnlab<i>n0`` and ``dmnlab<i>n1``, each one end of a veth pair whose other
  end (``dmnlab<i>f0``/``f1``) is a port of the bridge :data:`FABRIC_BRIDGE`: the rack's
  switch. Secondary networks on these NICs span nodes (a macvlan child on node 1 reaches
  one on node 2 through the fabric). ``lab-node`` keeps its own pair (``dmnlab0`` and
  ``dmnlab1``, wired to each other): the single-node lab stays exactly as it was.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dmn.lab.upstream.configs import Layout

FABRIC_BRIDGE = "dmnlab-fab"
#: node indexes 1 … MAX_INDEX (names and addresses below stay unique and short)
MAX_INDEX = 8


@dataclass(frozen=True)
class LabNode:
    """One further node, by its index (1 … :data:`MAX_INDEX`)."""

    index: int

    def __post_init__(self) -> None:
        if not 1 <= self.index <= MAX_INDEX:
            raise ValueError(f"a further lab node's index is 1 … {MAX_INDEX}, not {self.index}")

    @property
    def name(self) -> str:
        return f"lab-node-{self.index}"

    @property
    def address(self) -> str:
        return f"10.254.254.{10 + self.index}"

    @property
    def pod_block(self) -> str:
        return f"10.244.{self.index}.0/24"

    @property
    def nics(self) -> tuple[str, str]:
        return (f"dmnlab{self.index}n0", f"dmnlab{self.index}n1")

    @property
    def fabric_ports(self) -> tuple[str, str]:
        return (f"dmnlab{self.index}f0", f"dmnlab{self.index}f1")

    @property
    def cgroup(self) -> str:
        """Its kubelet's cgroup root, a top-level cgroup of its own in every hierarchy."""
        return f"dmn-lab-n{self.index}"

    @property
    def cert(self) -> str:
        """Its kubelet's serving certificate and client identity, in the lab's PKI."""
        return f"kubelet-n{self.index}"

    @property
    def containerd_process(self) -> str:
        return f"containerd-n{self.index}"

    @property
    def kubelet_process(self) -> str:
        return f"kubelet-n{self.index}"

    @property
    def agent_process(self) -> str:
        return f"dmn-node-n{self.index}"

    def layout(self, lab_root: Path) -> Layout:
        """Where its components keep their files: ``n<i>`` below the lab directory (short:
        kubelet's plugin registration socket path must fit ``sockaddr_un``)."""
        return Layout(lab_root / f"n{self.index}")
