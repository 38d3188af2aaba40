"""Node-level eswitch mode management: DeviceExposurePolicy ``action: ManageEswitch``.

Why here and not in a plugin: an eswitch transition destroys and recreates the PF's
representors and resets its VFs' datapath, so it is node-level preparation of a PF under a
drained reset domain, never a per-claim or per-sandbox step (design §6.7; the opcode is
illegal in ``connect`` and no builtin program emits it). The switchdev profiles — sriov-cni
``representor: true`` feeding accelerated-bridge-cni (and its ``-uplink`` profile) or ovs-cni —
need the PF in switchdev before their personas exist (no representor, no persona).

Contract:

* :func:`eswitch_targets` (pure) turns the node's ManageEswitch policies and inventory into
  targets: exactly one PF selected by PCI address, not protected, not an RDMA HCA, the opcode
  explicitly permitted; anything else is a :class:`Finding`, never a guess.
* :meth:`EswitchModes.reconcile` is a node-wide pass (the node lock exclusively: its drain
  check reads every reservation and share, and a transition resets a whole reset domain) when
  it may write; a pass that can only report (all settled, or the node not cordoned) reads
  under the shared lock. It first restores what no policy asks for anymore (cleanup of the
  recorded transition: the runner's undo writes back the mode the journal captured), then
  places every target in its mode — each only while the PF's whole SR-IOV family is drained:
  the Node cordoned, no reservation, share or API allocation of the PF or any of its VFs
  (``E_RESET_DOMAIN_BUSY``, nothing written). The executor re-checks the kernel (a VF port's
  netdev up is ``E_RESET_DOMAIN_BUSY`` too) right before writing. A transition is one
  journaled operation (``eswitch-<digest>`` in scope ``eswitch/<inventoryID>``) run by the
  same runner as every program: recovery after a crash observes the mode, never repeats
  blindly.
* Ownership is the journal's: only a mode this node recorded changing is ever restored.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from dmn.agent.coordinator.node_lock import NodeLock
from dmn.agent.coordinator.operations import NodeOperations, short_digest
from dmn.agent.coordinator.verify import Refusal
from dmn.agent.inventory.facts import Inventory, ItemKind
from dmn.agent.journal.store import JournalStore
from dmn.agent.personas.build import node_selector_matches
from dmn.agent.personas.model import Finding, FindingCode, PersonaSet
from dmn.api.policy import DeviceExposurePolicy
from dmn.engine.bound import BoundEffect, BoundProgram
from dmn.engine.runner import RunRefused
from dmn.host.devlink import undrained
from dmn.opcodes.devlink.specs import ESWITCH_CONFIGURE
from dmn.opcodes.executor import ExecutorError
from dmn.vocabulary.handles import Handle, Provenance, Scope
from dmn.vocabulary.terms import Access, HandleType, ScopeKind

log = logging.getLogger("dmn.agent.coordinator.eswitch")

SCOPE_PREFIX = "eswitch/"
_ACTION = "ManageEswitch"
_DONE = ("Completed",)


@dataclass(frozen=True)
class EswitchTarget:
    """One PF a policy wants in ``mode``; ``devlink`` is its devlink instance
    (``pci/<address>`` on a node), ``family`` the inventory IDs of the PF and its VFs."""

    policy: str
    inventory_id: str
    devlink: str
    mode: str
    allowed_modes: frozenset[str]
    family: frozenset[str]

    @property
    def scope(self) -> str:
        return f"{SCOPE_PREFIX}{self.inventory_id}"

    @property
    def operation_id(self) -> str:
        return f"eswitch-{short_digest(f'{self.inventory_id}/{self.mode}')}"


@dataclass(frozen=True)
class EswitchOutcome:
    """What one reconcile did for a PF: ``Completed`` (in mode), ``Restored``, ``Busy``
    (not drained), ``Refused`` (a code), ``Held`` (a recorded transition not settled)."""

    inventory_id: str
    state: str
    code: str = ""
    message: str = ""


def eswitch_targets(
    inventory: Inventory,
    policies: Sequence[DeviceExposurePolicy],
    node_labels: dict[str, str],
) -> tuple[list[EswitchTarget], list[Finding]]:
    """The node's eswitch targets from its ManageEswitch policies (pure)."""
    targets: list[EswitchTarget] = []
    findings: list[Finding] = []
    for pol in policies:
        spec = pol.spec
        if spec.action != _ACTION or spec.management is None:
            continue
        if not node_selector_matches(spec.node_selector, node_labels):
            continue
        name = str(pol.metadata.get("name", ""))

        def reject(message: str, item: str = "", policy: str = name) -> None:
            findings.append(Finding(FindingCode.E_POLICY_INVALID, message, policy, item))

        addresses = spec.selector.pci_addresses or []
        if len(addresses) != 1:
            reject("ManageEswitch selects exactly one PF by pciAddresses")
            continue
        management = spec.management
        if ESWITCH_CONFIGURE.name not in management.effect_permissions:
            reject(f"effectPermissions does not grant {ESWITCH_CONFIGURE.name}")
            continue
        item = inventory.by_pci(addresses[0])
        if item is None or item.kind is not ItemKind.PF:
            reject(f"{addresses[0]} is not an SR-IOV PF on this node")
            continue
        if item.protected:
            reject(f"{addresses[0]} is protected: its eswitch is never managed", item.inventory_id)
            continue
        if item.rdma:
            reject(f"{addresses[0]} is an RDMA HCA: outside ethernet-pf-vfs-v1", item.inventory_id)
            continue
        now = item.eswitch_mode
        if not isinstance(now, str) or now not in management.allowed_modes:
            # the mode it is in now is the one a restore writes back: it must be allowed too
            reject(f"{addresses[0]} eswitch mode {now!r} is not in allowedModes", item.inventory_id)
            continue
        family = pf_families(inventory)[item.inventory_id]
        targets.append(
            EswitchTarget(
                policy=name,
                inventory_id=item.inventory_id,
                devlink=f"pci/{item.pci_address}",
                mode=management.mode,
                allowed_modes=frozenset(management.allowed_modes),
                family=frozenset(family),
            )
        )
    return targets, findings


