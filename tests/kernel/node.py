"""A real node's effect path for program-level tests: binder → runner → RocksDB journal → kernel.

:class:`Node` owns a state dir (journal + namespace pins) and a stand-in host namespace. It
binds builtin programs with the real binder, runs them through the real :class:`Runner` over
the real :class:`JournalStore` and the real ``linux/*``/``share/*`` executors, and pins each
sandbox under the state dir before anything moves into it (design §8.4). Recovery rebuilds
the executor environment from the pins alone, as a restarted agent would.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dmn.agent.journal.store import JournalStore
from dmn.api.cluster import Cluster, connect
from dmn.api.ipam.client import AllocationClient
from dmn.api.ipam.node_pools import ClusterAddressPools
from dmn.engine.binder import Call, bind_program
from dmn.engine.bound import BoundProgram
from dmn.engine.effect_records import JournalEffectRecords
from dmn.engine.runner import Runner, RunResult
from dmn.host.netns import LinkEnvironment, NamespaceRef, identity_of
from dmn.host.netns_sysfs import RecordedNetnsSysfs
from dmn.host.pins import NamespacePins
from dmn.interpreter.loader import load_builtin_plugins
from dmn.opcodes.address_pools import ClaimOwner
from dmn.opcodes.device_environment import BridgeGrant, DeviceEnvironment, OvsBridgeGrant
from dmn.vocabulary.handles import Handle, Scope
from dmn.vocabulary.terms import ScopeKind
from tests import capabilities
from tests.crash_fork_server import CrashForkServer, crash_fork_server
from tests.kernel.scratch import netns_path
from tests.kernel.world import EXECUTORS

_PLUGINS: dict[str, Any] = {}
NEVER = -1  # a crash child's boundary index that is never reached: it runs to the end
CHART_VALUES = Path(__file__).resolve().parents[2] / "charts/dra-multi-network/values.yaml"


def chart_capabilities() -> tuple[str, ...]:
    """The unprivileged node agent's capabilities: the chart's ``nodeAgent.capabilities``."""
    values = yaml.safe_load(CHART_VALUES.read_text())
    return tuple(values["nodeAgent"]["capabilities"])


def unprivileged_server() -> CrashForkServer:
    """The session's crash fork server whose children hold only the chart's capabilities
    (:func:`chart_capabilities`), as the node agent's container does with
    ``nodeAgent.privileged=false`` (without the runtime's seccomp filter). Checked here from
    the kernel's view of the server process."""
    caps = chart_capabilities()
    server = crash_fork_server(("journal", "kernel"), capabilities=caps)
    held = capabilities.status(server.proc.pid)
    for field in ("CapEff", "CapPrm", "CapBnd"):
        assert capabilities.names(held[field]) == set(caps), (field, held[field], caps)
    assert int(held["CapInh"], 16) == 0 and int(held["CapAmb"], 16) == 0, held
    assert held["NoNewPrivs"] == "1", held
    return server


def bind(plugin: str, hook: str, call: Call) -> BoundProgram:
    if not _PLUGINS:
        _PLUGINS.update(load_builtin_plugins())
    bound = bind_program(_PLUGINS[plugin], hook, call)
    assert isinstance(bound, BoundProgram), [str(d) for d in bound]
    return bound


@dataclass
class Node:
    state_dir: Path
    host: str  # name of the scratch namespace standing in for the host
    bridge_grants: tuple[BridgeGrant, ...] = ()  # the policy's approved bridges (device tests)
    allowed_drivers: tuple[str, ...] = ()  # the policy's hardware.allowedDrivers (PCI tests)
    cdi_root: Path | None = None  # where VFIO grants write their CDI specs (PCI tests)
    ovs_grants: tuple[OvsBridgeGrant, ...] = ()  # the policy's approved OVS bridges (OVS tests)
    ovsdb_remote: str | None = None  # the test's own ovsdb-server socket (OVS tests)
    # recorded sysfs trees standing in for namespaces' sysfs views, by namespace name (IB tests)
    sysfs_views: tuple[tuple[str, Path], ...] = ()
    # run and clean up in this server's child instead of this process: with
    # :func:`unprivileged_server`, the executors hold only the chart's capabilities
    server: CrashForkServer | None = None
    # the lab API server the IPPool port talks to, and the verified claim a run is for
    # (recovery and cleanup get the port only: they read the owner from the before-image)
    ipam_url: str | None = None
    claim_owner: ClaimOwner | None = None

    @property
    def pins(self) -> NamespacePins:
        return NamespacePins(self.state_dir, host_netns=netns_path(self.host))

    def pin(self, attachment: str, sandbox_ns: str) -> NamespaceRef:
        return self.pins.pin(attachment, netns_path(sandbox_ns))

    def env(
        self, sandbox: NamespaceRef | None = None, journal: JournalStore | None = None
    ) -> LinkEnvironment:
        """The executors' environment; with ``journal`` (the runner's own store) it carries
        the journal's read-only effect records, as the agent's does."""
        env = self.pins.link_environment()
        env.sandbox = sandbox
        if self.ipam_url is not None:
            ipam_env = DeviceEnvironment.extend(env, **ipam_facts(self.ipam_url))
            ipam_env.claim_owner = self.claim_owner if sandbox is not None else None
            env.close()
            return ipam_env
        if (
            not self.bridge_grants
            and not self.allowed_drivers
            and self.cdi_root is None
            and not self.ovs_grants
            and not self.sysfs_views
        ):
            return env
        grants = {g.alias: g for g in self.bridge_grants}
        facts = self.device_facts()
        if journal is not None:
            facts["effect_records"] = JournalEffectRecords(journal)
        device_env = DeviceEnvironment.extend(env, bridge_grants=grants, **facts)
        env.close()
        return device_env

    def device_facts(self) -> dict[str, Any]:
        facts: dict[str, Any] = {"allowed_drivers": frozenset(self.allowed_drivers)}
        if self.cdi_root is not None:
            facts["cdi_root"] = self.cdi_root
        if self.ovs_grants:
            facts["ovs_bridge_grants"] = {g.alias: g for g in self.ovs_grants}
        if self.ovsdb_remote is not None:
            facts["ovsdb_remote"] = self.ovsdb_remote
        if self.sysfs_views:
            facts["netns_sysfs"] = RecordedNetnsSysfs.of(
                {identity_of(netns_path(ns)): tree for ns, tree in self.sysfs_views}
            )
        return facts

    def views_json(self) -> list[list[Any]]:
        """The sysfs views as the crash child receives them: [dev, inode, tree]."""
        out = []
        for ns, tree in self.sysfs_views:
            identity = identity_of(netns_path(ns))
            out.append([identity.dev, identity.inode, str(tree)])
        return out

    @contextmanager
    def runner(self, boundary: Callable[[str], None] | None = None) -> Iterator[Runner]:
        journal = JournalStore.open(self.state_dir)
        try:
            yield Runner(
                journal,
                EXECUTORS,
                boundary=boundary,
                env_factory=lambda op: self.env(journal=journal),
            )
        finally:
            journal.close()

    def run(self, op: str, program: BoundProgram, sandbox: NamespaceRef | None = None) -> RunResult:
        """Run ``op`` to completion. With a :attr:`server`, its child runs it; the result is
        then this process's replay of the journal's completed record (a run the child did
        not complete fails here instead of being retried with this process's privileges)."""
        if self.server is not None:
            self.killed_at(self.server, NEVER, "run", op, program, sandbox)
            self._assert_recorded(op, "Completed")
        with self.runner() as r:
            env = self.env(sandbox, r.journal)  # type: ignore[arg-type]  # a JournalStore
            try:
                result = r.run(op, f"scope/{op}", program, env=env)
            finally:
                env.close()
        assert result.ok, (result.state, result.failure)
        assert self.server is None or result.replayed, result
        return result

    def _assert_recorded(self, op: str, state: str) -> None:
        journal = JournalStore.open(self.state_dir)
        try:
            record = journal.load_operation(op)
        finally:
            journal.close()
        assert record is not None and record.state.value == state, (op, record)

    def survey(
        self,
        op: str,
        program: BoundProgram,
        sandbox: NamespaceRef | None = None,
        scope: str | None = None,
    ) -> dict[str, list[str]]:
        """Run then clean up ``op`` uninterrupted in this process; return the runner's
        boundary names of each phase (``run``, ``cleanup``), in order: what a crash matrix
        picks its kill points from (:mod:`tests.crash_points`)."""
        names: dict[str, list[str]] = {"run": [], "cleanup": []}
        phase = ["run"]
        with self.runner(boundary=lambda name: names[phase[0]].append(name)) as r:
            env = self.env(sandbox, r.journal)  # type: ignore[arg-type]  # a JournalStore
            try:
                result = r.run(op, scope or f"scope/{op}", program, env=env)
            finally:
                env.close()
            assert result.ok, (result.state, result.failure)
            phase[0] = "cleanup"
            assert r.cleanup(op).state.value == "Undone"
        return names

    def cleanup(self, op: str) -> RunResult:
        """Clean ``op`` up; with a :attr:`server`, in its child (then only read back here)."""
        if self.server is not None:
            self.killed_at(self.server, NEVER, "cleanup", op)
            self._assert_recorded(op, "Undone")
        with self.runner() as r:
            result = r.cleanup(op)
        assert result.state.value == "Undone", (result.state, result.failure)
        return result

    def recover(self) -> list[RunResult]:
        with self.runner() as r:
            return r.recover()

    def release_pins(self) -> None:
        pins = self.pins
        for ref in pins.list():
            pins.release(Path(ref.path).name, cleanup_verified=True)
        pins.close()

    def killed_at(
        self,
        server: CrashForkServer,
        index: int,
        action: str,
        op: str,
        program: BoundProgram | None = None,
        sandbox: NamespaceRef | None = None,
        scope: str | None = None,
    ) -> list[str]:
        """Run or clean up ``op`` in a forked child that SIGKILLs itself at boundary ``index``
        (in ``scope``, default ``scope/<op>``: a caller that finds its operations by scope,
        like the agent's eswitch service, names its own).

        Returns the boundary names the child passed, the last being where it died; an empty
        list means the child finished before reaching that boundary.
        """
        out = self.state_dir.parent / "crash-boundaries.txt"
        reply = server.request(
            {
                "child": "kernel",
                "state_dir": str(self.state_dir),
                "host": netns_path(self.host),
                "sandbox": sandbox.to_json() if sandbox else None,
                "action": action,
                "op": op,
                "scope": scope or f"scope/{op}",
                "program": program.to_json() if program else None,
                "crash_at": index,
                "out": str(out),
                "bridge_grants": [g.to_json() for g in self.bridge_grants],
                "allowed_drivers": list(self.allowed_drivers),
                "cdi_root": str(self.cdi_root) if self.cdi_root else None,
                "ovs_grants": [g.to_json() for g in self.ovs_grants],
                "ovsdb_remote": self.ovsdb_remote,
                "sysfs_views": self.views_json(),
                "ipam_url": self.ipam_url,
                "claim_owner": self.claim_owner.to_json() if self.claim_owner else None,
            }
        )
        names = out.read_text().split() if out.exists() else []
        if "signal" not in reply:
            assert reply["exit"] == 0, f"crash child failed: {reply}"
            return []
        return names


def ipam_facts(url: str) -> dict[str, Any]:
    """The IPPool port over the API server at ``url`` (its connection lives as long as the
    process: a test's or a crash child's)."""
    return {"address_pools": ClusterAddressPools(AllocationClient(Cluster(connect(url=url))))}


def sandbox_scope(ref: NamespaceRef) -> Scope:
    return Scope(ScopeKind.SANDBOX, ref.identity)


def call(
    config: Mapping[str, Any],
    op: str,
    *,
    allocation: Mapping[str, tuple[Handle, ...]] | None = None,
    prepared: Mapping[str, tuple[Handle, ...]] | None = None,
    inputs: Mapping[str, tuple[Handle, ...]] | None = None,
    sandbox: NamespaceRef | None = None,
) -> Call:
    return Call(
        config=dict(config),
        operation_id=op,
        allocation=dict(allocation or {}),
        prepared=dict(prepared or {}),
        inputs=dict(inputs or {}),
        sandbox=sandbox_scope(sandbox) if sandbox else None,
    )
