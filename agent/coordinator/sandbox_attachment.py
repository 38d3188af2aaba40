"""The sandbox attachment service: NRI RunPodSandbox, container gate, Stop and Remove.

* :meth:`SandboxAttachmentService.run_pod` (RunPodSandbox): the Pod verified (runtime UID,
  bound to this node, not hostNetwork), its claims reserved for it alone, each Prepared
  with its current fingerprint and attached to no other live sandbox; pin the runtime's
  netns (refusing the host namespace), commit Connecting, run ``connect`` of every step in
  topological order (Operation steps take earlier steps' exports), commit Ready. A failure
  cleans up what ran, releases the pin and refuses the hook.
* :meth:`~SandboxAttachmentService.gate` (Create/StartContainer): a Pod with our claims
  starts containers only in the exact sandbox whose attachment is Ready (and, in Multus
  automatic mode, once Multus reports every managed interface attached: :mod:`.multus_gate`);
  :meth:`~SandboxAttachmentService.device_nodes` lists the VFIO device nodes its connect
  programs granted, which CreateContainer adds to every container of that sandbox.
* :meth:`~SandboxAttachmentService.stop_pod` fences the attachment (no run of it can
  finish afterwards), records Removing, undoes the connect operations in reverse from the
  journal and releases the pin. Teardown belongs to StopPodSandbox, not RemovePodSandbox:
  a real kubelet calls NodeUnprepareResources after the sandbox is stopped and before it
  is removed (sandbox removal is garbage collection and may come much later), and
  containerd tears a sandbox's CNI network down at Stop too. Cleaning up only at Remove
  refused that unprepare (E_ATTACHED) forever and left the Pod Terminating.
  :meth:`~SandboxAttachmentService.remove_pod` finishes a cleanup that Stop could not
  complete (or that never saw a Stop); the Removed record stays as the tombstone that
  refuses a late RunPodSandbox of the same sandbox.

NetworkAttachmentStatus objects and claim device status report each attachment
(:mod:`.attachment_status`, never authority), written in order by a background
:class:`~.status_writer.StatusWriter` so that no hook waits on the API server.
Collaborators are passed in. Locking (:mod:`.node_lock`): every call owns its sandbox's
key; RunPodSandbox also its claims' and their devices' (the "claim attached elsewhere"
check reads every attachment naming those claims, and a connect creates children on the
claims' parents), a teardown the claims' and devices' of the record it tears down, so that
NodeUnprepare's "still attached" sees no attachment appear or go. Sandboxes of other Pods
with other claims run at the same time.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

from dmn.agent.coordinator.attachment_status import (
    AttachmentReporter,
    ClaimBinding,
    ClaimDeviceStatus,
    device_entries,
    status_outputs,
)
from dmn.agent.coordinator.claim_verifier import ClaimVerifier
from dmn.agent.coordinator.config import NodeConfig
from dmn.agent.coordinator.device_metadata import DeviceMetadataFiles, from_status_entries
from dmn.agent.coordinator.handles import operation_inputs
from dmn.agent.coordinator.interface_names import IFNAME_KEY, distinct_interface_names
from dmn.agent.coordinator.multus_gate import MultusGate
from dmn.agent.coordinator.node_lock import NodeLock
from dmn.agent.coordinator.node_objects import NodeObjects
from dmn.agent.coordinator.operations import NodeOperations, short_digest
from dmn.agent.coordinator.pod_claims import pod_claims
from dmn.agent.coordinator.pod_network_status import (
    PodNetworkStatus,
    attached_message,
    status_entries,
)
from dmn.agent.coordinator.status_writer import StatusWriter
from dmn.agent.coordinator.step_grants import StepGrants
from dmn.agent.coordinator.verify import (
    Refusal,
    VerifiedClaim,
    driver_results,
    fingerprint,
)
from dmn.agent.journal.keys import attachment_id
from dmn.agent.journal.records import (
    AttachedClaim,
    AttachmentIdentity,
    AttachmentRecord,
    AttachmentState,
    NamespacePin,
    PinState,
    PreparationRecord,
    PreparationState,
    RevisionRef,
)
from dmn.agent.journal.store import JournalStore
from dmn.agent.node_events import NodeEventReporter, pod_object
from dmn.agent.nri.handler import HookDeadline, current_deadline
from dmn.api.cluster import Cluster
from dmn.engine.binder import Call
from dmn.engine.journal import EffectRecord, Fence
from dmn.engine.mutation_lock import claim_key, device_key
from dmn.engine.runner import RunRefused
from dmn.host.netns import NamespaceRef, identity_of
from dmn.host.pins import NamespacePins, PinError
from dmn.opcodes.address_pools import ClaimOwner
from dmn.opcodes.granted_nodes import DeviceNode, decode
from dmn.vocabulary.handles import Handle, Scope
from dmn.vocabulary.terms import HandleType, ScopeKind

log = logging.getLogger("dmn.agent.coordinator.coordinator")

# handles whose ``deviceNodes`` observation (written by vfio/ and rdma/device-access) lists
# character devices for the sandbox's containers
_GRANTED_NODE_TYPES = (HandleType.VFIO_DEVICE, HandleType.RDMA_DEVICE)


TOMBSTONE = "tombstone:"
"""How the error of a Removed record written for a sandbox stopped or removed before any
attachment of it begins (:meth:`SandboxAttachmentService._tombstone`)."""
ABANDONED = "abandoned:"
"""How the fence reason of a Connecting attachment whose RunPodSandbox died begins: it is
cleaned up like a removed sandbox, but the sandbox itself may still live and be attached
late (:meth:`SandboxAttachmentService.attach_late`)."""


@dataclass(frozen=True)
class LateAttach:
    """What a container gate knows to attach a sandbox whose RunPodSandbox attached nothing.

    ``had_containers``: the runtime listed a container of the sandbox when the agent
    (re)connected (NRI Synchronize) — a container that ran without its networks, which no
    late attachment can make right."""

    netns_path: str | None
    deadline: HookDeadline | None
    had_containers: bool = False


def _in_time(deadline: HookDeadline | None, subject: str, when: str) -> None:
    """Refuse (E_HOOK_DEADLINE) once the hook's deadline expired: its answer is gone."""
    if deadline is not None and deadline.expired():
        raise Refusal(
            "E_HOOK_DEADLINE",
            f"{subject}: the hook's deadline passed {when}; nothing more is attached",
            retryable=True,
        )