def pf_families(inventory: Inventory) -> dict[str, frozenset[str]]:
    """Each PF's reset domain for an eswitch change: its own and its VFs' inventory IDs."""
    out: dict[str, frozenset[str]] = {}
    for item in inventory.items.values():
        if item.kind is ItemKind.PF:
            vfs = {
                i.inventory_id
                for i in inventory.items.values()
                if i.pf_pci_address == item.pci_address
            }
            out[item.inventory_id] = frozenset({item.inventory_id} | vfs)
    return out


def eswitch_program(target: EswitchTarget) -> BoundProgram:
    """The one-effect program of a transition (bound here: no plugin emits the opcode)."""
    handle = Handle(
        id=f"eswitch/{target.inventory_id}",
        type=HandleType.PCI_FUNCTION,
        inventory_id=target.inventory_id,
        scope=Scope(ScopeKind.HOST),
        accesses=frozenset({Access.READ, Access.EXCLUSIVE_CONFIGURE}),
        provenance=Provenance(claim_uid="", request="eswitch", device=target.inventory_id),
        observations={"devlinkHandle": target.devlink},
    )
    effect = BoundEffect(
        id="eswitch",
        source_id="eswitch",
        kind=ESWITCH_CONFIGURE.name,
        inputs={"function": (handle,)},
        parameters={"mode": target.mode},
        requires=("drained-scope", "exclusive-grant", "protected-scope-clear"),
        postconditions=("eswitch-mode-match", "function-rediscovered"),
        recovery="RestoreBeforeImage",
    )
    return BoundProgram("eswitch-management", "v1", "prepare", "sha256:node-eswitch", (effect,))


def _recorded_devlink(program: BoundProgram) -> str:
    """The devlink instance a recorded transition changed (from the journal, never anew)."""
    (handle,) = program.effects[0].inputs["function"]
    return str(handle.observations.get("devlinkHandle", "")) if isinstance(handle, Handle) else ""


