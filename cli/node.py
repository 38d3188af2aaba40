"""``dmn node`` (= ``dra-multi-network-node``): the node agent process, in the foreground.

    dmn node [--url URL | --kubeconfig FILE [--context NAME]] [--node-name NAME]
             [--state-dir DIR] [--kubelet-registry-dir DIR] [--kubelet-plugins-dir DIR]
             [--nri-socket PATH] [--sysfs DIR] [--host-netns PATH] [--lab-link NAME]...
             [--ovsdb-remote unix:PATH|tcp:HOST:PORT|ssl:HOST:PORT] [--device-metadata]
             [--health-address ADDR] [--health-port N] [--log-format text|json]
             [--journal-retention-max-age S] [--journal-retention-max-count N]
             [--journal-retention-interval S] [--reconcile-interval S]

Connects through the official client (``--url``, ``--kubeconfig``, else in-cluster config),
reads this node's ``Node`` object (its UID keys the journal's identities), scans the node's
inventory (sysfs, rtnetlink, devlink), plans and writes the node's ResourceSlices from the
cluster's DeviceExposurePolicies, then starts the real :class:`NodeAgent` (journal
recovery, kubelet DRA and registration sockets, NRI plugin; ``NRI_PLUGIN_SOCKET`` is
honoured as the NRI plugin does) and the slice publisher's triggers: an inventory change
(rtnetlink/udev), a DeviceExposurePolicy or ResourceClaim change and a periodic resync
republish (:class:`~dmn.agent.slices.NodeSlicePublisher`). It serves ``/metrics``,
``/livez`` (journal writable) and ``/readyz`` (journal writable, kubelet registered, NRI
connected, API server reachable) on ``--health-address:--health-port``. SIGTERM/SIGINT
stop it in reverse order and exit 0.

Periodically, off every hook path (:mod:`~dmn.agent.coordinator.maintenance`), it retries
failed cleanups with backoff (every ``--reconcile-interval`` seconds) and collects terminal
journal records older than ``--journal-retention-max-age`` seconds or beyond the
``--journal-retention-max-count`` newest (every ``--journal-retention-interval`` seconds).

At the first failed journal commit (no space, I/O error) the agent stops mutating (the
journal refuses every write), reports not ready, stops, and exits 1 with
``dmn node: error[E_JOURNAL_WRITE]: ...`` so that the restarted agent runs recovery.

Bad arguments exit 2 (reported by :mod:`dmn.cli.command_line` as
``dmn node: error[E_USAGE]: ...``) and an unreachable or refusing API server exits 1, each
with one line ``dmn node: error[CODE]: message`` on stderr, never a traceback.

Test-only: ``DMN_TEST_FAULT_POINT`` in the process environment names a boundary at which
the agent SIGKILLs itself once, armed by a trigger file in ``--state-dir``
(:mod:`~dmn.agent.coordinator.fault_points`); unset, nothing of it exists.

Not done here (said plainly): the publication state (generation, declarations, degraded)
is not persisted; a restarted agent publishes above the generation it finds in the API.
"""

from __future__ import annotations

import argparse
import logging
import re
import signal
import socket
import sys
import threading
from pathlib import Path
from types import FrameType

from dmn.agent.capability_report import CapabilityReporter
from dmn.agent.coordinator import NodeConfig, fault_points
from dmn.agent.coordinator.handles import InventoryDevices
from dmn.agent.coordinator.maintenance import MaintenanceConfig
from dmn.agent.coordinator.node_agent import AgentSockets, NodeAgent
from dmn.agent.inventory.scan import ScanConfig, scan
from dmn.agent.journal.store import JournalError, JournalHeldError, Retention
from dmn.agent.kubelet.server import DEFAULT_PLUGINS_DIR, DEFAULT_REGISTRY_DIR, SocketPathError
from dmn.agent.nri.plugin import DEFAULT_SOCKET_PATH, PluginConfig
from dmn.agent.readiness import DEFAULT_INTERVAL, ReadinessReporter
from dmn.agent.slices import InventoryWatch, NodeSlicePublisher
from dmn.agent.slices.publication_state import STATE_FILE
from dmn.api.cluster import ApiFailure, Cluster, NotFound, connect
from dmn.api.cluster import resources as r
from dmn.api.identity import DRIVER
from dmn.api.node_capability import DEFAULT_REFRESH_S, EXPIRY_PERIODS
from dmn.cli.command_line import CommandParser, UsageError, run_command
from dmn.host.inventory_sources import NetlinkRdma, Pyroute2Devlink, Pyroute2Links
from dmn.observability import json_logs
from dmn.observability.health import HealthServer
from dmn.observability.health import add_arguments as add_health_arguments
from dmn.opcodes.device_environment import OVSDB_REMOTE

