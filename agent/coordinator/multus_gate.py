"""The container gate in Multus automatic mode: no container starts before Multus attached
the managed interface (design §6.8, §7.4).

In this mode the node does not create the interface: Multus runs the delegate at sandbox
creation from the shadow the preparation bound. A Ready attachment therefore proves only
that the shadow and the Pod's selection exist; :class:`MultusGate` adds what the container
needs — Multus' ``k8s.v1.cni.cncf.io/network-status`` on the Pod shows each shadow of the
sandbox's claims attached as its managed interface
(:func:`~dmn.api.multus.network_status.attached`).

Which shadows: the journal's, never the Pod's annotations — the exports of the claims'
prepare operations (their ``NetworkAttachment/v1`` handles: namespace, name, interface),
so a tenant who edits the selection cannot make the gate skip one. A sandbox without such
exports passes with no read at all. The Pod is read from the informer cache first, then
from the API server, and re-read (sleeping between reads) for at most :data:`MAX_HOLD`
seconds and never past the hook's deadline; then the container is refused with
``E_MULTUS_NOT_ATTACHED`` (retryable: the runtime asks again, as it does for any refused
CreateContainer). Never under the node lock.

Attached is not enough: Multus runs a shadow as it finds it at ADD, and whoever may write
NetworkAttachmentDefinitions in the Pod's namespace could have changed the shadow's
``device`` or ``master`` between NodePrepare and the sandbox. So once attached, each shadow
is read from the API server and must still be the one the journal recorded: its UID, not
being deleted (``E_MULTUS_SHADOW_DELETING``), its ``spec.config`` with the frozen SHA-256,
and ``metadata.generation`` 1 — a custom resource without a status subresource counts every
change outside its metadata, so an edit that was put back before this read is seen too
(``E_MULTUS_SHADOW_CONFLICT``; neither is retryable, the Pod never starts and its deletion
releases the claim). An API server that does not answer refuses retryably.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dmn.agent.coordinator.node_objects import NodeObjects
from dmn.agent.coordinator.verify import Refusal
from dmn.agent.journal.records import AttachmentRecord
from dmn.agent.journal.store import JournalStore
from dmn.agent.nri.handler import HookDeadline
from dmn.api.cluster import ApiFailure, Cluster, NotFound
from dmn.api.cluster import resources as r
from dmn.api.multus.errors import NOT_ATTACHED, SHADOW_CONFLICT, SHADOW_DELETING
from dmn.api.multus.network_status import attached
from dmn.api.multus.template import TemplateRef
from dmn.vocabulary.terms import HandleType

log = logging.getLogger("dmn.agent.coordinator.coordinator")

#: Seconds between two reads of the Pod while waiting.
INTERVAL = 0.2
#: Share of the hook's time left unused, so the refusal reaches the runtime in time.
MARGIN = 0.1
#: The longest a hook waits for the report. Multus writes it inside its ADD, before the
#: runtime creates any container, so a wait covers only the API server's and the cache's
#: lag; a Pod whose report never comes must not hold one of the agent's few hook workers
#: for a whole deadline (other Pods' hooks would queue behind it): the runtime asks again.
MAX_HOLD = 5.0


#: The generation of a custom resource nobody changed since its creation.
CREATED_GENERATION = 1


@dataclass(frozen=True)
class ManagedShadow:
    """A shadow a claim of the sandbox prepared, as the journal recorded it."""

    ref: TemplateRef
    interface: str
    uid: str
    digest: str


def managed_interfaces(journal: JournalStore, att: AttachmentRecord) -> list[ManagedShadow]:
    """Each shadow the attachment's claims prepared: name, interface, UID, frozen digest."""
    out: list[ManagedShadow] = []
    for claim in att.claims:
        prep = journal.get_preparation(claim.claim_uid, claim.fingerprint)
        for op in prep.operations if prep is not None else ():
            rec = journal.load_operation(op)
            for handles in (rec.result if rec is not None else {}).values():
                for h in handles:
                    if h.type is not HandleType.NETWORK_ATTACHMENT:
                        continue
                    o = h.observations
                    out.append(
                        ManagedShadow(
                            TemplateRef(str(o["namespace"]), str(o["name"])),
                            str(o["interface"]),
                            str(o.get("uid", "")),
                            str(o.get("configSHA256", "")),
                        )
                    )
    return out


