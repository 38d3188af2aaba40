"""What the node services know about the node they run on (from the Node object and flags)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dmn.api.identity import DRIVER
from dmn.opcodes.device_environment import OVSDB_REMOTE


@dataclass(frozen=True)
class NodeConfig:
    node_name: str
    node_uid: str
    state_dir: Path
    host_netns: str = "/proc/1/ns/net"
    driver: str = DRIVER
    pool: str = ""  # default: the node name (one pool per node)
    # where VFIO grants write their CDI specs (the container runtime's CDI spec directory)
    cdi_root: Path = Path("/var/run/cdi")
    # the node's OVSDB (ovs/port-attach): a node fact from a flag, never from workload config
    ovsdb_remote: str = OVSDB_REMOTE
    # KEP-5304 device metadata: the agent's kubelet plugin directory (<plugins dir>/<driver>,
    # where it serves dra.sock); None writes no metadata (device_metadata.py)
    plugin_data_dir: Path | None = None

    @property
    def pool_name(self) -> str:
        return self.pool or self.node_name
