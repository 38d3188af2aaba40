"""The node coordinator's state machine (DESIGN §5, seed 000 §10, §11.4–§11.5).

One :class:`Coordinator` per node owns the journal (single writer), the :class:`Runner`
over the real executors, and the namespace pins. Every public method takes one
coordinator lock, so kubelet gRPC threads and NRI hook threads serialise here (the runner
additionally holds the node mutation lock per operation).

* :meth:`prepare` (NodePrepare): read the claim, verify its allocation against the
  revision and this node's personas (:mod:`.verify`) — refusing before any mutation —
  then commit Preparing, run every root's ``prepare`` program in the revision's order,
  commit Prepared. The same claim UID and allocation fingerprint returns the recorded
  result; a different live allocation for a prepared claim is ``E_ALLOCATION_CHANGED``.
* :meth:`run_pod` (RunPodSandbox): the Pod verified (runtime UID, bound to this node, not
  hostNetwork), its claims reserved for it alone, each Prepared with its current
  fingerprint and attached to no other live sandbox; pin the runtime's netns (refusing
  the host namespace), commit Connecting, run ``connect`` of every step in topological
  order (Operation steps take earlier steps' exports), commit Ready. A failure cleans up
  what ran, releases the pin and refuses the hook.
* :meth:`gate` (Create/StartContainer): a Pod with our claims starts containers only in
  the exact sandbox whose attachment is Ready.
* :meth:`stop_pod` fences the attachment (no run of it can finish afterwards) and records
  Removing; :meth:`remove_pod` undoes the connect operations in reverse from the journal,
  then releases the pin; :meth:`unprepare` is retryable while an attachment of the claim
  remains, else undoes the prepare operations and records Released.
* :meth:`start` runs :meth:`Runner.recover` before anything else.

Also: NRI Synchronize removes attachments of this boot whose sandbox the runtime no longer
has; NetworkAttachmentStatus objects report each attachment (:mod:`.attachment_status`).

Not done here (said plainly): CDI/device-node injection (kernel netdevs need none;
VFIO/RDMA personas are refused), reboot reconciliation of attachments of an older boot,
preflight of the whole connect plan against live links before the first connect effect,
plugins other than this agent's builtin copies, and a periodic retry of cleanups that
failed (RemovePodSandbox errors are retried only at the next Synchronize).
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dmn.agent.coordinator.attachment_status import (
    AttachmentReporter,
    ClaimBinding,
    ClaimDeviceStatus,
    device_entries,
    status_outputs,
)
from dmn.agent.coordinator.handles import (
    DeviceView,
    allocation_port,
    kernel_handle,
    operation_inputs,
)
from dmn.agent.coordinator.pod_claims import pod_claims
from dmn.agent.coordinator.verify import (
    Refusal,
    VerifiedClaim,
    driver_results,
    fingerprint,
    verify_allocation,
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
    PreparedDevice,
    Reservation,
    RevisionRef,
    ShareRef,
)
from dmn.agent.journal.store import JournalBatch, JournalStore, ReservationConflict
from dmn.agent.netns.pins import NamespacePins, PinError
from dmn.api.cluster import ApiFailure, Cluster, NotFound
from dmn.api.cluster import resources as r
from dmn.api.identity import DRIVER
from dmn.engine.binder import Call, bind_program
from dmn.engine.bound import BoundProgram
from dmn.engine.runner import BoundaryHook, Runner, RunRefused, RunResult
from dmn.interpreter.loader import Plugin, load_builtin_plugins
from dmn.opcodes.executor import Executor
from dmn.opcodes.executor_table import default_executors
from dmn.opcodes.linux.netns import (
    NamespaceRef,
    current_boot_id,
    identity_of,
)
from dmn.vocabulary.handles import Handle, Scope
from dmn.vocabulary.terms import ScopeKind

log = logging.getLogger(__name__)

LIVE_ATTACHMENT = (AttachmentState.CONNECTING, AttachmentState.READY, AttachmentState.REMOVING)


@dataclass(frozen=True)
class NodeConfig:
    node_name: str
    node_uid: str
    state_dir: Path
    host_netns: str = "/proc/1/ns/net"
    driver: str = DRIVER
    pool: str = ""  # default: the node name (one pool per node)

    @property
    def pool_name(self) -> str:
        return self.pool or self.node_name


def _short(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:16]


class Coordinator:
    def __init__(
        self,
        config: NodeConfig,
        cluster: Cluster,
        devices: DeviceView,
        *,
        executors: Mapping[str, Executor] | None = None,
        plugins: Mapping[str, Plugin] | None = None,
        boot_id: Callable[[], str] = current_boot_id,
        boundary: BoundaryHook | None = None,
    ) -> None:
        self.config = config
        self.cluster = cluster
        self.devices = devices
        self.plugins = dict(plugins) if plugins is not None else load_builtin_plugins()
        self.boot_id = boot_id
        # warm: each pinned sandbox's fd and netlink sockets stay open until its pin is
        # released (every call below holds self._lock, which the shared sockets need)
        self.pins = NamespacePins(config.state_dir, host_netns=config.host_netns, warm=True)
        self.journal = JournalStore.open(config.state_dir)
        self.runner = Runner(
            self.journal,
            executors if executors is not None else default_executors(),
            env_factory=lambda op: self.pins.link_environment(),
            boundary=boundary,
        )
        self.reporter = AttachmentReporter(cluster, config.node_name)
        self.claim_status = ClaimDeviceStatus(cluster)
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Recover every operation a crash left unfinished, before serving anything."""
        with self._lock:
            for res in self.runner.recover():
                log.info("event=recovered operation=%s state=%s", res.operation_id, res.state)

    def close(self) -> None:
        with self._lock:
            self.journal.close()
            if self.pins.warm is not None:
                self.pins.warm.close()

    # ------------------------------------------------------------------ NodePrepare

    def _claim(self, namespace: str, name: str, uid: str) -> dict[str, Any]:
        try:
            claim = self.cluster.get(r.RESOURCE_CLAIMS, name, namespace)
        except NotFound as exc:
            raise Refusal("E_CLAIM_NOT_FOUND", f"claim {namespace}/{name} not found") from exc
        except ApiFailure as exc:
            raise Refusal(
                "E_API", f"reading claim {namespace}/{name}: {exc}", retryable=True
            ) from exc
        if (claim.get("metadata") or {}).get("uid") != uid:
            raise Refusal(
                "E_CLAIM_UID", f"claim {namespace}/{name} is not uid {uid}", "metadata.uid"
            )
        return claim

    def _verify(
        self, claim: Mapping[str, Any], accept_superseded: bool = False
    ) -> VerifiedClaim | None:
        uid = str(claim["metadata"]["uid"])
        results = driver_results(claim, self.config.driver)
        if not results:
            return None
        name = results[0].root.revision_ref.name
        try:
            revision = self.cluster.get(r.NETWORK_TOPOLOGY_REVISIONS, name)
        except NotFound as exc:
            raise Refusal(
                "E_REVISION_NOT_FOUND", f"revision {name} not found", "revisionRef"
            ) from exc
        except ApiFailure as exc:
            raise Refusal("E_API", f"reading revision {name}: {exc}", retryable=True) from exc
        return verify_allocation(
            uid,
            results,
            revision,
            pool=self.config.pool_name,
            personas=self.devices.personas(),
            plugins=self.plugins,
            accept_superseded=accept_superseded,
        )

    def prepare(self, namespace: str, name: str, uid: str) -> list[PreparedDevice]:
        """NodePrepare of one claim; raises :class:`Refusal` (nothing changed) or returns
        the prepared devices."""
        with self._lock:
            claim = self._claim(namespace, name, uid)
            results = driver_results(claim, self.config.driver)
            if not results:
                return []
            fp = fingerprint(uid, results)
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
            verified = self._verify(claim)
            if verified is None:
                return []
            return self._prepare(verified)

    def _bind(self, plugin: Plugin, hook: str, call: Call) -> BoundProgram:
        bound = bind_program(plugin, hook, call)
        if not isinstance(bound, BoundProgram):
            first = bound[0]
            raise Refusal(str(first.code.value), f"{plugin.name} {hook}: {first.message}")
        return bound

    def _holder(self, v: VerifiedClaim) -> str:
        return f"prep/{v.claim_uid}/{v.fingerprint}"

    def _check_sharing(self, v: VerifiedClaim) -> None:
        """Exclusive roots and shares of one parent never mix across claims (seed 000 §9.2
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

    def _prepare(self, v: VerifiedClaim) -> list[PreparedDevice]:
        ops = [f"prep-{_short(v.claim_uid + v.fingerprint)}-{root.step}" for root in v.roots]
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
                handle = kernel_handle(env, self.devices, root, v.claim_uid)
                port = allocation_port(root.plugin, handle)
                call = Call(config=root.config, operation_id=op, allocation={port: (handle,)})
                programs.append(self._bind(root.plugin, "prepare", call))
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
        done: list[str] = []
        scope = f"claim/{v.claim_uid}"
        try:
            for op, root, program in zip(ops, v.roots, programs, strict=True):
                self._run_or_refuse(
                    op,
                    scope,
                    program,
                    {"revision": v.revision_digest, "allocation": v.fingerprint},
                    done,
                    failed=("E_PREPARE_FAILED", f"root {root.step}"),
                )
        except (Refusal, RunRefused, PinError) as exc:
            cleaned = self._undo(reversed(done))
            rec.error = str(exc)
            if cleaned:  # an uncertain effect keeps the claim's holds (seed 000 §10.1)
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
        log.info("event=prepared claim=%s roots=%d", v.claim_uid, len(v.roots))
        return devices

    def _run_or_refuse(
        self,
        op: str,
        scope: str,
        program: BoundProgram,
        digests: Mapping[str, str],
        done: list[str],
        *,
        failed: tuple[str, str],
        attachment: str | None = None,
    ) -> RunResult:
        """Run one bound program in a fresh link environment and record ``op`` in ``done``
        (so a later failure undoes it too); a result that is not ok becomes a Refusal with
        the runner's code, else ``failed[0]``, prefixed by ``failed[1]``."""
        env = self.pins.link_environment(attachment)
        try:
            result = self.runner.run(op, scope, program, digests=digests, env=env)
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

    def _undo(self, operations: Any) -> bool:
        """Cleanup operations in the given order; True when every one is Undone."""
        ok = True
        for op in operations:
            res = self.runner.cleanup(op)
            if res.state.value != "Undone":
                ok = False
                log.error("event=cleanup-incomplete operation=%s state=%s", op, res.state)
        return ok

    # ------------------------------------------------------------------ NodeUnprepare

    def unprepare(self, uid: str) -> None:
        """Release the claim's preparation; retryable :class:`Refusal` while attached."""
        with self._lock:
            for att in self.journal.attachments():
                if att.state in LIVE_ATTACHMENT and any(c.claim_uid == uid for c in att.claims):
                    raise Refusal(
                        "E_ATTACHED",
                        f"claim {uid} is still attached to sandbox {att.identity.sandbox_id}",
                        retryable=True,
                    )
            for rec in self.journal.preparations(uid):
                if rec.state is PreparationState.RELEASED:
                    continue
                rec.state = PreparationState.UNPREPARING
                with self.journal.batch() as b:
                    b.put_preparation(rec)
                if not self._undo(reversed(rec.operations)):
                    raise Refusal("E_CLEANUP_INCOMPLETE", f"claim {uid}", retryable=True)
                rec.state = PreparationState.RELEASED
                with self.journal.batch() as b:
                    b.put_preparation(rec)
                    self._release_holds(b, uid, rec)
                log.info("event=unprepared claim=%s", uid)

    # ------------------------------------------------------------------ RunPodSandbox

    def _pod_claims(self, namespace: str, pod_name: str, pod_uid: str) -> list[dict[str, Any]]:
        return pod_claims(
            self.cluster, self.config.driver, self.config.node_name, namespace, pod_name, pod_uid
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
    ) -> bool:
        """Attach the Pod's prepared claims to the sandbox; False: no claims of ours."""
        with self._lock:
            claims = self._pod_claims(namespace, pod_name, pod_uid)
            if not claims:
                return False
            identity = self._identity(pod_uid, sandbox_id)
            existing = self.journal.get_attachment(identity)
            if existing is not None and existing.state is AttachmentState.READY:
                return True
            if existing is not None and existing.state is not AttachmentState.CONNECTING:
                raise Refusal("E_ATTACHMENT_STATE", f"sandbox {sandbox_id} is {existing.state}")
            plan: list[tuple[PreparationRecord, VerifiedClaim, dict[str, Any]]] = []
            for c in claims:
                uid = str(c["metadata"]["uid"])
                fp = fingerprint(uid, driver_results(c, self.config.driver))
                prep = self.journal.get_preparation(uid, fp)
                if prep is None or prep.state is not PreparationState.PREPARED:
                    raise Refusal("E_NOT_PREPARED", f"claim {uid} is not prepared on this node")
                verified = self._verify(c, accept_superseded=True)
                if verified is None:
                    raise Refusal("E_NOT_PREPARED", f"claim {uid} has no results of ours")
                if verified.revision_digest != prep.revision.digest:
                    raise Refusal(
                        "E_REVISION_DIGEST", f"claim {uid} was prepared under another revision"
                    )
                revision = self.cluster.get(r.NETWORK_TOPOLOGY_REVISIONS, verified.revision)
                plan.append((prep, verified, revision))
            wanted_claims = {p.claim_uid for p, _, _ in plan}
            for other in self.journal.attachments():
                if other.identity == identity or other.state is AttachmentState.REMOVED:
                    continue
                if wanted_claims & {c.claim_uid for c in other.claims}:
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
                f"conn-{att[4:20]}-{_short(prep.claim_uid)[:8]}-{step}"
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
            )
            pin = NamespacePin(
                att, str(self.pins.path(att)), wanted.dev, wanted.inode, identity.boot_id
            )
            # the intent is durable before the mount exists: a crash leaves a record that
            # proves the pin is ours
            with self.journal.batch() as b:
                b.put_attachment(rec)
                b.put_pin(pin)
            self.reporter.created(
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
                self.reporter.phase(att, "Released", error=f"{exc.code}: {exc}")
                raise Refusal(exc.code, str(exc)) from exc
            # not synced on its own: durable with the runner's first commit below; a crash
            # before that leaves the pin's intent record, which already proves it ours
            with self.journal.batch(sync=False) as b:
                b.put_pin(replace(pin, state=PinState.MOUNTED))
            done: list[str] = []
            outputs: list[dict[str, Any]] = []
            device_status: list[list[dict[str, Any]]] = []
            try:
                for prep, verified, revision in plan:
                    exports = self._connect(att, ref, prep, verified, revision, done)
                    outputs.extend(status_outputs(exports, verified))
                    device_status.append(device_entries(self.config.driver, verified, exports))
            except (Refusal, RunRefused, PinError) as exc:
                cleaned = self._undo(reversed(done))
                rec.state, rec.error = AttachmentState.REMOVED, str(exc)
                if not cleaned:
                    rec.state = AttachmentState.REMOVING
                with self.journal.batch() as b:
                    b.put_attachment(rec)
                    if cleaned:
                        b.delete_pin(att)
                if cleaned:
                    self.pins.release(att, cleanup_verified=True)
                self.reporter.phase(
                    att, "Released" if cleaned else "CleanupPending", error=str(exc)
                )
                if isinstance(exc, Refusal):
                    raise
                raise Refusal(str(getattr(exc, "code", "E_CONNECT_FAILED")), str(exc)) from exc
            rec.state = AttachmentState.READY
            with self.journal.batch() as b:
                b.put_attachment(rec)
            self.reporter.phase(att, "Ready", outputs=outputs)
            for claim, entries in zip(rec.claims, device_status, strict=True):
                self.claim_status.write(claim.namespace, claim.name, entries)
            log.info("event=ready pod=%s sandbox=%s operations=%d", pod_uid, sandbox_id, len(ops))
            return True

    def _drop_device_status(self, rec: AttachmentRecord) -> None:
        for c in rec.claims:
            if not c.name:  # migrated from a version-1 record that did not name the claim
                continue
            prep = self.journal.get_preparation(c.claim_uid, c.fingerprint)
            if prep is None:
                continue
            drop = [
                {
                    "driver": self.config.driver,
                    "pool": d.pool,
                    "device": d.device,
                    "shareID": d.share_id,
                }
                for d in prep.devices
            ]
            self.claim_status.write(c.namespace, c.name, [], drop)

    def _connect(
        self,
        att: str,
        ref: NamespaceRef,
        prep: PreparationRecord,
        verified: VerifiedClaim,
        revision: Mapping[str, Any],
        done: list[str],
    ) -> dict[str, Mapping[str, tuple[Handle, ...]]]:
        spec = revision["spec"]
        steps = {str(s["id"]): s for s in spec["normalizedSpec"]["steps"]}
        roots = {root.step: root for root in verified.roots}
        prepared_ops = dict(
            zip((root.step for root in verified.roots), prep.operations, strict=True)
        )
        exports: dict[str, Mapping[str, tuple[Handle, ...]]] = {}
        sandbox = Scope(ScopeKind.SANDBOX, ref.identity)
        for step_id in spec["order"]:
            step = steps[step_id]
            op = f"conn-{att[4:20]}-{_short(prep.claim_uid)[:8]}-{step_id}"
            if step_id in roots:
                plugin = roots[step_id].plugin
                prepared_rec = self.journal.load_operation(prepared_ops[step_id])
                if prepared_rec is None:
                    raise Refusal("E_NOT_PREPARED", f"root {step_id} has no prepare record")
                call = Call(
                    config=dict(step.get("config") or {}),
                    operation_id=op,
                    prepared=dict(prepared_rec.result),
                    sandbox=sandbox,
                )
            else:
                name = str(step["pluginRef"]["name"])
                plugin = self.plugins[name]
                call = Call(
                    config=dict(step.get("config") or {}),
                    operation_id=op,
                    inputs=operation_inputs(step.get("inputs") or {}, exports),
                    sandbox=sandbox,
                )
            result = self._run_or_refuse(
                op,
                f"attachment/{att}",
                self._bind(plugin, "connect", call),
                {"revision": verified.revision_digest},
                done,
                failed=("E_CONNECT_FAILED", f"step {step_id}"),
                attachment=att,
            )
            exports[step_id] = result.exports
        return exports

    # ------------------------------------------------------------------ container gate

    def gate(self, namespace: str, pod_name: str, pod_uid: str, sandbox_id: str) -> None:
        """Refuse (:class:`Refusal`) unless this exact sandbox is Ready, for Pods with our
        claims; a Pod without claims of ours passes."""
        with self._lock:
            identity = self._identity(pod_uid, sandbox_id)
            att = self.journal.get_attachment(identity)
            if att is not None and att.state is AttachmentState.READY:
                if self.pins.ref(attachment_id(identity)) is None:
                    raise Refusal("E_PIN_MISSING", f"sandbox {sandbox_id} lost its namespace pin")
                for c in att.claims:
                    prep = self.journal.get_preparation(c.claim_uid, c.fingerprint)
                    if prep is None or prep.state is not PreparationState.PREPARED:
                        raise Refusal("E_NOT_READY", f"claim {c.claim_uid} is not prepared")
                return
            if att is not None or self._pod_claims(namespace, pod_name, pod_uid):
                state = att.state.value if att is not None else "not attached"
                raise Refusal("E_NOT_READY", f"sandbox {sandbox_id} is {state}")

    # ------------------------------------------------------------------ Stop / Remove

    def stop_pod(self, pod_uid: str, sandbox_id: str) -> None:
        """Durably invalidate Ready and fence the attachment's scope."""
        with self._lock:
            identity = self._identity(pod_uid, sandbox_id)
            rec = self.journal.get_attachment(identity)
            if rec is None or rec.state is AttachmentState.REMOVED:
                return
            att = attachment_id(identity)
            self.runner.fence(f"attachment/{att}", "sandbox stopped")
            rec.state = AttachmentState.REMOVING
            with self.journal.batch() as b:
                b.put_attachment(rec)
            self.reporter.phase(att, "CleanupPending")
            log.info("event=invalidated pod=%s sandbox=%s", pod_uid, sandbox_id)

    def remove_pod(self, pod_uid: str, sandbox_id: str) -> None:
        """Reverse cleanup of the attachment; the pin goes only after verified cleanup."""
        with self._lock:
            rec = self.journal.get_attachment(self._identity(pod_uid, sandbox_id))
            if rec is None or rec.state is AttachmentState.REMOVED:
                return
            self._remove(rec)

    def _remove(self, rec: AttachmentRecord) -> None:
        with self._lock:
            identity = rec.identity
            pod_uid, sandbox_id = identity.pod_uid, identity.sandbox_id
            att = attachment_id(identity)
            if rec.state is not AttachmentState.REMOVING:
                self.runner.fence(f"attachment/{att}", "sandbox removed")
                rec.state = AttachmentState.REMOVING
                with self.journal.batch() as b:
                    b.put_attachment(rec)
            if not self._undo(reversed(rec.operations)):
                raise Refusal("E_CLEANUP_INCOMPLETE", f"sandbox {sandbox_id}", retryable=True)
            rec.state = AttachmentState.REMOVED
            with self.journal.batch() as b:
                b.put_attachment(rec)
                b.delete_pin(att)
            if self.pins.ref(att) is not None:
                self.pins.release(att, cleanup_verified=True)
            self.reporter.phase(att, "Released")
            self._drop_device_status(rec)
            log.info("event=removed pod=%s sandbox=%s", pod_uid, sandbox_id)

    def synchronize(self, sandboxes: Sequence[tuple[str, str]]) -> list[AttachmentIdentity]:
        """Reconcile with the runtime's full sandbox list (NRI Synchronize, seed 000 §11.5).

        An attachment of this node and boot whose (Pod UID, sandbox id) the runtime no
        longer has is removed from the journal's record alone, through its pin; one that
        cannot be cleaned up stays Removing for the next attempt. Attachments of an
        earlier boot are left alone: their pins are gone with the reboot, and undoing a
        connect without its pinned sandbox is refused and quarantined by the runner (seen
        in a simulated reboot), so boot reconciliation needs executor support first.
        Returns what was removed.
        """
        live = set(sandboxes)
        removed: list[AttachmentIdentity] = []
        with self._lock:
            boot = self.boot_id()
            for rec in self.journal.attachments():
                ident = rec.identity
                if rec.state is AttachmentState.REMOVED or ident.node_uid != self.config.node_uid:
                    continue
                if ident.boot_id != boot or (ident.pod_uid, ident.sandbox_id) in live:
                    continue
                try:
                    self._remove(rec)
                    removed.append(ident)
                except (Refusal, RunRefused, PinError) as exc:
                    log.error(
                        "event=sync-cleanup-failed sandbox=%s error=%s", ident.sandbox_id, exc
                    )
        if removed:
            log.info("event=synchronized removed=%d", len(removed))
        return removed

    def attachment(self, pod_uid: str, sandbox_id: str) -> AttachmentRecord | None:
        with self._lock:
            return self.journal.get_attachment(self._identity(pod_uid, sandbox_id))
