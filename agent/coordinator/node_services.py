"""The composition root of the node services: one journal, pins, runner, three services.

:meth:`NodeServices.open` is the only place that builds the collaborators — the journal
(single writer), the namespace pins, the :class:`Runner` over the executors, the claim
verifier and the one node mutation lock (shared by the runner and every service: see
:mod:`.node_lock` for which keys each call owns) — and passes them to the preparation
service, the sandbox attachment service and the reconcile loop. The kubelet and NRI adapters
call the services; :class:`~dmn.agent.coordinator.node_agent.NodeAgent`, the lab and the
tests open one :class:`NodeServices` per agent incarnation. Executors, plugins, the boot id
source and a journal boundary hook are injectable (tests use them; the agent takes the
defaults).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from dmn.agent.coordinator.claim_verifier import ClaimVerifier
from dmn.agent.coordinator.config import NodeConfig
from dmn.agent.coordinator.device_metadata import DeviceMetadataFiles, MetadataLayout
from dmn.agent.coordinator.eswitch_modes import EswitchModes
from dmn.agent.coordinator.fault_points import PoolBoundaries
from dmn.agent.coordinator.handles import DeviceView
from dmn.agent.coordinator.multus_gate import MultusGate
from dmn.agent.coordinator.multus_objects import ClusterMultusObjects
from dmn.agent.coordinator.multus_plan import MultusPlanner
from dmn.agent.coordinator.node_lock import NodeLock
from dmn.agent.coordinator.node_objects import NodeObjects
from dmn.agent.coordinator.operations import NodeOperations, device_environment
from dmn.agent.coordinator.preparation import PreparationService
from dmn.agent.coordinator.reconcile import ReconcileLoop
from dmn.agent.coordinator.sandbox_attachment import SandboxAttachmentService
from dmn.agent.journal.store import JournalStore, Retention
from dmn.api.cluster import Cluster
from dmn.api.ipam.client import AllocationClient
from dmn.api.ipam.node_pools import ClusterAddressPools
from dmn.engine.effect_records import JournalEffectRecords
from dmn.engine.mutation_lock import MutationLockTimeout, NodeMutationLock
from dmn.engine.runner import BoundaryHook, Runner
from dmn.host.netns import current_boot_id
from dmn.host.pins import NamespacePins
from dmn.interpreter.loader import Plugin, load_builtin_plugins
from dmn.opcodes.address_pools import AddressPools
from dmn.opcodes.executor import Executor
from dmn.opcodes.executor_table import default_executors

log = logging.getLogger(__name__)


@dataclass
class NodeServices:
    config: NodeConfig
    devices: DeviceView
    journal: JournalStore
    pins: NamespacePins
    preparation: PreparationService
    attachments: SandboxAttachmentService
    reconcile: ReconcileLoop
    lock: NodeLock
    eswitch: EswitchModes

    @classmethod
    def open(
        cls,
        config: NodeConfig,
        cluster: Cluster,
        devices: DeviceView,
        *,
        executors: Mapping[str, Executor] | None = None,
        plugins: Mapping[str, Plugin] | None = None,
        boot_id: Callable[[], str] = current_boot_id,
        boundary: BoundaryHook | None = None,
        objects: NodeObjects | None = None,
        ipam_boundary: BoundaryHook | None = None,
    ) -> NodeServices:
        """Open the journal (raises ``JournalError``) and wire the services over it.
        ``ipam_boundary`` also sees the IPPool port's boundaries (:class:`.PoolBoundaries`;
        the agent's test-only fault point, :mod:`.fault_points`)."""
        known = dict(plugins) if plugins is not None else load_builtin_plugins()
        # warm: each pinned sandbox's fd and netlink sockets stay open until its pin is
        # released (per thread: calls of different Pods run at once)
        pins = NamespacePins(config.state_dir, host_netns=config.host_netns, warm=True)
        journal = JournalStore.open(config.state_dir)
        records = JournalEffectRecords(journal)  # the runner's own journal: see its contract
        mutation = NodeMutationLock()
        # ip/pool-addresses allocates, finds and releases through the agent's own connection
        pools: AddressPools = ClusterAddressPools(AllocationClient(cluster))
        if ipam_boundary is not None:
            pools = PoolBoundaries(pools, ipam_boundary)
        # multus/* reach the API server through the agent's own connection too
        multus = ClusterMultusObjects(cluster)
        runner = Runner(
            journal,
            executors if executors is not None else default_executors(),
            env_factory=lambda op: device_environment(
                pins,
                config.cdi_root,
                ovsdb_remote=config.ovsdb_remote,
                records=records,
                address_pools=pools,
                multus=multus,
            ),
            boundary=boundary,
            lock=mutation,
        )
        operations = NodeOperations(
            runner,
            pins,
            config.cdi_root,
            boundary,
            config.ovsdb_remote,
            records=records,
            address_pools=pools,
            multus=multus,
        )
        claims = ClaimVerifier(config, cluster, devices, known, objects)
        lock = NodeLock(mutation, journal)
        attachments = SandboxAttachmentService(
            config, cluster, journal, pins, operations, claims, boot_id, lock, objects
        )
        preparation = PreparationService(config, journal, pins, operations, claims, devices, lock)
        preparation.multus = MultusPlanner(cluster, config, devices)
        attachments.multus = MultusGate(cluster, journal, objects)
        if config.plugin_data_dir is not None:
            layout = MetadataLayout(config.driver, config.plugin_data_dir, config.cdi_root)
            preparation.metadata = attachments.metadata = DeviceMetadataFiles(layout)
        return cls(
            config=config,
            devices=devices,
            journal=journal,
            pins=pins,
            preparation=preparation,
            attachments=attachments,
            reconcile=ReconcileLoop(config, journal, operations, attachments, boot_id, lock),
            lock=lock,
            eswitch=EswitchModes(journal, operations, lock),
        )

    def start(self) -> None:
        """Recover what a crash left unfinished; call before serving anything."""
        self.reconcile.recover()

    def collect_terminal(self, retention: Retention) -> int:
        """Journal retention (one commit, a node-wide pass: a terminal preparation's key
        is reused if its claim is prepared again, which must not race the delete, and the
        decision reads every record); called periodically by :mod:`.maintenance`, never on
        a hook path."""
        with self.lock.exclusive("retention"):
            return self.journal.collect_terminal(retention, time.time())

    def close(self) -> None:
        """Close the journal and the warm namespaces once no operation is in flight (a
        node-wide pass: e.g. a hook thread that outlived its deadline finishes first; the
        journal is never closed under a commit). Waits as long as that takes."""
        self.attachments.status.close()  # pending status writes first (no lock needed)
        while True:
            try:
                with self.lock.lock.exclusive("close"):
                    self.journal.close()
                    if self.pins.warm is not None:
                        self.pins.warm.close()
                    return
            except MutationLockTimeout as exc:
                log.warning("event=close-waiting holder=%s", exc.holder)