class SandboxAttachmentService:
    def __init__(
        self,
        config: NodeConfig,
        cluster: Cluster,
        journal: JournalStore,
        pins: NamespacePins,
        operations: NodeOperations,
        claims: ClaimVerifier,
        boot_id: Callable[[], str],
        lock: NodeLock,
        objects: NodeObjects | None = None,
    ) -> None:
        self.config = config
        self.cluster = cluster
        #: the informer cache that lets Pods without our claims pass without API calls
        self.objects = objects
        self.journal = journal
        self.pins = pins
        self.operations = operations
        self.claims = claims
        self.boot_id = boot_id
        self.reporter = AttachmentReporter(cluster, config.node_name)
        self.claim_status = ClaimDeviceStatus(cluster)
        self.pod_network_status = PodNetworkStatus(cluster)
        #: Normal Events (Attached) about the Pod; the node agent sets its reporter
        self.events: NodeEventReporter | None = None
        #: KEP-5304 metadata files (None: not written); set by the node services
        self.metadata: DeviceMetadataFiles | None = None
        #: Multus automatic mode's container gate (design §6.8; None: not checked); set by
        #: the node services
        self.multus: MultusGate | None = None
        # status is reporting, never authority: written off the hook path, in order
        self.status = StatusWriter()
        # a hook's fresh API reads that do not depend on each other go out together (never
        # shut down: a hook may outlive close; idle threads end with the executor)
        self._reads = ThreadPoolExecutor(max_workers=2, thread_name_prefix="hook-reads")
        self._lock = lock
        self._running: dict[AttachmentIdentity, int] = {}
        self._running_lock = threading.Lock()

    def in_flight(self, identity: AttachmentIdentity) -> bool:
        """True while a RunPodSandbox of ``identity`` is running in this process (its
        Connecting record is no orphan)."""
        with self._running_lock:
            return identity in self._running

    @contextmanager
    def _running_for(self, identity: AttachmentIdentity) -> Iterator[None]:
        with self._running_lock:
            self._running[identity] = self._running.get(identity, 0) + 1
        try:
            yield
        finally:
            with self._running_lock:
                left = self._running.pop(identity) - 1
                if left:
                    self._running[identity] = left

    def _pod_claims(self, namespace: str, pod_name: str, pod_uid: str) -> list[dict[str, Any]]:
        return pod_claims(
            self.cluster,
            self.config.driver,
            self.config.node_name,
            namespace,
            pod_name,
            pod_uid,
            self.objects,
            self._reads,
        )

    def _identity(self, pod_uid: str, sandbox_id: str) -> AttachmentIdentity:
        return AttachmentIdentity(self.config.node_uid, self.boot_id(), pod_uid, sandbox_id)

    def run_pod(
        self,
        namespace: str,
        pod_name: str,
        pod_uid: str,
        sandbox_id: str,
        netns_path: str | None,
        deadline: HookDeadline | None = None,
    ) -> bool:
        """Attach the Pod's prepared claims to the sandbox; False: no claims of ours.

        ``deadline`` is the NRI hook's: it is checked before the intent is committed,
        before every connect step and before Ready is committed. Once it expired (the
        runtime was answered DEADLINE_EXCEEDED while this thread went on), nothing more
        is attached: what ran is undone and the record ends Removed (E_HOOK_DEADLINE). A
        sandbox that was stopped or removed first left a Removed tombstone, and a Run
        arriving after it is refused (E_ATTACHMENT_STATE) before anything is done.
        """
        identity = self._identity(pod_uid, sandbox_id)
        with self._running_for(identity):
            _in_time(deadline, sandbox_id, "before reading the Pod")
            if self.objects is not None and self.objects.proves_no_claims(
                namespace, pod_name, pod_uid
            ):
                return False  # the informer cache proves it: no API call at all
            # API reads happen before the node lock is taken (never under it)
            claims = self._pod_claims(namespace, pod_name, pod_uid)
            if not claims:
                return False
            self.operations.boundary("before-run-pod")
            existing = self.journal.get_attachment(identity)
            if existing is not None and existing.state is AttachmentState.READY:
                return True
            reads = self._read_claims(claims)
            return self._attach(namespace, pod_name, identity, netns_path, reads, deadline)

    def _read_claims(
        self, claims: list[dict[str, Any]]
    ) -> list[tuple[dict[str, Any], VerifiedClaim, dict[str, Any]]]:
        """Each claim verified against its revision, and the revision (API reads)."""
        out = []
        for c in claims:
            verified, revision = self.claims.verify_with_revision(
                c, accept_superseded=True, cached=True
            )
            if verified is None:
                uid = str(c["metadata"]["uid"])
                raise Refusal("E_NOT_PREPARED", f"claim {uid} has no results of ours")
            out.append((c, verified, revision))  # the revision verify checked
        return out

    def _attach(
        self,
        namespace: str,
        pod_name: str,
        identity: AttachmentIdentity,
        netns_path: str | None,
        reads: list[tuple[dict[str, Any], VerifiedClaim, dict[str, Any]]],
        deadline: HookDeadline | None,
        late: bool = False,
    ) -> bool:
        """The journal and kernel part of :meth:`run_pod` (and of :meth:`attach_late`, which
        may replace a record that attached nothing), under the node lock."""
        pod_uid, sandbox_id = identity.pod_uid, identity.sandbox_id
        claims = [c for c, _, _ in reads]
        keys = [
            self._lock.sandbox(attachment_id(identity)),
            *(claim_key(str(c["metadata"]["uid"])) for c in claims),
            *(device_key(root.persona.inventory_id) for _, v, _ in reads for root in v.roots),
        ]
        with self._lock.hold(f"run {sandbox_id}", keys):
            existing = self.journal.get_attachment(identity)
            if existing is not None and existing.state is AttachmentState.READY:
                return True
            incarnation = 0
            if late and existing is not None:
                incarnation = self._clear_for_late(existing)
            elif existing is not None and existing.state is not AttachmentState.CONNECTING:
                raise Refusal(
                    "E_ATTACHMENT_STATE",
                    f"sandbox {sandbox_id} is {existing.state.value} (stopped or removed "
                    "before this RunPodSandbox finished)",
                )
            plan: list[tuple[PreparationRecord, VerifiedClaim, dict[str, Any]]] = []
            for c, verified, revision in reads:
                uid = str(c["metadata"]["uid"])
                fp = fingerprint(uid, driver_results(c, self.config.driver))
                prep = self.journal.get_preparation(uid, fp)
                if prep is None or prep.state is not PreparationState.PREPARED:
                    raise Refusal("E_NOT_PREPARED", f"claim {uid} is not prepared on this node")
                if verified.revision_digest != prep.revision.digest:
                    raise Refusal(
                        "E_REVISION_DIGEST", f"claim {uid} was prepared under another revision"
                    )
                plan.append((prep, verified, revision))  # the revision verify checked
            wanted_claims = {p.claim_uid for p, _, _ in plan}
            for other in self.journal.attachments_naming(wanted_claims):
                if other.identity != identity and other.state is not AttachmentState.REMOVED:
                    # a new incarnation never steals roots or shares from a live one
                    raise Refusal(
                        "E_CLAIM_IN_USE",
                        f"claims are attached to sandbox {other.identity.sandbox_id} "
                        f"({other.state.value})",
                        retryable=True,
                    )
            if not netns_path:
                raise Refusal("E_NO_NETNS", "the runtime supplied no network namespace")
            att = attachment_id(identity)
            try:
                wanted = identity_of(netns_path)
            except OSError as exc:
                raise Refusal("E_NETNS_GONE", f"{netns_path}: {exc.strerror}") from exc
            ops = [
                _connect_operation(att, prep.claim_uid, step, incarnation)
                for prep, _, rev in plan
                for step in rev["spec"]["order"]
            ]
            rec = AttachmentRecord(
                identity=identity,
                claims=[
                    AttachedClaim(
                        p.claim_uid,
                        p.allocation_fingerprint,
                        namespace,
                        str(c["metadata"]["name"]),
                        RevisionRef(v.revision, v.revision_uid, v.revision_digest),
                    )
                    for (p, v, _), c in zip(plan, claims, strict=True)
                ],
                operations=ops,
                runtime_netns=netns_path,
                incarnation=incarnation,
            )
            pin = NamespacePin(
                att, str(self.pins.path(att)), wanted.dev, wanted.inode, identity.boot_id
            )
            _in_time(deadline, sandbox_id, "before the attachment intent")
            # the intent is in the journal before the mount exists: a crash leaves a record
            # that proves the pin is ours. Not synced on its own (issue 15): a killed process
            # loses no written record (the WAL is in the page cache), and a crash of the
            # machine that could lose it also takes every mount and sandbox with it; the next
            # synced commit makes it durable (the runner's first before a non-boot-volatile
            # effect, else Ready).
            with self.journal.batch(sync=False) as b:
                b.put_attachment(rec)
                b.put_pin(pin)
            self.operations.boundary("after-attachment-intent")
            self.status.submit(
                self.reporter.created,
                namespace,
                pod_name,
                identity,
                att,
                [
                    ClaimBinding(c.claim_uid, c.fingerprint, c.revision.to_json())
                    for c in rec.claims
                ],
            )
            try:
                ref = self.pins.pin(att, netns_path)
            except PinError as exc:
                rec.state, rec.error = AttachmentState.REMOVED, str(exc)
                with self.journal.batch() as b:
                    b.put_attachment(rec)
                    b.delete_pin(att)
                self.status.submit(self.reporter.phase, att, "Released", error=f"{exc.code}: {exc}")
                raise Refusal(exc.code, str(exc)) from exc
            # not synced on its own either: durable with the next synced commit (as above)
            self.operations.boundary("after-pin-mount")
            with self.journal.batch(sync=False) as b:
                b.put_pin(replace(pin, state=PinState.MOUNTED))
            done: list[str] = []
            outputs: list[dict[str, Any]] = []
            device_status: list[list[dict[str, Any]]] = []
            names = distinct_interface_names([_step_configs(rev, v) for _, v, rev in plan])
            try:
                for (prep, verified, revision), claim, renames in zip(
                    plan, rec.claims, names, strict=True
                ):
                    # who holds the addresses a connect allocates: the claim verified above
                    owner = ClaimOwner(
                        claim.namespace, claim.name, claim.claim_uid, self.config.node_name
                    )
                    exports, records = self._connect(
                        att,
                        ref,
                        prep,
                        verified,
                        revision,
                        done,
                        deadline,
                        owner,
                        renames,
                        incarnation,
                    )
                    outputs.extend(status_outputs(exports, verified))
                    device_status.append(
                        device_entries(self.config.driver, verified, exports, records)
                    )
                _in_time(deadline, sandbox_id, "before Ready")
            except (Refusal, RunRefused, PinError) as exc:
                cleaned = self.operations.undo(reversed(done), sync_end=False)  # batch below
                cleaned = cleaned and not self.operations.holding(ops)  # quarantined: held
                rec.state, rec.error = AttachmentState.REMOVED, str(exc)
                if not cleaned:
                    rec.state = AttachmentState.REMOVING
                with self.journal.batch() as b:
                    b.put_attachment(rec)
                    if cleaned:
                        b.delete_pin(att)
                if cleaned:
                    self.pins.release(att, cleanup_verified=True)
                self.status.submit(
                    self.reporter.phase,
                    att,
                    "Released" if cleaned else "CleanupPending",
                    error=str(exc),
                )
                if isinstance(exc, Refusal):
                    raise
                raise Refusal(str(getattr(exc, "code", "E_CONNECT_FAILED")), str(exc)) from exc
            # synced: also makes the last connect's Completed record durable (sync_end=False)
            rec.state = AttachmentState.READY
            with self.journal.batch() as b:
                b.put_attachment(rec)
            self.operations.boundary("after-ready")
            self.status.submit(self.reporter.phase, att, "Ready", outputs=outputs)
            network_status: list[dict[str, Any]] = []
            for claim, entries in zip(rec.claims, device_status, strict=True):
                self._update_metadata(claim.namespace, claim.name, claim.claim_uid, entries)
                self.status.submit(self.claim_status.write, claim.namespace, claim.name, entries)
                network_status += status_entries(claim.namespace, claim.name, entries)
            if self.events is not None:
                self.events.noticed(
                    pod_object(namespace, pod_name, pod_uid),
                    "Attached",
                    attached_message([(c.namespace, c.name) for c in rec.claims], device_status),
                )
            if network_status:
                self.status.submit(
                    self.pod_network_status.write,
                    namespace,
                    pod_name,
                    pod_uid,
                    [f"{c.namespace}/{c.name}" for c in rec.claims],
                    network_status,
                )
            log.info("event=ready pod=%s sandbox=%s operations=%d", pod_uid, sandbox_id, len(ops))
            return True

    def _update_metadata(
        self, namespace: str, name: str, uid: str, entries: list[dict[str, Any]] | None
    ) -> None:
        """KEP-5304: the claim's metadata files get what this sandbox's devices became
        (``entries``, the claim-status report: network data, grant data), or lose it
        (``entries`` None with the devices as keys: the sandbox is gone). Done before the
        hook answers, so containers created afterwards mount the new content; a failure is
        logged, never fails the sandbox (the metadata is a report, like the status)."""
        if self.metadata is None:
            return
        try:
            updates = from_status_entries(self.config.driver, entries or [])
            self.metadata.update(namespace, name, uid, updates)
        except Refusal as exc:
            log.warning("event=device-metadata-failed claim=%s error=%s", uid, exc)

    def _drop_device_status(self, rec: AttachmentRecord) -> None:
        for c in rec.claims:
            if not c.name:  # migrated from a version-1 record that did not name the claim
                continue
            prep = self.journal.get_preparation(c.claim_uid, c.fingerprint)
            if prep is None:
                continue
            if self.metadata is not None:
                try:
                    self.metadata.update(
                        c.namespace,
                        c.name,
                        c.claim_uid,
                        {(d.pool, d.device): None for d in prep.devices},
                    )
                except Refusal as exc:
                    log.warning("event=device-metadata-failed claim=%s error=%s", c.claim_uid, exc)
            drop = [
                {
                    "driver": self.config.driver,
                    "pool": d.pool,
                    "device": d.device,
                    "shareID": d.share_id,
                }
                for d in prep.devices
            ]
            self.status.submit(self.claim_status.write, c.namespace, c.name, [], drop)

    def _connect(
        self,
        att: str,
        ref: NamespaceRef,
        prep: PreparationRecord,
        verified: VerifiedClaim,
        revision: Mapping[str, Any],
        done: list[str],
        deadline: HookDeadline | None = None,
        owner: ClaimOwner | None = None,
        renames: Mapping[str, str] | None = None,
        incarnation: int = 0,
    ) -> tuple[dict[str, Mapping[str, tuple[Handle, ...]]], list[EffectRecord]]:
        """Run each step's connect; each step's exports, and every step's journaled
        effects in order (what the claim's ``networkData`` is reported from: an operation
        step may address a root's interface)."""
        spec = revision["spec"]
        steps = {str(s["id"]): s for s in spec["normalizedSpec"]["steps"]}
        roots = {root.step: root for root in verified.roots}
        prepared_ops = dict(
            zip((root.step for root in verified.roots), prep.operations, strict=True)
        )
        exports: dict[str, Mapping[str, tuple[Handle, ...]]] = {}
        records: list[EffectRecord] = []
        sandbox = Scope(ScopeKind.SANDBOX, ref.identity)
        for step_id in spec["order"]:
            step = steps[step_id]
            _in_time(deadline, att, f"before step {step_id}")
            op = _connect_operation(att, prep.claim_uid, step_id, incarnation)
            # a root connects with what it was verified with (the claim's workload
            # parameters over the topology's config); an Operation with the topology's
            config = dict(roots[step_id].config if step_id in roots else step.get("config") or {})
            if renames and step_id in renames:
                config[IFNAME_KEY] = renames[step_id]  # another claim of the Pod has it
            drivers: tuple[str, ...] = ()
            grants: StepGrants | None = None
            if step_id in roots:
                plugin = roots[step_id].plugin
                drivers = roots[step_id].persona.allowed_drivers
                prepared_rec = self.journal.load_operation(prepared_ops[step_id])
                if prepared_rec is None:
                    raise Refusal("E_NOT_PREPARED", f"root {step_id} has no prepare record")
                if plugin.program("connect") is None:
                    # nothing of it runs in the sandbox (multus-cni: Multus attaches it at
                    # sandbox creation, design §6.8): what it prepared is what it exports
                    exports[step_id] = dict(prepared_rec.result)
                    continue
                call = Call(
                    config=config,
                    operation_id=op,
                    prepared=dict(prepared_rec.result),
                    sandbox=sandbox,
                )
            else:
                # verified like a root's: this agent's builtin of the pinned digest, or the
                # EffectProgram the revision pins, re-checked on this node
                plugin = verified.operations[step_id].plugin
                # the bridges of the policy that exposed the consumed device, never config
                grants = verified.operations[step_id].grants
                call = Call(
                    config=config,
                    operation_id=op,
                    inputs=operation_inputs(step.get("inputs") or {}, exports),
                    sandbox=sandbox,
                )
            result = self.operations.run_or_refuse(
                op,
                f"attachment/{att}",
                self.operations.bind(plugin, "connect", call),
                {"revision": verified.revision_digest},
                done,
                failed=("E_CONNECT_FAILED", f"step {step_id}"),
                attachment=att,
                sync_end=False,  # durable with the next step's intent or the Ready commit
                allowed_drivers=drivers,
                grants=grants,
                claim_owner=owner,
            )
            exports[step_id] = result.exports
            records.extend(result.effects)
        return exports, records

    def gate(
        self,
        namespace: str,
        pod_name: str,
        pod_uid: str,
        sandbox_id: str,
        late: LateAttach | None = None,
    ) -> None:
        """Refuse (:class:`Refusal`) unless this exact sandbox is Ready, for Pods with our
        claims; a Pod without claims of ours passes.

        Answered from the journal when it has a record of the sandbox, else from the
        informer cache when it proves the Pod has no claim of ours (no API call at all);
        only otherwise is the API server asked, and never under the node lock.

        With ``late`` (CreateContainer), a sandbox of a Pod with our claims that is not
        Ready because its RunPodSandbox attached nothing — the agent was down, died inside
        the hook, or answered after the runtime's deadline, and containerd went on without
        it — is attached now (:meth:`attach_late`) instead of being refused forever: no
        container of it has run, so the Pod gets its networks before its first one."""
        identity = self._identity(pod_uid, sandbox_id)
        with self._lock.hold(f"gate {sandbox_id}", [self._lock.sandbox(attachment_id(identity))]):
            att = self.journal.get_attachment(identity)
            if att is not None and att.state is AttachmentState.READY:
                self._check_ready(att, sandbox_id)
                ready = att
            else:
                ready = None
        if ready is not None:
            self._hold_for_multus(namespace, pod_name, ready, late)
            return
        if att is not None and late is None:
            raise Refusal("E_NOT_READY", f"sandbox {sandbox_id} is {att.state.value}")
        if self.objects is not None and self.objects.proves_no_claims(namespace, pod_name, pod_uid):
            return
        if late is not None:
            self.attach_late(namespace, pod_name, pod_uid, sandbox_id, late)
            attached = self.journal.get_attachment(identity)
            if attached is not None and attached.state is AttachmentState.READY:
                self._hold_for_multus(namespace, pod_name, attached, late)
        elif self._pod_claims(namespace, pod_name, pod_uid):
            raise Refusal("E_NOT_READY", f"sandbox {sandbox_id} is not attached")

    def _hold_for_multus(
        self, namespace: str, pod_name: str, att: AttachmentRecord, late: LateAttach | None
    ) -> None:
        """Multus automatic mode: hold the container until Multus reports every managed
        interface of the Ready attachment attached (:mod:`.multus_gate`), outside the lock."""
        if self.multus is None:
            return
        deadline = late.deadline if late is not None else current_deadline()
        self.multus.hold(namespace, pod_name, att.identity.pod_uid, att, deadline)

    def _check_ready(self, att: AttachmentRecord, sandbox_id: str) -> None:
        if self.pins.ref(attachment_id(att.identity)) is None:
            raise Refusal("E_PIN_MISSING", f"sandbox {sandbox_id} lost its namespace pin")
        for c in att.claims:
            prep = self.journal.get_preparation(c.claim_uid, c.fingerprint)
            if prep is None or prep.state is not PreparationState.PREPARED:
                raise Refusal("E_NOT_READY", f"claim {c.claim_uid} is not prepared")

    def attach_late(
        self, namespace: str, pod_name: str, pod_uid: str, sandbox_id: str, late: LateAttach
    ) -> None:
        """Attach the Pod's prepared claims to a live sandbox at its first container's
        CreateContainer, exactly as RunPodSandbox would have (same checks, same journal
        order, the hook's own deadline); passes a Pod without claims of ours.

        Why: containerd does not fail a sandbox whose NRI plugin was absent, died or timed
        out in RunPodSandbox — it starts it and never asks again — and its required-plugin
        validator only holds the *containers* until the plugin is back. Refusing them
        forever would leave the Pod stuck without an error of its own making. Refused
        (:class:`Refusal`) when a container of the sandbox already ran
        (``E_STARTED_WITHOUT_NETWORK``), while another RunPodSandbox of it is still running,
        and for a sandbox that was stopped or removed (see :meth:`_attach`)."""
        identity = self._identity(pod_uid, sandbox_id)
        with self._running_for(identity):
            claims = self._pod_claims(namespace, pod_name, pod_uid)
            if not claims:
                return
            if late.had_containers:
                raise Refusal(
                    "E_STARTED_WITHOUT_NETWORK",
                    f"sandbox {sandbox_id} had containers before the agent attached it: they "
                    "ran without the Pod's networks (the runtime was not holding containers "
                    "for this plugin); delete the Pod so that a new sandbox gets them",
                )
            reads = self._read_claims(claims)
            self._attach(
                namespace, pod_name, identity, late.netns_path, reads, late.deadline, late=True
            )
        log.info("event=attached-late pod=%s sandbox=%s", pod_uid, sandbox_id)

    def _clear_for_late(self, existing: AttachmentRecord) -> int:
        """The incarnation a late attachment over ``existing`` gets (under the sandbox's
        keys): a Connecting record whose hook died is resumed as it is; one that ended
        Removed without being stopped or removed (a deadline, an orphan the reconcile tick
        abandoned) gets the next incarnation, its leftover pin and abandoned fence cleared.
        Refuses when the sandbox was stopped or removed, or a run of it is still going or
        cleaning up."""
        identity, sandbox_id = existing.identity, existing.identity.sandbox_id
        att = attachment_id(identity)
        if existing.state is AttachmentState.CONNECTING:
            with self._running_lock:
                others = self._running.get(identity, 0) > 1  # this call counts once
            if others:
                raise Refusal(
                    "E_NOT_READY",
                    f"sandbox {sandbox_id}: its RunPodSandbox is still running",
                    retryable=True,
                )
            # its hook died (an earlier incarnation of the agent): resumed like a runtime's
            # retry of the same sandbox — the same operations, replayed or recovered
            return existing.incarnation
        if existing.state is not AttachmentState.REMOVED:
            raise Refusal(
                "E_NOT_READY",
                f"sandbox {sandbox_id} is {existing.state.value}: its cleanup is pending",
                retryable=True,
            )
        fence = self.journal.fence(f"attachment/{att}")
        if existing.error.startswith(TOMBSTONE) or (
            fence is not None and not fence.reason.startswith(ABANDONED)
        ):
            raise Refusal(
                "E_ATTACHMENT_STATE",
                f"sandbox {sandbox_id} was stopped or removed; it is never attached again",
            )
        self.release_leftover_pin(existing)
        if fence is not None:
            with self.journal.batch() as b:
                b.delete_fence(fence.scope)
        return existing.incarnation + 1

    def stop_pod(self, pod_uid: str, sandbox_id: str) -> bool:
        """Durably invalidate Ready, fence the attachment's scope, then tear it down; True
        when this call tore an attachment down (False: none, or removed before).

        A failed teardown is a retryable :class:`Refusal`; the record stays Removing and
        RemovePodSandbox (or the reconcile loop) finishes it.
        """
        identity = self._identity(pod_uid, sandbox_id)
        with self.owning(identity, f"stop {sandbox_id}") as rec:
            if rec is None:
                self._tombstone(identity, "stopped")
                return False
            if rec.state is AttachmentState.REMOVED:
                self.release_leftover_pin(rec)
                return False
            att = attachment_id(identity)
            rec.state = AttachmentState.REMOVING
            self._invalidate(rec, att, "sandbox stopped")
            self.operations.boundary("after-removing")
            self.status.submit(self.reporter.phase, att, "CleanupPending")
            log.info("event=invalidated pod=%s sandbox=%s", pod_uid, sandbox_id)
            self.remove(rec)
            return True

    def stop_released(self, claim_uid: str) -> list[AttachmentIdentity]:
        """Tear down Ready attachments of ``claim_uid`` whose sandbox the runtime stopped
        without a StopPodSandbox to us; returns their identities.

        Why: containerd keeps what it told NRI plugins about each sandbox in memory only
        (``internal/nri/nri.go``: a sandbox's state is set at RunPodSandbox; Synchronize
        after a restart sets the state of containers, never of sandboxes), so after a
        containerd restart StopPodSandbox and RemovePodSandbox reach no plugin for any
        sandbox that existed before it. kubelet's NodeUnprepare for such a Pod then met a
        Ready attachment (E_ATTACHED) forever and the Pod stayed Terminating.

        The proof that the runtime stopped the sandbox is its own mount of the sandbox's
        network namespace, recorded at RunPodSandbox: the runtime removes it when it stops
        the sandbox (right after tearing the CNI network down). A recorded path that no
        longer names the namespace we pinned means stopped; the teardown is then exactly
        :meth:`stop_pod`'s. Without a recorded path (older records) nothing is concluded.
        """
        stopped: list[AttachmentIdentity] = []
        # a scan of reads only; each stop owns its sandbox and re-reads the record
        boot = self.boot_id()
        for rec in self.journal.attachments_naming([claim_uid]):
            if rec.state is not AttachmentState.READY or not rec.runtime_netns:
                continue
            if rec.identity.boot_id != boot or rec.identity.node_uid != self.config.node_uid:
                continue
            pin = self.journal.get_pin(attachment_id(rec.identity))
            if pin is None or _names_namespace(rec.runtime_netns, pin.dev, pin.inode):
                continue
            log.info(
                "event=runtime-released pod=%s sandbox=%s netns=%s",
                rec.identity.pod_uid,
                rec.identity.sandbox_id,
                rec.runtime_netns,
            )
            self.stop_pod(rec.identity.pod_uid, rec.identity.sandbox_id)
            stopped.append(rec.identity)
        return stopped

    def remove_pod(self, pod_uid: str, sandbox_id: str) -> None:
        """Reverse cleanup of the attachment; the pin goes only after verified cleanup."""
        identity = self._identity(pod_uid, sandbox_id)
        with self.owning(identity, f"remove {sandbox_id}") as rec:
            if rec is None:
                self._tombstone(identity, "removed")
                return
            if rec.state is AttachmentState.REMOVED:
                self.release_leftover_pin(rec)
                return
            self.remove(rec)

    def release_leftover_pin(self, rec: AttachmentRecord) -> None:
        """The pin of a Removed attachment, when a crash came between the Removed commit
        (cleanup verified) and the unmount: released now (it kept the sandbox namespace
        alive)."""
        att = attachment_id(rec.identity)
        if rec.state is AttachmentState.REMOVED and self.pins.path(att).exists():
            self.pins.release(att, cleanup_verified=True)
            log.info("event=leftover-pin-released attachment=%s", att)

    def _tombstone(self, identity: AttachmentIdentity, how: str) -> None:
        """A Removed record for a sandbox stopped or removed before any attachment of it
        was recorded (a Pod without our claims, or a RunPodSandbox still on its way, e.g.
        one that outlived its hook deadline): a RunPodSandbox of that sandbox arriving
        later is refused. Synced before the runtime hears the hook succeeded, like every
        record a hook's answer depends on; retention collects it like any Removed
        record."""
        with self.journal.batch() as b:
            b.put_attachment(
                AttachmentRecord(
                    identity,
                    state=AttachmentState.REMOVED,
                    error=f"{TOMBSTONE} sandbox {how} before any attachment was recorded",
                )
            )
        log.info(
            "event=tombstone pod=%s sandbox=%s how=%s", identity.pod_uid, identity.sandbox_id, how
        )

    def remove(self, rec: AttachmentRecord, fence_reason: str = "sandbox removed") -> None:
        """Tear ``rec`` down (fence, Removing, undo in reverse, Removed, pin released),
        owning its sandbox's, claims' and devices' keys (already owned when called from
        :meth:`owning`, or inside a node-wide pass). A fence whose reason begins with
        :data:`ABANDONED` (a Connecting record whose hook died) does not keep a late
        attachment of the same, still live, sandbox away."""
        att_key = self._lock.sandbox(attachment_id(rec.identity))
        reason = f"remove {rec.identity.sandbox_id}"
        with (
            self._lock.hold(reason, [att_key]),
            self._lock.hold(reason, self._lock.claims(c.claim_uid for c in rec.claims)),
        ):
            identity = rec.identity
            pod_uid, sandbox_id = identity.pod_uid, identity.sandbox_id
            att = attachment_id(identity)
            if rec.state is not AttachmentState.REMOVING:
                rec.state = AttachmentState.REMOVING
                self._invalidate(rec, att, fence_reason)
                self.operations.boundary("after-removing")
            self._repin_from_runtime(rec, att)
            undone = self.operations.undo_all(reversed(rec.operations), sync_end=False)
            if not undone.complete:
                with self.journal.batch() as b:  # Removing and what ran, durable now
                    b.put_attachment(rec)
                raise Refusal("E_CLEANUP_INCOMPLETE", f"sandbox {sandbox_id}", retryable=True)
            # synced: also makes the fence, Removing and the last Undone durable — unless
            # every operation undone was boot-volatile (links only): then what Removed says
            # is also what a machine crash makes true (the attachment of that earlier boot is
            # resolved at start), and a killed process keeps the record (issue 15)
            rec.state = AttachmentState.REMOVED
            with self.journal.batch(sync=not undone.boot_volatile) as b:
                b.put_attachment(rec)
                b.delete_pin(att)
            self.operations.boundary("after-removed")
            if self.pins.ref(att) is not None or self.pins.path(att).exists():
                # a live pin, or the bare file a reboot leaves where the mount was
                self.pins.release(att, cleanup_verified=True)
            self.status.submit(self.reporter.phase, att, "Released")
            self._drop_device_status(rec)
            log.info("event=removed pod=%s sandbox=%s", pod_uid, sandbox_id)

    def _repin_from_runtime(self, rec: AttachmentRecord, att: str) -> None:
        """Mount the pin again from the runtime's own mount of the sandbox namespace when the
        pin we recorded as mounted in this boot is no longer a mount.

        Why: an agent whose state directory is not propagated back to the host
        (``nodeAgent.privileged=false``) loses its pin mounts with its container; the undo
        then found no sandbox, read that as a destroyed namespace, and a whole link was
        recorded removed while it stayed inside the live sandbox. The runtime's path,
        recorded at RunPodSandbox, names the namespace until the runtime removes it after
        StopPodSandbox: only when it opens exactly the namespace we pinned (same boot, same
        nsfs dev and inode; a mount keeps its namespace, so the inode cannot have been
        reused) is it pinned again, and the undo reaches the sandbox. Otherwise nothing
        changes: the executors judge a namespace nobody holds any more as before."""
        pin = self.journal.get_pin(att)
        if (
            pin is None
            or pin.state is not PinState.MOUNTED
            or pin.boot_id != self.boot_id()
            or not rec.runtime_netns
            or self.pins.ref(att) is not None
        ):
            return
        try:
            live = identity_of(rec.runtime_netns)
        except OSError:
            return
        if (live.dev, live.inode) != (pin.dev, pin.inode):
            return
        try:
            self.pins.pin(att, rec.runtime_netns)
        except PinError as exc:  # Removing and its holds stay; Remove or the reconcile retries
            raise Refusal(exc.code, str(exc), retryable=True) from exc
        log.info("event=pin-restored attachment=%s netns=%s", att, rec.runtime_netns)

    def _invalidate(self, rec: AttachmentRecord, att: str, reason: str) -> None:
        """Fence the attachment's scope (no run of it can finish afterwards) and record
        Removing, in one batch that is not synced on its own: the first undo's synced commit
        (or the Removed commit) makes it durable before anything is changed, and a crash
        before that leaves the attachment as it was before the stop (issue 15)."""
        with self.journal.batch(sync=False) as b:
            b.put_fence(Fence(f"attachment/{att}", reason))
            b.put_attachment(rec)

    def device_nodes(self, pod_uid: str, sandbox_id: str) -> tuple[DeviceNode, ...]:
        """The device nodes this sandbox's containers get (NRI CreateContainer): every node
        a ``VfioDevice`` or ``RdmaDevice`` grant of its Ready attachment exported, from the
        journal — which the executors wrote from kernel facts, never from the Pod's or a
        tenant's input."""
        identity = self._identity(pod_uid, sandbox_id)
        with self._lock.hold(
            f"devices {sandbox_id}", [self._lock.sandbox(attachment_id(identity))]
        ):
            rec = self.journal.get_attachment(identity)
            if rec is None or rec.state is not AttachmentState.READY:
                return ()
            nodes: list[DeviceNode] = []
            for op in rec.operations:
                record = self.journal.load_operation(op)
                for handles in (record.result if record is not None else {}).values():
                    for h in handles:
                        if h.type in _GRANTED_NODE_TYPES and "deviceNodes" in h.observations:
                            nodes.extend(decode(str(h.observations.get("deviceNodes", ""))))
            return tuple(dict.fromkeys(nodes))

    def attachment(self, pod_uid: str, sandbox_id: str) -> AttachmentRecord | None:
        identity = self._identity(pod_uid, sandbox_id)
        with self._lock.hold(f"read {sandbox_id}", [self._lock.sandbox(attachment_id(identity))]):
            return self.journal.get_attachment(identity)

    @contextmanager
    def owning(
        self, identity: AttachmentIdentity, reason: str
    ) -> Iterator[AttachmentRecord | None]:
        """Own the sandbox's key, read its record, then own the keys of the claims it
        names and of their devices; yields the record (None when there is none)."""
        with self._lock.hold(reason, [self._lock.sandbox(attachment_id(identity))]):
            rec = self.journal.get_attachment(identity)
            claims = self._lock.claims(c.claim_uid for c in rec.claims) if rec else []
            with self._lock.hold(reason, claims):
                yield rec


def _connect_operation(att: str, claim_uid: str, step: str, incarnation: int) -> str:
    """The operation id of one step's connect in one attachment (and incarnation)."""
    base = f"conn-{att[4:20]}-{short_digest(claim_uid)[:8]}-{step}"
    return f"{base}-l{incarnation}" if incarnation else base


def _names_namespace(path: str, dev: int, inode: int) -> bool:
    """Whether ``path`` still opens the network namespace (dev, inode)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    except OSError:
        return True  # unreadable is no proof that it is gone
    return (st.st_dev, st.st_ino) == (dev, inode)


def _step_configs(
    revision: Mapping[str, Any], verified: VerifiedClaim
) -> list[tuple[str, Mapping[str, Any]]]:
    """The revision's steps in execution order with the configuration each connects with (a
    root's with the claim's workload parameters)."""
    spec = revision["spec"]
    steps = {str(s["id"]): s for s in spec["normalizedSpec"]["steps"]}
    roots = {root.step: root for root in verified.roots}
    return [
        (str(sid), roots[sid].config if sid in roots else steps[sid].get("config") or {})
        for sid in spec["order"]
    ]