def shadow_problem(live: Mapping[str, Any], shadow: ManagedShadow) -> tuple[str, str] | None:
    """(reason, why) when ``live`` is not the shadow the journal recorded, else None."""
    meta = live.get("metadata") or {}
    if meta.get("uid") != shadow.uid:
        return SHADOW_CONFLICT, f"its UID {meta.get('uid')} is not the recorded {shadow.uid}"
    if meta.get("deletionTimestamp"):
        return SHADOW_DELETING, "it is being deleted"
    config = (live.get("spec") or {}).get("config")
    digest = hashlib.sha256(config.encode()).hexdigest() if isinstance(config, str) else ""
    if digest != shadow.digest:
        return SHADOW_CONFLICT, "its configuration is not the one the node froze"
    if meta.get("generation") != CREATED_GENERATION:
        return SHADOW_CONFLICT, (
            f"it was changed since the node created it (generation {meta.get('generation')})"
        )
    return None


class MultusGate:
    def __init__(
        self,
        cluster: Cluster,
        journal: JournalStore,
        objects: NodeObjects | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.cluster = cluster
        self.journal = journal
        self.objects = objects
        self._sleep = sleep

    def _missing(self, pod: Mapping[str, Any] | None, wanted: list[ManagedShadow]) -> list[str]:
        annotations = ((pod or {}).get("metadata") or {}).get("annotations") or {}
        return [
            f"{w.ref.namespace}/{w.ref.name} as {w.interface}"
            for w in wanted
            if not attached(annotations, w.ref, w.interface)
        ]

    def _unchanged(self, namespace: str, pod_name: str, wanted: list[ManagedShadow]) -> None:
        """Refuse unless every shadow is still the recorded one (module docstring)."""
        for shadow in wanted:
            ns, name = shadow.ref.namespace, shadow.ref.name
            field = f"networkattachmentdefinitions/{ns}/{name}"
            try:
                live = self.cluster.get(r.NETWORK_ATTACHMENT_DEFINITIONS, name, ns)
            except NotFound:
                raise Refusal(
                    SHADOW_CONFLICT,
                    f"shadow {ns}/{name} of Pod {namespace}/{pod_name} is gone; the container "
                    "is not started",
                    field,
                ) from None
            except ApiFailure as exc:
                raise Refusal(
                    NOT_ATTACHED,
                    f"shadow {ns}/{name} could not be read ({exc}); the container is held",
                    field,
                    retryable=True,
                ) from None
            problem = shadow_problem(live, shadow)
            if problem is not None:
                reason, why = problem
                log.warning(
                    "event=multus-gate-shadow-changed pod=%s/%s shadow=%s/%s reason=%s",
                    namespace,
                    pod_name,
                    ns,
                    name,
                    reason,
                )
                raise Refusal(
                    reason,
                    f"shadow {ns}/{name} of Pod {namespace}/{pod_name}: {why}; the container "
                    "is not started (delete the Pod)",
                    field,
                )

    def _fresh(self, namespace: str, pod_name: str, pod_uid: str) -> dict[str, Any] | None:
        try:
            pod = self.cluster.get(r.PODS, pod_name, namespace)
        except NotFound:
            return None
        except ApiFailure as exc:
            log.warning("event=multus-gate-read-failed pod=%s error=%s", pod_uid, exc)
            return None
        return pod if (pod.get("metadata") or {}).get("uid") == pod_uid else None

    def hold(
        self,
        namespace: str,
        pod_name: str,
        pod_uid: str,
        att: AttachmentRecord,
        deadline: HookDeadline | None,
    ) -> None:
        """Return once every managed interface of the Ready attachment ``att`` is attached;
        refuse (:class:`Refusal`, ``E_MULTUS_NOT_ATTACHED``) when the deadline draws near
        first (at once without a deadline)."""
        wanted = managed_interfaces(self.journal, att)
        if not wanted:
            return
        cached = self.objects.pod(namespace, pod_name, pod_uid) if self.objects else None
        if cached is not None and not self._missing(cached, wanted):
            self._unchanged(namespace, pod_name, wanted)
            return
        budget = 0.0
        if deadline is not None:
            budget = min(deadline.remaining() * (1 - MARGIN), MAX_HOLD)
        end = time.monotonic() + budget
        while True:
            missing = self._missing(self._fresh(namespace, pod_name, pod_uid), wanted)
            if not missing:
                self._unchanged(namespace, pod_name, wanted)
                return
            if time.monotonic() + INTERVAL >= end:
                raise Refusal(
                    NOT_ATTACHED,
                    f"Multus' network-status of Pod {namespace}/{pod_name} does not show "
                    f"{', '.join(missing)}; the container is held",
                    "metadata.annotations[k8s.v1.cni.cncf.io/network-status]",
                    retryable=True,
                )
            self._sleep(INTERVAL)
