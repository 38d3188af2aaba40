"""``dmn controller`` (= ``dra-multi-network-controller``): the control-plane process.

Connects through the official client (``--url`` for the lab or any API server,
``--kubeconfig``, or in-cluster config), waits for leadership of a
``coordination.k8s.io`` Lease, then runs the reconcilers; with ``--webhook-cert`` and
``--webhook-key`` it also serves the admission webhook (on every replica — admission
must not depend on who leads). Every replica serves ``/metrics``, ``/livez`` (reconcile
workers alive once started) and ``/readyz`` (API server reachable) on
``--health-address:--health-port``. SIGTERM releases the Lease and exits 0.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import threading
from types import FrameType

from dmn.api.cluster import Cluster, connect
from dmn.api.cluster.reachability import ApiReachability
from dmn.cli.command_line import CommandParser, run_command
from dmn.controller.leader import LeaderElector
from dmn.controller.manager import Controller
from dmn.controller.node_capability import DEFAULT_GRACE_S, AgentPods
from dmn.observability import json_logs
from dmn.observability.health import HealthServer
from dmn.observability.health import add_arguments as add_health_arguments
from dmn.opcodes.registry import default_registry

log = logging.getLogger("dmn.controller")


def _parser() -> CommandParser:
    p = CommandParser(prog="dmn controller", description=__doc__.split("\n")[0])
    p.add_argument("--url", help="API server URL (the lab, or a cluster without kubeconfig)")
    p.add_argument("--kubeconfig", help="kubeconfig file")
    p.add_argument("--context", help="kubeconfig context")
    p.add_argument("--token", help="bearer token for --url")
    p.add_argument("--ca-cert", help="CA bundle for --url")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--resync", type=float, default=30.0, help="seconds between full resyncs")
    p.add_argument("--lease-name", default="dra-multi-network-controller")
    p.add_argument(
        "--lease-namespace", default=os.environ.get("POD_NAMESPACE", "dra-multi-network")
    )
    p.add_argument("--identity", default=os.environ.get("POD_NAME") or socket.gethostname())
    p.add_argument("--no-leader-election", action="store_true")
    p.add_argument("--webhook-cert", help="TLS certificate file for the admission webhook")
    p.add_argument("--webhook-key", help="TLS key file for the admission webhook")
    p.add_argument("--webhook-port", type=int, default=9443)
    p.add_argument("--webhook-host", default="0.0.0.0")
    p.add_argument(
        "--controller-user",
        action="append",
        default=[],
        help="identity allowed to write generated DeviceClasses and revisions (repeatable)",
    )
    p.add_argument(
        "--agent-namespace",
        help="namespace of the node agents' Pods (with --agent-selector: a Node is eligible "
        "for Pods of ours only while its agent's Pod is Ready)",
    )
    p.add_argument("--agent-selector", help="label selector of the node agents' Pods")
    p.add_argument(
        "--capability-grace",
        type=float,
        default=DEFAULT_GRACE_S,
        metavar="SECONDS",
        help="how long a node agent's Pod may be not Ready before its Node loses its "
        "capability labels",
    )
    p.add_argument("--log-level", default="INFO")
    add_health_arguments(p)
    return p


def run(argv: list[str]) -> int:
    return run_command(_parser(), argv, _serve)


def _serve(args: argparse.Namespace) -> int:
    json_logs.configure(args.log_level, args.log_format)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("signal received signum=%d; stopping", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    api = connect(
        url=args.url,
        kubeconfig=args.kubeconfig,
        context=args.context,
        token=args.token,
        ca_cert=args.ca_cert,
    )
    cluster = Cluster(api)
    registry = default_registry()
    webhook = None
    if args.webhook_cert and args.webhook_key:
        from dmn.controller.webhook.server import WebhookServer

        webhook = WebhookServer(
            cluster,
            registry,
            cert_file=args.webhook_cert,
            key_file=args.webhook_key,
            host=args.webhook_host,
            port=args.webhook_port,
            controller_users=frozenset(args.controller_user),
        )
        webhook.start()
    agents = (
        AgentPods(args.agent_namespace, args.agent_selector)
        if args.agent_namespace and args.agent_selector
        else None
    )
    controller = Controller(
        cluster,
        registry,
        workers=args.workers,
        resync=args.resync,
        agent_pods=agents,
        capability_grace=args.capability_grace,
    )
    # every replica serves probes and metrics; readiness is "the API server answers"
    # (a replica waiting for the Lease is ready to take over)
    health = None
    if args.health_port is not None:
        health = HealthServer(
            args.health_address,
            args.health_port,
            liveness={"workers": controller.workers_alive},
            readiness={"api-reachable": ApiReachability(cluster)},
        ).start()
    try:
        if args.no_leader_election:
            controller.start()
            stop.wait()
        else:
            elector = LeaderElector(
                cluster,
                name=args.lease_name,
                namespace=args.lease_namespace,
                identity=args.identity,
            )
            lost = threading.Event()

            def on_lost() -> None:
                log.error("leadership lost; stopping reconcilers")
                lost.set()
                stop.set()

            elector.run(stop, controller.start, on_lost)
            elector.release()
            if lost.is_set():
                controller.stop()
                return 1
    finally:
        controller.stop()
        if health is not None:
            health.stop()
        if webhook is not None:
            webhook.stop()
        cluster.close()
    return 0