log = logging.getLogger("dmn.agent")

DEFAULT_STATE_DIR = "/var/lib/dra-multi-network"
PROG = "dmn node"


class NodeStartError(Exception):
    """A reason-coded refusal to start; ``status`` is the exit code (2 input, 1 cluster)."""

    def __init__(self, code: str, message: str, status: int) -> None:
        super().__init__(message)
        self.code, self.message, self.status = code, message, status


def _parser() -> CommandParser:
    p = CommandParser(prog=PROG, description=(__doc__ or "").split("\n")[0])
    access = p.add_mutually_exclusive_group()
    access.add_argument("--url", help="API server URL (the lab, or a cluster without kubeconfig)")
    access.add_argument("--kubeconfig", help="kubeconfig file (default: in-cluster config)")
    p.add_argument("--context", help="kubeconfig context")
    p.add_argument("--token", help="bearer token for --url")
    p.add_argument("--ca-cert", help="CA bundle for --url")
    p.add_argument("--node-name", default=socket.gethostname())
    p.add_argument("--state-dir", type=Path, default=Path(DEFAULT_STATE_DIR))
    p.add_argument("--kubelet-registry-dir", type=Path, default=Path(DEFAULT_REGISTRY_DIR))
    p.add_argument("--kubelet-plugins-dir", type=Path, default=Path(DEFAULT_PLUGINS_DIR))
    p.add_argument("--nri-socket", default=DEFAULT_SOCKET_PATH)
    p.add_argument("--sysfs", type=Path, default=Path("/sys"))
    p.add_argument("--host-netns", default="/proc/1/ns/net", help="the host network namespace")
    p.add_argument(
        "--ovsdb-remote",
        type=ovsdb_remote,
        default=OVSDB_REMOTE,
        help="the node's Open vSwitch database (ovs-cni's ports); default %(default)s",
    )
    p.add_argument(
        "--device-metadata",
        action="store_true",
        help="KEP-5304: write each prepared claim's device metadata file and the CDI spec "
        "that mounts it into its containers (/var/run/cdi must be a CDI spec directory of "
        "the container runtime, else containers with our claims fail to start)",
    )
    p.add_argument(
        "--lab-link",
        action="append",
        default=[],
        metavar="NAME",
        help="a non-PCI link (veth end) to inventory as a NIC; repeatable (labs and tests)",
    )
    p.add_argument(
        "--readiness-interval",
        type=float,
        default=DEFAULT_INTERVAL,
        help="seconds between writes of <state-dir>/readiness.json (dmn node-ready reads it)",
    )
    p.add_argument(
        "--capability-refresh",
        type=float,
        default=DEFAULT_REFRESH_S,
        metavar="SECONDS",
        help="seconds between rewrites of this Node's capability annotation (it expires "
        f"after {EXPIRY_PERIODS} of them; 0 writes none)",
    )
    p.add_argument(
        "--journal-retention-max-age",
        type=float,
        default=Retention().max_age,
        metavar="SECONDS",
        help="terminal journal records (Removed attachments, Released preparations) are "
        "collected this long after a collection first saw them",
    )
    p.add_argument(
        "--journal-retention-max-count",
        type=int,
        default=Retention().max_count,
        metavar="N",
        help="at most this many terminal journal records are kept (the newest)",
    )
    p.add_argument(
        "--journal-retention-interval",
        type=float,
        default=MaintenanceConfig.retention_interval,
        metavar="SECONDS",
        help="seconds between journal retention passes",
    )
    p.add_argument(
        "--reconcile-interval",
        type=float,
        default=MaintenanceConfig.reconcile_interval,
        metavar="SECONDS",
        help="seconds between retries of failed cleanups (each sandbox backs off on its own)",
    )
    p.add_argument("--log-level", default="INFO")
    add_health_arguments(p)
    return p


