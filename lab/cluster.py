"""The embedded lab's control plane in one process: API server, CRDs, controller, node slices.

:class:`LabCluster` starts, in order: the lab API server (objects restored from and saved to
the state directory), the generated CRDs and builtin NetworkPlugins from the Helm chart,
the lab node (Node object and its DeviceExposurePolicies, see :mod:`dmn.lab.node`), the
real controller (:class:`~dmn.controller.manager.Controller`, without leader election —
the lab has one replica), and the lab node's slice publication; then it writes the
kubeconfig. :meth:`LabCluster.stop` stops them in reverse order and saves the objects.

Not started (not built yet): the node agent's NodePrepare/NRI path, a kubelet or
container-runtime driver, Pod sandboxes. Claims are allocated only on request
(:meth:`allocate`, with the lab's structured-parameters allocator), not by a scheduler
loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from dmn.agent.inventory import Inventory
from dmn.agent.slices import InventoryWatch, NodeSlicePublisher
from dmn.agent.slices.publication_state import STATE_FILE
from dmn.api.cluster import ApiFailure, Cluster, connect
from dmn.controller.manager import Controller
from dmn.host.inventory_sources import LinkSource
from dmn.lab import node, node_netns
from dmn.lab.allocator.service import ClaimService
from dmn.lab.apiserver import LabApiServer
from dmn.lab.shipped import chart_dir
from dmn.lab.state_dir import StateDir
from dmn.opcodes.registry import default_registry

# the C (libyaml) parser when PyYAML has it: the same documents, parsed several times faster
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

log = logging.getLogger(__name__)

CHART = chart_dir()
CRD_DIR = CHART / "crds"
PLUGIN_DIR = CHART / "plugins"
LINK_MODES = ("recorded", "netns")


class LabError(Exception):
    """A reason-coded failure to start or use the lab (never a traceback for the user)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def chart_manifests(directory: Path) -> list[dict[str, Any]]:
    """The YAML documents of a chart directory, sorted by file name."""
    docs: list[dict[str, Any]] = []
    for path in sorted(directory.glob("*.yaml")):
        docs.extend(d for d in yaml.load_all(path.read_text(), Loader=_SAFE_LOADER) if d)
    return docs


class LabCluster:
    def __init__(
        self,
        state_dir: StateDir,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        resync: float = 30.0,
        links: str = "recorded",
        follow_links: bool = False,
        inventory: Callable[[Path, LinkSource | None], Inventory] = node.inventory,
    ) -> None:
        if links not in LINK_MODES:
            raise LabError("E_USAGE", f"links must be one of {', '.join(LINK_MODES)}")
        self.links = links
        # republish on rtnetlink events of the lab namespace (netns links only). Off by
        # default: a rescan opens netlink in that namespace, which pyroute2 does from a
        # forked child that inherits the open descriptors (an in-process agent's journal
        # lock among them) for its lifetime.
        self.follow_links = follow_links
        # how the lab node is scanned (tests join device facts the lab's links cannot have)
        self.inventory = inventory
        self.netns = ""
        self.state_dir = state_dir
        self.host, self.port = host, port
        self.resync = resync
        self.server: LabApiServer | None = None
        self.cluster: Cluster | None = None
        self.controller: Controller | None = None
        self.publication: NodeSlicePublisher | None = None
        self.url = ""

    # --- lifecycle -----------------------------------------------------------------------

    def start(self) -> str:
        """Start everything; returns the API server URL. Raises :class:`LabError`."""
        try:
            self.state_dir.create()
        except OSError as exc:
            raise LabError("E_IO", f"state dir {self.state_dir.root}: {exc.strerror}") from exc
        try:
            self.server = LabApiServer(
                self.host, self.port, state=self.state_dir.apiserver_state, bookmark_interval=1.0
            )
            self.url = self.server.start()
        except (OSError, ValueError, OverflowError) as exc:
            self.stop()
            where = f"port {self.port}, state {self.state_dir.apiserver_state}"
            raise LabError("E_LAB_START", f"API server ({where}): {exc}") from exc
        try:
            self.cluster = Cluster(connect(url=self.url))
            self._install(self.cluster)
            self.controller = Controller(self.cluster, default_registry(), resync=self.resync)
            self.controller.start()
            links = self._link_source()
            sysfs = self.state_dir.sysfs
            self.publication = NodeSlicePublisher(
                self.cluster,
                node.NODE_NAME,
                lambda: self.inventory(sysfs, links),
                resync=self.resync,
                # live links in the lab's namespace: a link change republishes
                inventory_watch=InventoryWatch(netns=self.netns, udev=False)
                if self.netns and self.follow_links
                else None,
                state_file=self.state_dir.root / STATE_FILE,
            )
            self.publication.publish()
            self.publication.start()
        except ApiFailure as exc:
            self.stop()
            raise LabError("E_LAB_START", f"installing the lab: {exc}") from exc
        except node_netns.NetnsError as exc:
            self.stop()
            raise LabError(exc.code, exc.message) from exc
        self.state_dir.write_kubeconfig(self.url)
        log.info("lab up url=%s state_dir=%s", self.url, self.state_dir.root)
        return self.url

    def _link_source(self) -> LinkSource | None:
        """The lab node's live links: None (recorded facts) or the lab's own namespace."""
        # a namespace an earlier lab recorded and did not remove (killed) is ours: delete it
        node_netns.remove_recorded(self.state_dir.root)
        if self.links == "recorded":
            return None
        self.netns = node_netns.create(self.state_dir.root, node.LAB_LINKS)
        return node_netns.link_source(self.netns)

    def _install(self, cluster: Cluster) -> None:
        for doc in chart_manifests(CRD_DIR):
            cluster.apply(doc)
        for doc in chart_manifests(PLUGIN_DIR):
            cluster.apply(doc)
        cluster.apply(node.node_object())
        for doc in node.policies():
            cluster.apply(doc)
        log.info("lab installed crds_dir=%s plugins_dir=%s", CRD_DIR, PLUGIN_DIR)

    def stop(self) -> None:
        """Stop in reverse order; safe to call more than once or after a failed start."""
        if self.publication is not None:
            self.publication.stop()
            self.publication = None
        if self.controller is not None:
            self.controller.stop()
            self.controller = None
        if self.cluster is not None:
            self.cluster.close()
            self.cluster = None
        if self.server is not None:
            self.server.stop()
            self.server = None
        if self.netns:
            try:
                node_netns.remove_recorded(self.state_dir.root)
            except node_netns.NetnsError as exc:
                log.error("lab netns not removed code=%s error=%s", exc.code, exc.message)
            self.netns = ""
        log.info("lab down state_dir=%s", self.state_dir.root)

    def __enter__(self) -> LabCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- use -----------------------------------------------------------------------------

    def client(self) -> Cluster:
        if self.cluster is None:
            raise LabError("E_LAB_NOT_RUNNING", "the lab is not running")
        return self.cluster

    def allocate(self, claims: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """Allocate claims on the lab node with the lab allocator; returns updated claims.

        Raises :class:`~dmn.lab.allocator.AllocationError` when they do not fit."""
        return ClaimService(self.client(), node.NODE_NAME).allocate(claims)
