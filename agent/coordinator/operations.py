"""How the node services run effect programs: bind, run journaled, undo, fence, recover.

Why one place: preparation, sandbox attachment and reconciliation all run programs the same
way — a fresh device environment (the namespace pins plus the node's CDI directory and OVSDB
endpoint, the drivers and bridges the device's policy allows) for every run, every started
operation recorded so that a later failure undoes it too, a run that is not ok turned into a
:class:`Refusal` with the runner's reason code. :class:`NodeOperations` receives the
:class:`Runner` (journal + executors) and the pins; it builds neither.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from dmn.agent.coordinator.multus_objects import ClusterMultusObjects
from dmn.agent.coordinator.step_grants import StepGrants
from dmn.agent.coordinator.verify import Refusal
from dmn.engine.binder import Call, bind_program
from dmn.engine.bound import BoundProgram
from dmn.engine.mutation_lock import MutationLockTimeout
from dmn.engine.runner import BoundaryHook, Runner, RunResult
from dmn.host.pins import NamespacePins
from dmn.interpreter.loader import Plugin
from dmn.opcodes.address_pools import AddressPools, ClaimOwner
from dmn.opcodes.device_environment import CDI_ROOT, OVSDB_REMOTE, DeviceEnvironment
from dmn.opcodes.effect_records import EffectRecords
from dmn.opcodes.multus_objects import ShadowBinding

log = logging.getLogger("dmn.agent.coordinator.coordinator")


@dataclass(frozen=True, slots=True)
class UndoOutcome:
    """What :meth:`NodeOperations.undo_all` did: ``complete`` when every operation is Undone;
    ``boot_volatile`` when, moreover, every one of them changed only state a machine crash
    resets (links in the running kernel) — a record that only says "removed" may then ride
    with the next synced commit instead of being synced on its own."""

    complete: bool
    boot_volatile: bool


def short_digest(value: str) -> str:
    """16 hex digits of SHA-256: a stable, name-safe fragment of an operation id."""
    return hashlib.sha256(value.encode()).hexdigest()[:16]


def device_environment(
    pins: NamespacePins,
    cdi_root: Path,
    attachment: str | None = None,
    allowed_drivers: Iterable[str] = (),
    *,
    grants: StepGrants | None = None,
    ovsdb_remote: str = OVSDB_REMOTE,
    records: EffectRecords | None = None,
    address_pools: AddressPools | None = None,
    claim_owner: ClaimOwner | None = None,
    multus: ClusterMultusObjects | None = None,
    multus_bindings: Sequence[ShadowBinding] = (),
) -> DeviceEnvironment:
    """The executors' environment for one run: the pins' namespaces (this attachment's
    sandbox), the node's CDI directory and OVSDB endpoint (node facts: flags, never config),
    what the device's policy allows — its drivers (``hardware.allowedDrivers``) and the
    bridges of the step (``allowedHostBridges``/``allowedOvsBridges``) — the journal's
    read-only effect records (shared-reference executors count from them), the IPPool
    allocation port over the agent's cluster connection, the ResourceClaim the agent
    verified for this run (who holds the addresses it allocates) and the Multus API port
    holding the shadow bindings the agent verified for this run (design §6.8). Cleanup and
    recovery get no drivers, no bridges, no claim and no binding: they only restore what the
    journal recorded."""
    base = pins.link_environment(attachment)
    grants = grants or StepGrants()
    try:
        return DeviceEnvironment.extend(
            base,
            bridge_grants=grants.bridges,
            allowed_drivers=frozenset(allowed_drivers),
            cdi_root=cdi_root,
            ovs_bridge_grants=dict(grants.ovs_bridges),
            ovsdb_remote=ovsdb_remote,
            effect_records=records,
            address_pools=address_pools,
            claim_owner=claim_owner,
            multus=multus.bound(multus_bindings) if multus is not None else None,
        )
    finally:
        base.close()


class NodeOperations:
    def __init__(
        self,
        runner: Runner,
        pins: NamespacePins,
        cdi_root: Path = CDI_ROOT,
        boundary: BoundaryHook | None = None,
        ovsdb_remote: str = OVSDB_REMOTE,
        records: EffectRecords | None = None,
        address_pools: AddressPools | None = None,
        multus: ClusterMultusObjects | None = None,
    ) -> None:
        self.runner = runner
        self.address_pools = address_pools
        self.multus = multus
        self.pins = pins
        self.cdi_root = cdi_root
        self.ovsdb_remote = ovsdb_remote
        self._boundary = boundary
        self.records = records

    def environment(
        self,
        attachment: str | None = None,
        allowed_drivers: Iterable[str] = (),
        grants: StepGrants | None = None,
        claim_owner: ClaimOwner | None = None,
        multus_bindings: Sequence[ShadowBinding] = (),
    ) -> DeviceEnvironment:
        return device_environment(
            self.pins,
            self.cdi_root,
            attachment,
            allowed_drivers,
            grants=grants,
            ovsdb_remote=self.ovsdb_remote,
            records=self.records,
            address_pools=self.address_pools,
            claim_owner=claim_owner,
            multus=self.multus,
            multus_bindings=multus_bindings,
        )

    def boundary(self, name: str) -> None:
        """A coordinator commit boundary (``coordinator:<name>``), right after the commit it
        names: where the crash tests kill the agent (the same hook as the runner's)."""
        if self._boundary is not None:
            self._boundary(f"coordinator:{name}")

    def bind(self, plugin: Plugin, hook: str, call: Call) -> BoundProgram:
        bound = bind_program(plugin, hook, call)
        if not isinstance(bound, BoundProgram):
            first = bound[0]
            raise Refusal(str(first.code.value), f"{plugin.name} {hook}: {first.message}")
        return bound

    def run_or_refuse(
        self,
        op: str,
        scope: str,
        program: BoundProgram,
        digests: Mapping[str, str],
        done: list[str],
        *,
        failed: tuple[str, str],
        attachment: str | None = None,
        sync_end: bool = True,
        allowed_drivers: Iterable[str] = (),
        grants: StepGrants | None = None,
        claim_owner: ClaimOwner | None = None,
        multus_bindings: Sequence[ShadowBinding] = (),
    ) -> RunResult:
        """Run one bound program in a fresh device environment and record ``op`` in ``done``
        (so a later failure undoes it too); a result that is not ok becomes a Refusal with
        the runner's code, else ``failed[0]``, prefixed by ``failed[1]``. ``sync_end=False``:
        the caller's next synced commit makes the end record durable (see the runner)."""
        env = self.environment(attachment, allowed_drivers, grants, claim_owner, multus_bindings)
        try:
            result = self.runner.run(
                op, scope, program, digests=digests, env=env, sync_end=sync_end
            )
        except MutationLockTimeout as exc:  # nothing of it ran: as if refused
            raise Refusal(exc.code, f"{failed[1]}: {exc}", retryable=True) from exc
        finally:
            env.close()
        done.append(op)
        if not result.ok:
            failure = result.failure
            raise Refusal(
                failure.code if failure and failure.code else failed[0],
                f"{failed[1]}: {failure.message if failure else result.state}",
            )
        return result

    def undo(self, operations: Iterable[str], *, sync_end: bool = True) -> bool:
        """Cleanup operations in the given order; True when every one is Undone.
        ``sync_end=False``: the caller's next synced commit makes the last Undone durable."""
        return self.undo_all(operations, sync_end=sync_end).complete

    def undo_all(self, operations: Iterable[str], *, sync_end: bool = True) -> UndoOutcome:
        """:meth:`undo`, also telling whether every operation undone was boot-volatile."""
        ok, volatile = True, True
        for op in operations:
            try:
                res = self.runner.cleanup(op, sync_end=sync_end)
            except MutationLockTimeout as exc:  # nothing of it ran; retried like a failure
                ok = False
                log.error("event=cleanup-busy operation=%s error=%s", op, exc)
                continue
            volatile = volatile and res.boot_volatile
            if res.state.value != "Undone":
                ok = False
                log.error("event=cleanup-incomplete operation=%s state=%s", op, res.state)
        return UndoOutcome(ok, ok and volatile)

    def holding(self, operations: Iterable[str]) -> list[str]:
        """The recorded operations among ``operations`` that still hold what they touched:
        Quarantined (until an operator resolves them) or not finished. A preparation or
        attachment with any of them keeps its reservations, shares and pin (design §7.2)
        — also when this call refused before running anything (a retry of a preparation
        whose operation was quarantined earlier, or by another incarnation)."""
        held = []
        for op in operations:
            rec = self.runner.journal.load_operation(op)
            if rec is not None and rec.state.value not in ("Undone", "Completed"):
                held.append(op)
        return held

    def fence(self, scope: str, reason: str) -> None:
        """No run of ``scope`` can finish after this (the runner's durable fence)."""
        self.runner.fence(scope, reason)

    def recover(self) -> list[RunResult]:
        """Settle every operation a crash left unfinished (see :meth:`Runner.recover`)."""
        return self.runner.recover()