def check_arguments(args: argparse.Namespace) -> None:
    """Check parsed arguments: :class:`UsageError` (E_USAGE) or :class:`NodeStartError`."""
    if not args.node_name:
        raise UsageError("--node-name: must not be empty")
    if not args.sysfs.is_dir():
        raise UsageError(f"--sysfs {args.sysfs}: not a directory")
    if args.kubeconfig is not None and not Path(args.kubeconfig).is_file():
        raise NodeStartError("E_KUBECONFIG", f"--kubeconfig {args.kubeconfig}: no such file", 2)
    if args.journal_retention_max_age < 0:
        raise UsageError("--journal-retention-max-age: must not be negative")
    if args.journal_retention_max_count < 0:
        raise UsageError("--journal-retention-max-count: must not be negative")
    if args.journal_retention_interval <= 0:
        raise UsageError("--journal-retention-interval: must be positive")
    if args.reconcile_interval <= 0:
        raise UsageError("--reconcile-interval: must be positive")
    level = logging.getLevelName(args.log_level.upper())
    if not isinstance(level, int):
        raise UsageError(f"--log-level {args.log_level}: unknown level")


def open_cluster(args: argparse.Namespace) -> Cluster:
    """The API server connection; a bad kubeconfig is status 2."""
    try:
        api = connect(
            url=args.url,
            kubeconfig=args.kubeconfig,
            context=args.context,
            token=args.token,
            ca_cert=args.ca_cert,
        )
    except Exception as exc:  # kubernetes.config raises ConfigException and plain errors
        raise NodeStartError("E_KUBECONFIG", f"cluster access: {exc}", 2) from exc
    return Cluster(api)


def node_uid(cluster: Cluster, node_name: str) -> str:
    try:
        node = cluster.get(r.NODES, node_name)
    except NotFound as exc:
        raise NodeStartError("E_NODE_NOT_FOUND", f"Node {node_name!r} does not exist", 1) from exc
    except ApiFailure as exc:
        raise NodeStartError("E_API_UNREACHABLE", f"reading Node {node_name!r}: {exc}", 1) from exc
    uid = str((node.get("metadata") or {}).get("uid") or "")
    if not uid:
        raise NodeStartError("E_NODE_NOT_FOUND", f"Node {node_name!r} has no UID", 1)
    return uid


def build_agent(args: argparse.Namespace, cluster: Cluster) -> NodeAgent:
    """Everything :class:`NodeAgent` needs, built as the tests build it (not yet started)."""
    uid = node_uid(cluster, args.node_name)
    config_scan = ScanConfig(
        sysfs_root=args.sysfs,
        node_uid=uid,
        links=Pyroute2Links(),
        devlink=Pyroute2Devlink(),
        lab_links=list(args.lab_link),
        rdma=NetlinkRdma(),
    )
    publisher = NodeSlicePublisher(
        cluster,
        args.node_name,
        lambda: scan(config_scan),
        inventory_watch=InventoryWatch(),
        state_file=Path(args.state_dir) / STATE_FILE,
    )
    try:
        publisher.publish()  # slices exist before the kubelet can ask to prepare
    except ApiFailure as exc:
        raise NodeStartError("E_API_UNREACHABLE", f"publishing slices: {exc}", 1) from exc
    config = NodeConfig(
        node_name=args.node_name,
        node_uid=uid,
        state_dir=args.state_dir,
        host_netns=args.host_netns,
        ovsdb_remote=args.ovsdb_remote,
        plugin_data_dir=args.kubelet_plugins_dir / DRIVER if args.device_metadata else None,
    )
    sockets = AgentSockets(
        registry_dir=args.kubelet_registry_dir,
        plugins_dir=args.kubelet_plugins_dir,
        nri=PluginConfig(socket_path=args.nri_socket),
    )
    devices = InventoryDevices(lambda: publisher.publication.last, lambda: publisher.inventory)
    maintenance = MaintenanceConfig(
        reconcile_interval=args.reconcile_interval,
        retention_interval=args.journal_retention_interval,
        retention=Retention(args.journal_retention_max_age, args.journal_retention_max_count),
    )
    # test-only and inert unless the process environment names a boundary (fault_points)
    fault_point = fault_points.from_environment(Path(args.state_dir))
    return NodeAgent(
        config, cluster, devices, sockets, publisher, maintenance=maintenance, fault=fault_point
    )