class EswitchModes:
    def __init__(self, journal: JournalStore, operations: NodeOperations, lock: NodeLock) -> None:
        self.journal = journal
        self.operations = operations
        self._lock = lock
        #: the eswitch operations the journal holds: listed once (a full scan), then kept
        self._known: set[str] | None = None
        self._held = ""  # this pass's node-wide hold (see reconcile)

    def _busy(self, devlink: str, family: Collection[str], allocated: Collection[str]) -> str:
        """Why the family is not drained, or ``""``: the journal's holds and the API's
        allocations of any of its inventory IDs, then the kernel (a VF port's netdev up:
        the executor would refuse, and a refused undo is quarantined)."""
        for res in self.journal.reservations():
            if res.resource in family:
                return f"{res.resource} is reserved by {res.holder}"
        for share in self.journal.shares():
            if share.parent_inventory_id in family:
                return f"{share.parent_inventory_id} is shared by claim {share.claim_uid}"
        held = sorted(set(family) & set(allocated))
        if held:
            return f"{held[0]} is allocated to a claim"
        env = self.operations.environment()
        try:
            return undrained(env, devlink)
        finally:
            env.close()

    def _blocked(
        self, inv: str, devlink: str, family: Collection[str], allocated: Collection[str]
    ) -> EswitchOutcome | None:
        """The outcome that stops this transition or restore before anything is written
        (``Busy``: not drained; ``Refused``: the kernel could not be asked), else None."""
        if self._held:
            return EswitchOutcome(inv, "Busy", "E_RESET_DOMAIN_BUSY", self._held)
        try:
            why = self._busy(devlink, family, allocated)
        except ExecutorError as exc:  # no devlink family, a failed dump: nothing is known
            return EswitchOutcome(inv, "Refused", exc.code, str(exc))
        if why:
            return EswitchOutcome(inv, "Busy", "E_RESET_DOMAIN_BUSY", why)
        return None

    def reconcile(
        self,
        targets: Sequence[EswitchTarget],
        families: dict[str, frozenset[str]] | None = None,
        allocated: Collection[str] = (),
        held: str = "",
    ) -> list[EswitchOutcome]:
        """Restore what no target wants, then place each target in its mode (see module).
        ``families`` gives the current family of a PF that no target names anymore (for the
        drain check of its restore; unknown: only the PF itself). ``held``: a node-wide
        reason no transition or restore may start now (the node is not cordoned)."""
        with self._lock.hold("eswitch check"):
            if held or self._settled(targets):
                # nothing will be written (a held pass only reports Busy): a read needs no
                # node-wide pass, which would make every new hook wait behind the
                # operations in flight every maintenance interval
                return self._reconcile(targets, families or {}, allocated, held)
        with self._lock.exclusive("eswitch"):
            return self._reconcile(targets, families or {}, allocated, held)

    def _recorded_ids(self) -> set[str]:
        if self._known is None:
            self._known = {
                op.operation_id
                for op in self.journal.operations()
                if op.scope.startswith(SCOPE_PREFIX)
            }
        return self._known

    def _settled(self, targets: Sequence[EswitchTarget]) -> bool:
        """Every target's transition Completed and every other recorded one Undone: the
        pass would only report (reads only; the maintenance thread is the only writer of
        eswitch operations)."""
        wanted = {t.operation_id for t in targets}
        for op_id in self._recorded_ids() - wanted:
            op = self.journal.load_operation(op_id)
            if op is not None and op.state.value != "Undone":
                return False  # a restore is due
        for op_id in wanted:
            op = self.journal.load_operation(op_id)
            if op is None or op.state.value not in _DONE:
                return False  # a transition is due (or held)
        return True

    def _reconcile(
        self,
        targets: Sequence[EswitchTarget],
        families: dict[str, frozenset[str]],
        allocated: Collection[str],
        held: str = "",
    ) -> list[EswitchOutcome]:
        self._held = held
        out: list[EswitchOutcome] = []
        wanted = {t.operation_id for t in targets}
        loaded = (self.journal.load_operation(op_id) for op_id in sorted(self._recorded_ids()))
        recorded = [op for op in loaded if op is not None]
        for op in recorded:
            if op.operation_id in wanted or op.state.value == "Undone":
                continue
            inv = op.scope.removeprefix(SCOPE_PREFIX)
            family = families.get(inv) or next(
                (t.family for t in targets if t.inventory_id == inv), frozenset({inv})
            )
            devlink = _recorded_devlink(op.program)
            blocked = self._blocked(inv, devlink, family, allocated)
            if blocked is not None:
                out.append(blocked)
                continue
            if self.operations.undo([op.operation_id]):
                log.info("event=eswitch-restored item=%s operation=%s", inv, op.operation_id)
                out.append(EswitchOutcome(inv, "Restored"))
            else:
                out.append(EswitchOutcome(inv, "Held", "E_CLEANUP_INCOMPLETE", op.operation_id))
        settled = {o.inventory_id for o in out if o.state != "Restored"}
        for t in targets:
            rec = self.journal.load_operation(t.operation_id)
            if rec is not None and rec.state.value in _DONE:
                out.append(EswitchOutcome(t.inventory_id, "Completed"))
                continue
            if t.inventory_id in settled:
                continue  # an earlier transition of this PF is not restored yet
            if rec is not None and rec.state.value != "Undone":
                out.append(EswitchOutcome(t.inventory_id, "Held", "E_QUARANTINED", rec.state.value))
                continue
            blocked = self._blocked(t.inventory_id, t.devlink, t.family, allocated)
            if blocked is not None:
                out.append(blocked)
                continue
            out.append(self._run(t))
        return out

    def _run(self, t: EswitchTarget) -> EswitchOutcome:
        assert self._known is not None
        self._known.add(t.operation_id)
        done: list[str] = []
        try:
            result = self.operations.run_or_refuse(
                t.operation_id,
                t.scope,
                eswitch_program(t),
                {},
                done,
                failed=("E_ESWITCH_FAILED", f"eswitch of {t.inventory_id}"),
            )
        except (Refusal, RunRefused) as exc:
            code = str(getattr(exc, "code", "E_ESWITCH_FAILED"))
            log.warning("event=eswitch-refused item=%s code=%s", t.inventory_id, code)
            return EswitchOutcome(t.inventory_id, "Refused", code, str(exc))
        log.info("event=eswitch-set item=%s mode=%s state=%s", t.inventory_id, t.mode, result.state)
        return EswitchOutcome(t.inventory_id, "Completed")


