"""The node agent's runtime wiring: node services, kubelet DRA plugin server and NRI plugin.

:class:`NodeAgent` starts them in the order a restarted node needs (design §8.5): the
slice publisher's triggers (inventory, policy and claim changes republish; the first
publication happened before start, so the kubelet never sees this driver without slices;
their listeners bind before any socket is served), the node services (journal opened,
unfinished operations recovered), then the kubelet sockets (DRA, then registration), then
the NRI plugin, whose first Synchronize reconciles attachments against the runtime's
sandboxes. With a publisher, the health of every published device (judged from the
inventory by :mod:`dmn.agent.slices.device_health`) goes to the kubelet's DRAResourceHealth
stream after each publication pass. :meth:`NodeAgent.stop`
reverses that order and closes the journal last. Paths are injected (the lab and tests
use private ones).
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from dmn import __version__
from dmn.agent.coordinator.adapters import DraAdapter, NriAdapter
from dmn.agent.coordinator.config import NodeConfig
from dmn.agent.coordinator.eswitch_modes import eswitch_pass
from dmn.agent.coordinator.handles import DeviceView
from dmn.agent.coordinator.maintenance import Maintenance, MaintenanceConfig
from dmn.agent.coordinator.node_objects import NodeObjects
from dmn.agent.coordinator.node_services import NodeServices
from dmn.agent.journal.store import JournalError
from dmn.agent.kubelet.handler import DeviceHealth
from dmn.agent.kubelet.server import (
    DEFAULT_PLUGINS_DIR,
    DEFAULT_REGISTRY_DIR,
    KubeletPluginServer,
)
from dmn.agent.node_events import NodeEventReporter
from dmn.agent.nri.plugin import NriPlugin, PluginConfig, PluginThread
from dmn.agent.readiness import Readiness
from dmn.agent.slices import NodeSlicePublisher
from dmn.agent.slices.device_health import device_health
from dmn.api.cluster import Cluster
from dmn.api.cluster.reachability import ApiReachability
from dmn.api.node_capability import DEFAULT_REFRESH_S, CapabilityReport
from dmn.engine.runner import BoundaryHook
from dmn.host.netns import current_boot_id
from dmn.interpreter.opcode_contracts import opcode_contract_digests
from dmn.opcodes.executor_table import default_executors
from dmn.opcodes.registry import default_registry

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AgentSockets:
    registry_dir: str | os.PathLike[str] = DEFAULT_REGISTRY_DIR
    plugins_dir: str | os.PathLike[str] = DEFAULT_PLUGINS_DIR
    nri: PluginConfig | None = None  # None: PluginConfig() defaults (containerd's socket)
    nri_ready_timeout: float = 30.0


@functools.cache
def _runnable_opcode_digests() -> dict[str, str]:
    """Short contract digest of every opcode with both a contract in the registry and an
    executor: fixed for the life of the process (the capability reporter asks each second)."""
    runnable = sorted(set(default_registry().names()) & set(default_executors()))
    return opcode_contract_digests(default_registry(), runnable)


class NodeAgent:
    def __init__(
        self,
        config: NodeConfig,
        cluster: Cluster,
        devices: DeviceView,
        sockets: AgentSockets | None = None,
        publisher: NodeSlicePublisher | None = None,
        health_from: NodeSlicePublisher | None = None,
        maintenance: MaintenanceConfig | None = None,
        boot_id: Callable[[], str] = current_boot_id,
        fault: BoundaryHook | None = None,
    ) -> None:
        """``publisher`` is started and stopped with the agent; device health is judged
        from ``health_from`` (default: ``publisher``), which may be one run by someone else
        (the embedded lab runs its node's publisher itself). ``fault``: the test-only fault
        point ``dmn node`` builds from its environment (:mod:`.fault_points`), else None."""
        self.config = config
        self.fault = fault
        #: seconds between capability reports (``dmn node --capability-refresh``)
        self.capability_refresh = DEFAULT_REFRESH_S
        self.boot_id = boot_id  # injectable: tests restart the agent "after a reboot"
        self.cluster = cluster
        self.devices = devices
        self.sockets = sockets or AgentSockets()
        self.publisher = publisher
        self.health_from = health_from or publisher
        self.services: NodeServices | None = None
        self.dra: DraAdapter | None = None
        self.nri: NriAdapter | None = None
        self.kubelet: KubeletPluginServer | None = None
        self.plugin: PluginThread | None = None
        self.reporter = NodeEventReporter(cluster, config.node_name)
        self.api_reachable = ApiReachability(cluster)
        self._health: dict[str, DeviceHealth] = {}
        self._health_lock = threading.Lock()
        self.maintenance = Maintenance(
            lambda: self.services, maintenance, eswitch=self._eswitch_pass
        )
        #: this node's Pods and the claims, watched: Pods without our claims pass the NRI
        #: hooks with no API call (see :mod:`.node_objects`)
        self.objects = NodeObjects(cluster, config.node_name, config.driver)
        #: set at the first failed journal commit: the agent has stopped mutating (the
        #: store refuses every write) and its owner must exit non-zero so that a restart
        #: runs recovery (``dmn node`` does); :attr:`fatal_error` says why
        self.fatal = threading.Event()
        self.fatal_error: JournalError | None = None
        self._fatal_listeners: list[Callable[[], None]] = []

    def _eswitch_pass(self, services: NodeServices) -> None:
        """Place the PFs of this node's ManageEswitch policies in their modes, and restore
        the recorded modes no policy asks for (:func:`.eswitch_modes.eswitch_pass`), from
        what the publisher last read: no API call here, the node lock is taken inside."""
        publisher = self.publisher
        if publisher is None:
            return
        eswitch_pass(
            services.eswitch,
            publisher.inventory,
            publisher.policies,
            publisher.labels,
            publisher.publication.last,
            publisher.allocated,
            cordoned=publisher.cordoned,
        )

    def on_fatal(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` (once, from the failing thread) when :attr:`fatal` is set."""
        self._fatal_listeners.append(listener)

    def _journal_failed(self, error: JournalError) -> None:
        if self.fatal.is_set():
            return
        self.fatal_error = error
        self.fatal.set()
        log.critical(
            "event=journal-failed code=%s error=%s action=stop-mutating-and-exit",
            error.code,
            error,
        )
        for listener in self._fatal_listeners:
            listener()

    def _open_services(self) -> NodeServices:
        services = NodeServices.open(
            self.config,
            self.cluster,
            self.devices,
            objects=self.objects,
            boot_id=self.boot_id,
            boundary=self.fault,
            ipam_boundary=self.fault,
        )
        services.journal.failure_listeners.append(self._journal_failed)
        services.start()
        return services

    def start(self) -> NodeAgent:
        """Start everything; on a failure what was started is stopped again and it raises."""
        try:
            if self.publisher is not None:  # its listeners bind before the sockets exist
                self.publisher.start()
            self.objects.start()
            self.services = self._open_services()
            self.reporter.start()
            self.services.attachments.events = self.reporter
            self.dra = DraAdapter(
                self.services.preparation, self.reporter, self.services.attachments
            )
            self.nri = NriAdapter(self.services.attachments, self.services.reconcile, self.reporter)
            self.kubelet = KubeletPluginServer(
                self.config.driver,
                self.dra,
                registry_dir=self.sockets.registry_dir,
                plugins_dir=self.sockets.plugins_dir,
            ).start()
            if self.health_from is not None:
                self.health_from.add_listener(self.report_health)
            self.plugin = PluginThread(NriPlugin(self.nri, self.sockets.nri)).start()
            self.maintenance.start()
        except BaseException:
            self.stop()
            raise
        log.info("event=agent-started node=%s", self.config.node_name)
        return self

    def report_health(self) -> None:
        """Judge every published device against the current inventory and hand the list
        to the kubelet plugin's health stream (a publisher listener)."""
        publisher, kubelet = self.health_from, self.kubelet
        if publisher is None or kubelet is None:
            return
        personas = publisher.publication.last
        with self._health_lock:
            devices = device_health(
                personas.personas if personas is not None else (),
                publisher.inventory,
                publisher.node_name,  # the pool (one per node)
                publisher.allocated,
                int(time.time()),
                self._health,
            )
            changed = [d for d in devices if self._health.get(d.device_name) != d]
            self._health = {d.device_name: d for d in devices}
            kubelet.publish_health(devices)
        for d in changed:
            log.info(
                "event=device-health device=%s health=%s message=%s",
                d.device_name,
                d.health.name,
                d.message,
            )

    def readiness(self) -> Readiness:
        """The facts the readiness probe reports (see :mod:`dmn.agent.readiness`)."""
        kubelet = self.kubelet is not None and self.kubelet.registration.registered.is_set()
        nri = self.plugin is not None and self.plugin.ready.is_set()
        journal = False
        if self.services is not None:
            try:
                self.services.journal.schema_version  # noqa: B018 - a read that must answer
                journal = self.services.journal.writable()[0]  # a failed commit: not ready
            except Exception as exc:  # closed or failing store: not writable either
                log.warning("event=journal-unreadable error=%s", exc)
        return Readiness(kubelet, nri, journal)

    def capability_report(self, now: float) -> CapabilityReport:
        """What this agent runs, for its Node's capability annotation
        (:mod:`dmn.agent.capability_report`): every opcode that has both a contract in the
        registry and an executor here, every plugin the claim verifier knows, and whether
        the NRI plugin is registered and synchronized (the gate that holds containers)."""
        services = self.services
        plugins = services.preparation.claims.plugins if services is not None else {}
        nri = self.plugin is not None and self.plugin.ready.is_set()
        return CapabilityReport(
            node=self.config.node_name,
            boot_id=self.boot_id(),
            agent_version=__version__,
            observed_at=now,
            refresh_s=self.capability_refresh,
            nri_registered=nri,
            nri_synchronized=nri,
            opcodes=_runnable_opcode_digests(),
            builtins={name: p.contract_digest for name, p in sorted(plugins.items())},
        )

    def wait_nri_ready(self) -> bool:
        """True once the NRI plugin registered and its first Synchronize completed."""
        return self.plugin is not None and self.plugin.wait_ready(self.sockets.nri_ready_timeout)

    # ---- health conditions (served by dmn.observability.health)

    def journal_writable(self) -> tuple[bool, str]:
        services = self.services
        if services is None:
            return False, "the node services are not running"
        return services.journal.writable()

    def kubelet_registered(self) -> tuple[bool, str]:
        if self.kubelet is None:
            return False, "the kubelet plugin server is not running"
        if not self.kubelet.registration.registered.is_set():
            return False, "the kubelet has not confirmed the plugin registration"
        return True, ""

    def nri_connected(self) -> tuple[bool, str]:
        if self.plugin is None or not self.plugin.ready.is_set():
            return False, "not registered and synchronized with the runtime's NRI"
        return True, ""

    def liveness_conditions(self) -> dict[str, Callable[[], tuple[bool, str]]]:
        """A failed journal commit stops mutation: restarting the agent recovers it."""
        return {"journal-writable": self.journal_writable}

    def readiness_conditions(self) -> dict[str, Callable[[], tuple[bool, str]]]:
        return {
            "journal-writable": self.journal_writable,
            "kubelet-registered": self.kubelet_registered,
            "nri-connected": self.nri_connected,
            "api-reachable": self.api_reachable,
        }

    def restart_services(self, boot_id: Callable[[], str] | None = None) -> NodeServices:
        """Close the journal and open new services on the same state dir (recovering), as
        a restarted agent would; the protocol adapters switch to them. ``boot_id``: the
        boot id source from now on (a test's "reboot")."""
        if boot_id is not None:
            self.boot_id = boot_id
        if self.services is not None:
            self.services.close()
        self.services = self._open_services()
        if self.dra is not None:
            self.dra.preparation = self.services.preparation
        if self.nri is not None:
            self.nri.attachments = self.services.attachments
            self.nri.reconcile = self.services.reconcile
        return self.services

    def stop(self, grace: float = 5.0) -> None:
        """Stop in reverse order; safe after a failed start and more than once."""
        self.maintenance.stop()
        if self.health_from is not None:
            self.health_from.remove_listener(self.report_health)
        if self.publisher is not None:
            self.publisher.stop()
        if self.plugin is not None:
            self.plugin.stop(grace)
            self.plugin = None
        if self.kubelet is not None:
            self.kubelet.stop(grace)
            self.kubelet = None
        if self.services is not None:
            self.services.close()
        self.objects.stop()
        self.reporter.stop()
        log.info("event=agent-stopped node=%s", self.config.node_name)
