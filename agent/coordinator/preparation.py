"""The preparation service: kubelet NodePrepareResources / NodeUnprepareResources.

* :meth:`PreparationService.prepare`: read the claim, verify its allocation against the
  revision and this node's personas — refusing before any mutation — then take its
  exclusive reservations and share references, commit Preparing, run every root's
  ``prepare`` program in the revision's order, commit Prepared. The same claim UID and
  allocation fingerprint returns the recorded result; a different live allocation for a
  prepared claim is ``E_ALLOCATION_CHANGED``.
* :meth:`PreparationService.unprepare` is retryable while an attachment of the claim
  remains, else undoes the prepare operations from the journal and records Released.
* Multus automatic mode (design §6.8): before the node lock, :class:`.multus_plan.
  MultusPlanner` verifies the consumer and renders every template of the claim's
  ``multus-cni`` roots (API reads only, refusing bad input before any change); the bindings
  reach the ``multus/*`` effects through the run's environment. Their undo is the release
  order of design §6.8, the shadow's finalizer last, before Released.

Collaborators are passed in (journal, pins, operations, claim verifier, device view and
the node lock shared with the other services); this class builds none of them.

Locking (:mod:`.node_lock`): a prepare owns its claim's key and the device keys of the roots
it reserves or shares — the reservation and share-count checks read exactly those records —
so preparations of other claims on other devices run at the same time; an unprepare owns
its claim's key (under which no attachment of the claim can appear or go) and the keys of
the devices the journal records the claim holding.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from dmn.agent.coordinator.claim_verifier import ClaimVerifier
from dmn.agent.coordinator.config import NodeConfig
from dmn.agent.coordinator.device_metadata import ClaimIdentity, DeviceMetadataFiles, MetadataDevice
from dmn.agent.coordinator.handles import DeviceView, root_allocation
from dmn.agent.coordinator.multus_plan import MultusPlanner
from dmn.agent.coordinator.node_lock import NodeLock
from dmn.agent.coordinator.operations import NodeOperations, short_digest
from dmn.agent.coordinator.verify import Refusal, VerifiedClaim, driver_results, fingerprint
from dmn.agent.journal.records import (
    AttachmentState,
    PreparationRecord,
    PreparationState,
    PreparedDevice,
    Reservation,
    RevisionRef,
    ShareRef,
)
from dmn.agent.journal.store import JournalBatch, JournalStore, ReservationConflict
from dmn.engine.binder import Call
from dmn.engine.mutation_lock import claim_key, device_key
from dmn.engine.runner import RunRefused
from dmn.host.pins import NamespacePins, PinError
from dmn.opcodes.multus_objects import ShadowBinding

log = logging.getLogger("dmn.agent.coordinator.coordinator")

LIVE_ATTACHMENT = (AttachmentState.CONNECTING, AttachmentState.READY, AttachmentState.REMOVING)


class PreparationService:
    def __init__(
        self,
        config: NodeConfig,
        journal: JournalStore,
        pins: NamespacePins,
        operations: NodeOperations,
        claims: ClaimVerifier,
        devices: DeviceView,
        lock: NodeLock,
    ) -> None:
        self.config = config
        self.journal = journal
        self.pins = pins
        self.operations = operations
        self.claims = claims
        self.devices = devices
        self._lock = lock
        #: KEP-5304 metadata files (None: not written); set by the node services
        self.metadata: DeviceMetadataFiles | None = None
        #: Multus automatic mode's consumer check and template rendering (design §6.8; None:
        #: no multus-cni root binds, its effects refuse); set by the node services
        self.multus: MultusPlanner | None = None

    def prepare(self, namespace: str, name: str, uid: str) -> list[PreparedDevice]:
        """NodePrepare of one claim; raises :class:`Refusal` (nothing changed) or returns
        the prepared devices. The API reads (claim, revision) happen before the node lock
        is taken, never under it; the journal is checked again under the lock. The claim is
        read from the API server; its pinned revision may be the informer's exact copy
        when that copy's phase passes (:mod:`.claim_verifier`)."""
        claim = self.claims.read(namespace, name, uid)
        results = driver_results(claim, self.config.driver)
        if not results:
            return []
        fp = fingerprint(uid, results)
        with self._lock.hold(f"prepare {uid}", [claim_key(uid)]):
            done = self._recorded(uid, fp)
            if done is not None:
                self._publish_metadata(claim, done)
                return done
        verified = self.claims.verify(claim, cached=True)  # the claim itself was read fresh
        if verified is None:
            return []
        # Multus automatic mode: the consumer verified and every template rendered, with API
        # reads only and before the node lock (design §6.8): bad input refuses here — unless
        # every root already completed (a crash before Prepared): the runner replays those
        bindings = (
            self.multus.plan(claim, verified)
            if self.multus is not None and not self._completed(verified)
            else []
        )
        devices = [device_key(root.persona.inventory_id) for root in verified.roots]
        with self._lock.hold(f"prepare {uid}", [claim_key(uid), *devices]):
            done = self._recorded(uid, fp)  # prepared meanwhile (a kubelet retry)
            if done is None:
                done = self._prepare(verified, bindings)
            self._publish_metadata(claim, done)
            return done

    def _publish_metadata(self, claim: Mapping[str, Any], devices: list[PreparedDevice]) -> None:
        """KEP-5304: the claim's metadata files and CDI specs, written once the journal
        holds its preparation (so NodeUnprepare, which removes them first, always knows
        them); each device with the attributes this node publishes for it. A failure
        refuses the prepare (retryable): the kubelet must not get an id whose spec is
        missing, and its retry finds the preparation and writes them again."""
        if self.metadata is None or not devices:
            return
        published = self.devices.personas()
        personas = published.by_name() if published is not None else {}
        requests: dict[str, list[MetadataDevice]] = {}
        for d in devices:
            persona = personas.get(d.device)
            attributes = persona.attributes() if persona is not None else {}
            requests.setdefault(d.request, []).append(MetadataDevice(d.pool, d.device, attributes))
        self.metadata.publish(ClaimIdentity.of(claim), requests)

    def metadata_ids(self, uid: str, devices: list[PreparedDevice]) -> dict[str, str]:
        """The metadata CDI device id of each request (by base request name), or none."""
        if self.metadata is None:
            return {}
        layout = self.metadata.layout
        return {d.request.split("/", 1)[0]: layout.cdi_id(uid, d.request) for d in devices}

    def _recorded(self, uid: str, fp: str) -> list[PreparedDevice] | None:
        """The devices of a Prepared record of this allocation, None when there is none;
        refuses a live record of another allocation (E_ALLOCATION_CHANGED)."""
        for rec in self.journal.preparations(uid):
            if rec.state is PreparationState.RELEASED:
                continue
            if rec.allocation_fingerprint != fp:
                raise Refusal(
                    "E_ALLOCATION_CHANGED",
                    f"claim {uid} is prepared for another allocation",
                    "status.allocation",
                )
            if rec.state is PreparationState.PREPARED:
                return list(rec.devices)
        return None

    def _operations(self, v: VerifiedClaim) -> list[str]:
        return [f"prep-{short_digest(v.claim_uid + v.fingerprint)}-{root.step}" for root in v.roots]

    def _completed(self, v: VerifiedClaim) -> bool:
        """Every root's prepare operation is recorded Completed (replayed, not run)."""
        records = [self.journal.load_operation(op) for op in self._operations(v)]
        return all(rec is not None and rec.state.value == "Completed" for rec in records)

    def _holder(self, v: VerifiedClaim) -> str:
        return f"prep/{v.claim_uid}/{v.fingerprint}"

    def _check_sharing(self, v: VerifiedClaim) -> None:
        """Exclusive roots and shares of one parent never mix across claims (design §7.1
        items 4-5), judged from the journal's share references and reservations."""
        holder = self._holder(v)
        for root in v.roots:
            inv = root.persona.inventory_id
            held = self.journal.reservation(inv)
            if held is not None and held.holder != holder:
                raise Refusal("E_RESERVED", f"{root.result.device}: {inv} is held exclusively")
            if not root.result.share_id:
                others = [s for s in self.journal.shares(inv) if s.claim_uid != v.claim_uid]
                if others:
                    raise Refusal(
                        "E_SHARED_BUSY", f"{root.result.device}: {inv} has {len(others)} shares"
                    )

    def _release_holds(self, b: JournalBatch, v_claim: str, rec: PreparationRecord) -> None:
        holder = f"prep/{v_claim}/{rec.allocation_fingerprint}"
        for share in self.journal.shares():
            if share.claim_uid == v_claim and share.allocation_fingerprint == (
                rec.allocation_fingerprint
            ):
                b.delete_share(share.parent_inventory_id, share.claim_uid, share.share_id)
        for res in self.journal.reservations():
            if res.holder == holder:
                b.delete_reservation(res.resource)

    def _prepare(
        self, v: VerifiedClaim, bindings: list[ShadowBinding] | None = None
    ) -> list[PreparedDevice]:
        ops = self._operations(v)
        devices = [
            PreparedDevice(
                root.result.request, root.result.pool, root.result.device, root.result.share_id
            )
            for root in v.roots
        ]
        # plan every root before anything mutates: live link, handle, bound program
        self._check_sharing(v)
        env = self.pins.link_environment()
        try:
            programs = []
            for op, root in zip(ops, v.roots, strict=True):
                allocation = root_allocation(env, self.devices, root, v.claim_uid)
                call = Call(config=root.config, operation_id=op, allocation=allocation)
                programs.append(self.operations.bind(root.plugin, "prepare", call))
        finally:
            env.close()
        rec = PreparationRecord(
            claim_uid=v.claim_uid,
            allocation_fingerprint=v.fingerprint,
            revision=RevisionRef(v.revision, v.revision_uid, v.revision_digest),
            operations=ops,
        )
        holder = self._holder(v)
        try:
            self.journal.reserve(
                [
                    Reservation(root.persona.inventory_id, holder)
                    for root in v.roots
                    if not root.result.share_id
                ]
            )
        except ReservationConflict as exc:
            raise Refusal("E_RESERVED", str(exc)) from exc
        with self.journal.batch() as b:
            b.put_preparation(rec)
            for root in v.roots:
                if root.result.share_id:
                    b.put_share(
                        ShareRef(
                            root.persona.inventory_id,
                            v.claim_uid,
                            root.result.share_id,
                            v.fingerprint,
                            root.persona.persona,
                        )
                    )
        self.operations.boundary("after-preparing")
        done: list[str] = []
        scope = f"claim/{v.claim_uid}"
        try:
            for op, root, program in zip(ops, v.roots, programs, strict=True):
                self.operations.run_or_refuse(
                    op,
                    scope,
                    program,
                    {"revision": v.revision_digest, "allocation": v.fingerprint},
                    done,
                    failed=("E_PREPARE_FAILED", f"root {root.step}"),
                    allowed_drivers=root.persona.allowed_drivers,
                    multus_bindings=bindings or (),
                )
        except (Refusal, RunRefused, PinError) as exc:
            cleaned = self.operations.undo(reversed(done))
            # a quarantined operation refuses before it is recorded in ``done`` (a kubelet
            # retry of a preparation an earlier attempt left quarantined): its holds stay too
            cleaned = cleaned and not self.operations.holding(ops)
            rec.error = str(exc)
            if cleaned:  # an uncertain effect keeps the claim's holds (design §7.2)
                rec.state = PreparationState.RELEASED
            with self.journal.batch() as b:
                b.put_preparation(rec)
                if cleaned:
                    self._release_holds(b, v.claim_uid, rec)
            if isinstance(exc, Refusal):
                raise
            raise Refusal(str(getattr(exc, "code", "E_PREPARE_FAILED")), str(exc)) from exc
        rec.state = PreparationState.PREPARED
        rec.devices = devices
        with self.journal.batch() as b:
            b.put_preparation(rec)
        self.operations.boundary("after-prepared")
        log.info("event=prepared claim=%s roots=%d", v.claim_uid, len(v.roots))
        return devices

    def unprepare(self, uid: str, namespace: str = "", name: str = "") -> None:
        """Release the claim's preparation; retryable :class:`Refusal` while attached. The
        claim's KEP-5304 metadata files (``namespace``/``name`` locate them) are removed
        before the preparation is released: a crash in between leaves a record whose retry
        finds nothing more to remove, never a file no record proves ours."""
        reason = f"unprepare {uid}"
        with (
            self._lock.hold(reason, [claim_key(uid)]),
            self._lock.hold(reason, self._lock.claims([uid])),
        ):
            for att in self.journal.attachments_naming([uid]):
                if att.state in LIVE_ATTACHMENT:
                    raise Refusal(
                        "E_ATTACHED",
                        f"claim {uid} is still attached to sandbox {att.identity.sandbox_id}",
                        retryable=True,
                    )
            if self.metadata is not None and namespace and name:
                self.metadata.remove(namespace, name, uid)
            for rec in self.journal.preparations(uid):
                if rec.state is PreparationState.RELEASED:
                    continue
                rec.state = PreparationState.UNPREPARING
                with self.journal.batch() as b:
                    b.put_preparation(rec)
                self.operations.boundary("after-unpreparing")
                if not self.operations.undo(reversed(rec.operations)):
                    raise Refusal("E_CLEANUP_INCOMPLETE", f"claim {uid}", retryable=True)
                rec.state = PreparationState.RELEASED
                with self.journal.batch() as b:
                    b.put_preparation(rec)
                    self._release_holds(b, uid, rec)
                self.operations.boundary("after-released")
                log.info("event=unprepared claim=%s", uid)