def eswitch_pass(
    modes: EswitchModes,
    inventory: Inventory,
    policies: Sequence[DeviceExposurePolicy],
    labels: dict[str, str],
    personas: PersonaSet | None,
    allocated_devices: Collection[str],
    *,
    cordoned: bool,
) -> list[EswitchOutcome]:
    """One maintenance pass over what the slice publisher last read: the node's targets, the
    API's allocated devices as inventory IDs (through the last published personas), whether
    the Node is cordoned (a transition or restore waits for it: design §6.7's whole-node
    cordon), then :meth:`EswitchModes.reconcile`. Findings and every outcome but
    Completed/Restored are logged; nothing here calls the API."""
    targets, findings = eswitch_targets(inventory, policies, labels)
    for finding in findings:
        log.warning("event=eswitch-policy-invalid %s", finding.to_json())
    by_device = {p.name: p.inventory_id for p in personas.personas} if personas else {}
    allocated = {by_device[d] for d in allocated_devices if d in by_device}
    held = "" if cordoned else "the node is not cordoned (spec.unschedulable)"
    outcomes = modes.reconcile(targets, pf_families(inventory), allocated, held)
    for outcome in outcomes:
        if outcome.state not in ("Completed", "Restored"):
            log.warning(
                "event=eswitch-%s item=%s code=%s message=%s",
                outcome.state.lower(),
                outcome.inventory_id,
                outcome.code,
                outcome.message,
            )
    return outcomes