_OVSDB_REMOTE = re.compile(r"^(unix:/[^\s]+|(tcp|ssl):[A-Za-z0-9.:\[\]-]+:[0-9]{1,5})$")


def ovsdb_remote(value: str) -> str:
    """An OVSDB connection method as ``ovs-vsctl --db`` takes it: ``unix:`` an absolute socket
    path, or ``tcp:``/``ssl:`` host and port. A node flag — the agent never takes a database
    endpoint from a policy or a workload."""
    if not _OVSDB_REMOTE.match(value):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not unix:/PATH, tcp:HOST:PORT or ssl:HOST:PORT"
        )
    return value


def _fail(error: NodeStartError) -> int:
    json_logs.flush()  # the reason stays the last line
    sys.stderr.write(f"{PROG}: error[{error.code}]: {error.message}\n")
    return error.status


def run(argv: list[str]) -> int:
    return run_command(_parser(), argv, _serve)


def _serve(args: argparse.Namespace) -> int:
    try:
        check_arguments(args)
    except NodeStartError as exc:
        return _fail(exc)
    json_logs.configure(args.log_level, args.log_format)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("event=signal signum=%d", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        cluster = open_cluster(args)
    except NodeStartError as exc:
        return _fail(exc)
    agent: NodeAgent | None = None
    reporter: ReadinessReporter | None = None
    capability: CapabilityReporter | None = None
    health: HealthServer | None = None
    failure: NodeStartError | None = None
    try:
        agent = build_agent(args, cluster)
        agent.on_fatal(stop.set)
        try:
            args.state_dir.mkdir(parents=True, exist_ok=True)
            agent.start()
        except JournalHeldError as exc:
            raise NodeStartError("E_JOURNAL_HELD", str(exc), 1) from exc
        except JournalError as exc:
            raise NodeStartError("E_JOURNAL", f"opening the journal: {exc}", 1) from exc
        except (OSError, SocketPathError) as exc:
            raise NodeStartError("E_IO", f"starting the agent: {exc}", 1) from exc
        reporter = ReadinessReporter(
            args.state_dir, agent.readiness, args.readiness_interval
        ).start()
        if args.capability_refresh > 0:
            agent.capability_refresh = args.capability_refresh
            capability = CapabilityReporter(
                cluster, args.node_name, agent.capability_report, args.capability_refresh
            ).start()
        try:
            health = (
                None
                if args.health_port is None
                else HealthServer(
                    args.health_address,
                    args.health_port,
                    liveness=agent.liveness_conditions(),
                    readiness=agent.readiness_conditions(),
                )
            )
            if health is not None:
                health.start()
        except OSError as exc:
            message = f"serving health on port {args.health_port}: {exc}"
            raise NodeStartError("E_IO", message, 1) from exc
        log.info(
            "event=node-running node=%s state_dir=%s nri_socket=%s",
            args.node_name,
            args.state_dir,
            args.nri_socket,
        )
        stop.wait()
        if agent.fatal.is_set() and agent.fatal_error is not None:
            error = agent.fatal_error
            message = f"{error}; stopped so that the restarted agent runs recovery"
            raise NodeStartError(error.code, message, 1)
    except NodeStartError as exc:
        failure = exc
    finally:
        if capability is not None:
            capability.stop()
        if reporter is not None:
            reporter.stop()
        if health is not None:
            health.stop()
        if agent is not None:
            agent.stop()
        cluster.close()
    return 0 if failure is None else _fail(failure)  # the reason is the last line
