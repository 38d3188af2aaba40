"""The kubelet ``DraHandler`` and the NRI ``NriHandler`` as thin adapters over the services.

Each claim of a kubelet batch gets its own result: a :class:`Refusal` becomes that claim's
``error`` (reason code first, so the kubelet event names it). An NRI hook refused by the
services raises :class:`HookRefused`, which fails the runtime operation. Containers of
Pods without claims of ours pass untouched. A journal that failed a commit answers every
request with its reason code (E_JOURNAL_WRITE, then E_JOURNAL_FAILED): nothing more is
mutated, and the agent exits so that a restart runs recovery (see
:class:`~dmn.agent.coordinator.node_agent.NodeAgent`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from dmn.agent.coordinator.preparation import PreparationService
from dmn.agent.coordinator.reconcile import ReconcileLoop
from dmn.agent.coordinator.sandbox_attachment import LateAttach, SandboxAttachmentService
from dmn.agent.coordinator.verify import Refusal
from dmn.agent.journal.store import JournalError
from dmn.agent.kubelet.handler import (
    ClaimRef,
    PreparedDevice,
    PrepareResult,
    UnprepareResult,
)
from dmn.agent.node_events import NodeEventReporter, claim_object, pod_object, reason_of
from dmn.agent.nri.handler import (
    Container,
    ContainerAdjustment,
    DeviceNode,
    HookRefused,
    HookTimeout,
    PodSandbox,
    current_deadline,
)

log = logging.getLogger(__name__)


class DraAdapter:
    """Implements :class:`dmn.agent.kubelet.handler.DraHandler`.

    Every refused or failed claim is reported (metric + Event on the ResourceClaim)."""

    def __init__(
        self,
        preparation: PreparationService,
        reporter: NodeEventReporter | None = None,
        attachments: SandboxAttachmentService | None = None,
    ) -> None:
        self.preparation = preparation
        self.reporter = reporter or NodeEventReporter(None, "")
        # NodeUnprepare first tears down attachments whose sandbox the runtime stopped
        # without telling us (SandboxAttachmentService.stop_released)
        self.attachments = attachments

    def _report(self, request: str, claim: ClaimRef, error: str) -> None:
        obj = claim_object(claim.namespace, claim.name, claim.uid)
        self.reporter.refused(request, reason_of(error), error, obj)

    def prepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, PrepareResult]:
        out: dict[str, PrepareResult] = {}
        for c in claims:
            try:
                devices = self.preparation.prepare(c.namespace, c.name, c.uid)
            except Refusal as exc:
                log.warning("event=prepare-refused claim=%s code=%s", c.uid, exc.code)
                out[c.uid] = PrepareResult(error=str(exc))
                self._report("NodePrepareResources", c, str(exc))
                continue
            except JournalError as exc:
                log.error("event=prepare-journal-failed claim=%s code=%s", c.uid, exc.code)
                out[c.uid] = PrepareResult(error=f"{exc.code}: {exc}")
                self._report("NodePrepareResources", c, out[c.uid].error or "")
                continue
            except Exception as exc:  # one claim's failure never fails the batch
                log.exception("event=prepare-failed claim=%s", c.uid)
                out[c.uid] = PrepareResult(error=f"E_INTERNAL: {type(exc).__name__}: {exc}")
                self._report("NodePrepareResources", c, out[c.uid].error or "")
                continue
            # KEP-5304: each request's metadata CDI device rides on its first device
            metadata = self.preparation.metadata_ids(c.uid, devices)
            prepared = []
            for d in devices:
                request = d.request.split("/", 1)[0]
                ids = (metadata.pop(request),) if request in metadata else ()
                prepared.append(
                    PreparedDevice(
                        pool_name=d.pool,
                        device_name=d.device,
                        request_names=(d.request,),
                        cdi_device_ids=ids,
                        share_id=d.share_id or None,
                    )
                )
            out[c.uid] = PrepareResult(devices=tuple(prepared))
        return out

    def unprepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, UnprepareResult]:
        out: dict[str, UnprepareResult] = {}
        for c in claims:
            try:
                if self.attachments is not None:
                    self.attachments.stop_released(c.uid)
                self.preparation.unprepare(c.uid, c.namespace, c.name)
                out[c.uid] = UnprepareResult()
            except Refusal as exc:
                log.warning("event=unprepare-refused claim=%s code=%s", c.uid, exc.code)
                out[c.uid] = UnprepareResult(error=str(exc))
                self._report("NodeUnprepareResources", c, str(exc))
            except JournalError as exc:
                log.error("event=unprepare-journal-failed claim=%s code=%s", c.uid, exc.code)
                out[c.uid] = UnprepareResult(error=f"{exc.code}: {exc}")
                self._report("NodeUnprepareResources", c, out[c.uid].error or "")
            except Exception as exc:  # retried by the kubelet; the journal keeps the state
                log.exception("event=unprepare-failed claim=%s", c.uid)
                out[c.uid] = UnprepareResult(error=f"E_INTERNAL: {type(exc).__name__}: {exc}")
                self._report("NodeUnprepareResources", c, out[c.uid].error or "")
        return out


class NriAdapter:
    """Implements :class:`dmn.agent.nri.handler.NriHandler`.

    Every refused hook is reported (metric + Event on the Pod) before the runtime is told."""

    def __init__(
        self,
        attachments: SandboxAttachmentService,
        reconcile: ReconcileLoop,
        reporter: NodeEventReporter | None = None,
    ) -> None:
        self.attachments = attachments
        self.reconcile = reconcile
        self.reporter = reporter or NodeEventReporter(None, "")
        # sandboxes the runtime listed with a container at the last Synchronize: one not
        # attached by then ran a container without its networks (never attached late)
        self._had_containers: frozenset[str] = frozenset()

    def _refuse(self, request: str, pod: PodSandbox, exc: Refusal | JournalError) -> HookRefused:
        obj = pod_object(pod.namespace, pod.name, pod.uid)
        message = str(exc) if isinstance(exc, Refusal) else f"{exc.code}: {exc}"
        self.reporter.refused(request, exc.code, message, obj)
        return HookRefused(message)

    def synchronize(self, pods: Sequence[PodSandbox], containers: Sequence[Container]) -> None:
        log.info("event=synchronize pods=%d containers=%d", len(pods), len(containers))
        self._had_containers = frozenset(c.pod_sandbox_id for c in containers)
        self.reconcile.synchronize([(p.uid, p.id) for p in pods])

    def run_pod_sandbox(self, pod: PodSandbox) -> None:
        try:
            self.attachments.run_pod(
                pod.namespace,
                pod.name,
                pod.uid,
                pod.id,
                pod.netns_path,
                deadline=current_deadline(),
            )
        except (Refusal, JournalError) as exc:
            raise self._refuse("RunPodSandbox", pod, exc) from exc

    def stop_pod_sandbox(self, pod: PodSandbox) -> None:
        try:
            detached = self.attachments.stop_pod(pod.uid, pod.id)
        except (Refusal, JournalError) as exc:
            raise self._refuse("StopPodSandbox", pod, exc) from exc
        if detached:
            self.reporter.noticed(
                pod_object(pod.namespace, pod.name, pod.uid),
                "Detached",
                f"sandbox {pod.id[:12]}: every network attached to it was removed",
            )

    def remove_pod_sandbox(self, pod: PodSandbox) -> None:
        try:
            self.attachments.remove_pod(pod.uid, pod.id)
        except (Refusal, JournalError) as exc:
            raise self._refuse("RemovePodSandbox", pod, exc) from exc

    def create_container(self, pod: PodSandbox, container: Container) -> ContainerAdjustment:
        """Gate the container — attaching the sandbox late when its RunPodSandbox attached
        nothing (see :meth:`SandboxAttachmentService.attach_late`) — then add the character
        device nodes the sandbox's VFIO grants exported (the same nodes the grant's CDI
        spec lists)."""
        late = LateAttach(pod.netns_path, current_deadline(), pod.id in self._had_containers)
        self._gate(pod, "CreateContainer", late)
        nodes = self.attachments.device_nodes(pod.uid, pod.id)
        return ContainerAdjustment(
            devices=tuple(DeviceNode(n.path, "c", n.major, n.minor) for n in nodes)
        )

    def start_container(self, pod: PodSandbox, container: Container) -> None:
        self._gate(pod, "StartContainer")

    def _gate(self, pod: PodSandbox, request: str, late: LateAttach | None = None) -> None:
        try:
            self.attachments.gate(pod.namespace, pod.name, pod.uid, pod.id, late)
        except (Refusal, JournalError) as exc:
            raise self._refuse(request, pod, exc) from exc

    def shutdown(self) -> None:
        log.info("event=runtime-shutdown")

    def hook_timed_out(self, report: HookTimeout) -> None:
        log.warning("event=hook-timeout hook=%s pod=%s", report.event, report.pod_uid)
