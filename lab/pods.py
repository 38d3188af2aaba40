"""Pods on the embedded lab: the lab's stand-ins for kube-scheduler, kubelet and containerd.

:class:`LabPods` runs the real node agent (:class:`~dmn.agent.coordinator.node_agent.
NodeAgent`: journal, kubelet DRA socket, NRI plugin) against the embedded lab and plays
the other side of each interface the way the real components do, in the same order:

* *scheduler*: a Pod's claims (``resourceClaimName``, or one created from a
  ``resourceClaimTemplateName`` as kube-controller-manager does) are allocated together
  with the lab allocator and reserved for the Pod; ``spec.nodeName`` is set;
* *kubelet*: ``NodePrepareResources`` over the agent's DRA unix socket before the sandbox,
  ``NodeUnprepareResources`` after it is removed;
* *containerd*: a fresh network namespace per sandbox (``dmn-pod-<8 hex>``, created and
  deleted by the lab), RunPodSandbox / CreateContainer / StartContainer / StopPodSandbox /
  RemovePodSandbox through the lab NRI runtime.

A lab "container" has no image or processes of its own: :meth:`exec` runs a command of the
host inside the sandbox's network namespace (``ip netns exec``), which is the Pod's own
view of its network. Needs root and the lab's ``--links netns`` mode (the node's links are
then real, in the lab's namespace, which stands in for the node's host namespace).
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from dmn.agent.coordinator import NodeConfig
from dmn.agent.coordinator.handles import InventoryDevices
from dmn.agent.coordinator.node_agent import AgentSockets, NodeAgent
from dmn.agent.nri.plugin import PluginConfig
from dmn.agent.protos import dra_v1_pb2, dra_v1_pb2_grpc
from dmn.api.cluster import ApiFailure, Conflict, NotFound
from dmn.api.cluster import resources as r
from dmn.api.cluster.events import EventRecorder
from dmn.lab.allocator import AllocationError
from dmn.lab.allocator.service import ClaimService
from dmn.lab.cluster import LabCluster, LabError
from dmn.lab.node import NODE_NAME, NODE_UID
from dmn.lab.runtime.nri_runtime import HookFailed, LabContainer, LabNriRuntime, LabPod
from dmn.lab.runtime.required_plugins import TOLERATE_MISSING_PLUGINS, RequiredPluginCheck

log = logging.getLogger(__name__)
#: status writes tried per change while other writers (the node agent's annotation patch)
#: keep changing the Pod's resourceVersion
STATUS_ATTEMPTS = 10

WAIT = 60.0
#: kube-scheduler 1.37's PodScheduled message for a Pod whose claims cannot be allocated
#: on the one node (framework.FitError with the DRA plugin's reason; seen verbatim on the
#: upstream lab)
UNSCHEDULABLE = (
    "0/1 nodes are available: 1 cannot allocate all claims. preemption: 0/1 nodes are "
    "available: 1 Preemption is not helpful for scheduling."
)


@dataclass
class RunningPod:
    name: str
    namespace: str
    uid: str
    sandbox: str  # sandbox id
    netns: str  # network namespace name
    claims: list[dict[str, Any]] = field(default_factory=list)  # allocated claims
    generated: list[str] = field(default_factory=list)  # claims made from templates


class LabPods:
    def __init__(self, lab: LabCluster, root: Path) -> None:
        if not lab.netns:
            raise LabError(
                "E_LAB_LINKS", "Pods need the lab's real links: dmn lab up --links netns"
            )
        self.lab = lab
        self.root = root
        self.cluster = lab.client()
        # configured like the operator guide's containerd: the default validator on, with
        # the chart's tolerate key (a Pod that requires our plugin waits for it)
        self.runtime = LabNriRuntime(
            str(root / "nri.sock"),
            request_timeout=10.0,
            required_plugins=RequiredPluginCheck(tolerate_annotation=TOLERATE_MISSING_PLUGINS),
        )
        publication = lab.publication
        assert publication is not None
        devices = InventoryDevices(
            lambda: publication.publication.last, lambda: publication.inventory
        )
        config = NodeConfig(
            node_name=NODE_NAME,
            node_uid=NODE_UID,
            state_dir=root / "agent",
            host_netns=f"/var/run/netns/{lab.netns}",
        )
        sockets = AgentSockets(
            registry_dir=root / "registry",
            plugins_dir=root / "plugins",
            nri=PluginConfig(socket_path=str(root / "nri.sock"), use_env_socket=False),
            nri_ready_timeout=WAIT,
        )
        self.agent = NodeAgent(config, self.cluster, devices, sockets, health_from=publication)
        self.scheduler = ClaimService(self.cluster, NODE_NAME)
        self.pods: dict[tuple[str, str], RunningPod] = {}

    def start(self) -> LabPods:
        self.root.mkdir(parents=True, exist_ok=True)
        self.runtime.start()
        self.agent.start()
        if not (self.runtime.wait_ready(1, WAIT) and self.agent.wait_nri_ready()):
            raise LabError("E_LAB_START", "the node agent did not register with the lab runtime")
        return self

    def stop(self) -> None:
        for key in list(self.pods):
            with contextlib.suppress(Exception):
                self.delete(*key)
        self.agent.stop(1.0)
        self.runtime.stop()
        self._release_pins()

    def _release_pins(self) -> None:
        """Namespace pins left by an attachment that did not finish removal live under our
        own state directory (ours by construction): unmount them so it can be removed."""
        services = self.agent.services
        if services is None:
            return
        pins = services.pins
        for ref in pins.list():
            log.warning("event=pin-left path=%s", ref.path)
            pins.release(Path(ref.path).name, cleanup_verified=True)
        pins.close()

    # --- the scheduler's and kubelet's part ----------------------------------------------

    def _claims(self, pod: dict[str, Any], running: RunningPod) -> list[dict[str, Any]]:
        claims = []
        for ref in pod["spec"].get("resourceClaims") or []:
            if ref.get("resourceClaimName"):
                claims.append(
                    self.cluster.get(r.RESOURCE_CLAIMS, ref["resourceClaimName"], running.namespace)
                )
                continue
            template = self.cluster.get(
                r.RESOURCE_CLAIM_TEMPLATES, ref["resourceClaimTemplateName"], running.namespace
            )
            body = {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {
                    "name": f"{running.name}-{ref['name']}",
                    "namespace": running.namespace,
                    "ownerReferences": [
                        {
                            "apiVersion": "v1",
                            "kind": "Pod",
                            "name": running.name,
                            "uid": running.uid,
                        }
                    ],
                },
                "spec": template["spec"]["spec"],
            }
            claims.append(self.cluster.create(r.RESOURCE_CLAIMS, body, running.namespace))
            running.generated.append(body["metadata"]["name"])
        return claims

    def _dra(self) -> tuple[grpc.Channel, Any]:
        kubelet = self.agent.kubelet
        assert kubelet is not None
        channel = grpc.insecure_channel(f"unix://{kubelet.dra_socket}")
        return channel, dra_v1_pb2_grpc.DRAPluginStub(channel)  # type: ignore[no-untyped-call]

    def _refs(self, running: RunningPod) -> list[dra_v1_pb2.Claim]:
        return [
            dra_v1_pb2.Claim(
                namespace=running.namespace, uid=c["metadata"]["uid"], name=c["metadata"]["name"]
            )
            for c in running.claims
        ]

    def run(self, manifest: dict[str, Any]) -> RunningPod:
        """Create the Pod and bring it to Running; raises :class:`LabError` with the reason."""
        meta = manifest.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        body = {**manifest, "spec": {**manifest["spec"], "nodeName": NODE_NAME}}
        return self.admit(self.cluster.create(r.PODS, body, namespace))

    def admit(self, pod: dict[str, Any]) -> RunningPod:
        """Bring a Pod that exists in the API server to Running (binding it to the lab node
        first when it is not yet); raises :class:`LabError` with the reason. A Pod that
        fails stays Pending with the reason as its status message and is remembered, so
        :meth:`delete` still cleans up what was made for it."""
        meta = pod["metadata"]
        namespace = meta.get("namespace") or "default"
        if pod["spec"].get("nodeName") != NODE_NAME:
            pod = self.cluster.replace(
                r.PODS, {**pod, "spec": {**pod["spec"], "nodeName": NODE_NAME}}, namespace
            )
        running = RunningPod(
            meta["name"],
            namespace,
            pod["metadata"]["uid"],
            uuid.uuid4().hex,
            f"dmn-pod-{uuid.uuid4().hex[:8]}",
        )
        self.pods[(namespace, running.name)] = running
        try:
            claims = self._claims(pod, running)
            if claims:
                try:
                    running.claims = self.scheduler.allocate(claims, pod=pod)
                except AllocationError:
                    self._unschedulable(running)
                    raise
            channel, stub = self._dra()
            with channel:
                resp = stub.NodePrepareResources(
                    dra_v1_pb2.NodePrepareResourcesRequest(claims=self._refs(running))
                )
            errors = [f"{uid}: {c.error}" for uid, c in resp.claims.items() if c.error]
            if errors:
                raise LabError("E_PREPARE", "; ".join(errors))
            from pyroute2 import netns

            netns.create(running.netns)
            sandbox = LabPod(
                running.sandbox,
                running.uid,
                running.name,
                namespace,
                f"/var/run/netns/{running.netns}",
                # kubelet hands the runtime every Pod annotation (the validator reads them)
                annotations=dict(pod["metadata"].get("annotations") or {}),
            )
            try:
                self.runtime.run_pod_sandbox(sandbox)
            except HookFailed as exc:
                self._sandbox_failed(running, pod, str(exc))
                raise
            for i, ctr in enumerate(pod["spec"].get("containers") or []):
                cid = f"{running.sandbox[:12]}-{i}"
                self.runtime.create_container(
                    running.sandbox, LabContainer(cid, running.sandbox, ctr["name"])
                )
                self.runtime.start_container(cid)
        except LabError as exc:  # E_PREPARE: the agent refused the claims
            self._set_phase(running, "Pending", f"{exc.code}: {exc.message}")
            raise
        except (AllocationError, HookFailed, ApiFailure, grpc.RpcError, OSError) as exc:
            self._set_phase(running, "Pending", str(exc))
            raise LabError("E_POD_START", f"pod {namespace}/{running.name}: {exc}") from exc
        self._set_phase(running, "Running")
        return running

    def _set_phase(self, running: RunningPod, phase: str, message: str = "") -> None:
        """Phase and the lab's own outcome message; status fields the real scheduler and
        kubelet wrote before (conditions, container statuses) are kept."""

        def changed(status: dict[str, Any]) -> dict[str, Any]:
            kept = {
                k: v
                for k, v in status.items()
                if k in ("conditions", "containerStatuses") and phase != "Running"
            }
            return {"phase": phase, **kept, **({"message": message[:512]} if message else {})}

        self._update_status(running, changed)

    def _write_status(self, running: RunningPod, status: dict[str, Any]) -> None:
        self._update_status(running, lambda current: {**current, **status})

    def _update_status(
        self, running: RunningPod, change: Callable[[dict[str, Any]], dict[str, Any]]
    ) -> None:
        """Read the Pod, write ``change(status)`` guarded by its resourceVersion; on a
        Conflict read again, as kubelet's status manager does. The node agent patches the
        Pod's network-status annotation right after RunPodSandbox, so a write that lost the
        race must not be dropped (the Pod stayed Pending with its sandbox up). Other
        failures (the Pod is gone) are ignored."""
        for _ in range(STATUS_ATTEMPTS):
            try:
                current = self.cluster.get(r.PODS, running.name, running.namespace)
                current["status"] = change(current.get("status") or {})
                self.cluster.replace(r.PODS, current, status=True)
                return
            except Conflict:
                continue
            except ApiFailure:
                return
        log.warning("event=lab-pod-status-conflict pod=%s/%s", running.namespace, running.name)

    def _event(self, running: RunningPod, component: str, reason: str, message: str) -> None:
        obj = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"namespace": running.namespace, "name": running.name, "uid": running.uid},
        }
        EventRecorder(self.cluster, component, NODE_NAME).record(obj, "Warning", reason, message)

    def _unschedulable(self, running: RunningPod) -> None:
        """What kube-scheduler 1.37 leaves on a Pod whose claims it cannot allocate (its
        DRA plugin's "cannot allocate all claims", seen on the upstream lab)."""
        self._write_status(
            running,
            {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": UNSCHEDULABLE,
                    }
                ],
            },
        )
        self._event(running, "default-scheduler", "FailedScheduling", UNSCHEDULABLE)

    def _sandbox_failed(self, running: RunningPod, pod: dict[str, Any], error: str) -> None:
        """What kubelet 1.37 and containerd 2.3 show when an NRI plugin fails
        RunPodSandbox: the Pod stays Pending, every container waits in ContainerCreating
        (none is created), and kubelet's FailedCreatePodSandBox Event quotes the error."""
        containers = pod["spec"].get("containers") or []
        self._write_status(
            running,
            {
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [
                    {
                        "name": c["name"],
                        "image": c.get("image", ""),
                        "imageID": "",
                        "started": False,
                        "lastState": {},
                        "ready": False,
                        "restartCount": 0,
                        "state": {"waiting": {"reason": "ContainerCreating"}},
                    }
                    for c in containers
                ],
            },
        )
        message = f"Failed to create pod sandbox: NRI RunPodSandbox failed: {error}"
        self._event(running, "kubelet", "FailedCreatePodSandBox", message)

    def exec(self, namespace: str, name: str, argv: list[str]) -> subprocess.CompletedProcess[str]:
        running = self.pods.get((namespace, name))
        if running is None:
            raise LabError("E_NOT_FOUND", f"no running lab pod {namespace}/{name}")
        return subprocess.run(
            ["ip", "netns", "exec", running.netns, *argv],
            capture_output=True,
            text=True,
            timeout=30,
        )

    def delete(self, namespace: str, name: str) -> None:
        """Stop the sandbox, unprepare and deallocate its claims, remove the sandbox, delete.

        The order is a real kubelet's: NodeUnprepareResources comes after StopPodSandbox
        and before the sandbox is removed (removal is garbage collection).
        """
        running = self.pods.pop((namespace, name), None)
        if running is None:
            raise LabError("E_NOT_FOUND", f"no running lab pod {namespace}/{name}")
        from pyroute2 import netns

        if running.sandbox in self.runtime.pods:
            self.runtime.stop_pod_sandbox(running.sandbox)
        # containerd tears the sandbox's network down and removes its namespace mount at
        # StopPodSandbox, before kubelet unprepares (the agent may rely on that)
        if running.netns in netns.listnetns():
            netns.remove(running.netns)
        if running.claims:
            channel, stub = self._dra()
            with channel:
                resp = stub.NodeUnprepareResources(
                    dra_v1_pb2.NodeUnprepareResourcesRequest(claims=self._refs(running))
                )
            errors = [f"{uid}: {c.error}" for uid, c in resp.claims.items() if c.error]
            if errors:
                log.error("event=unprepare-failed pod=%s/%s errors=%s", namespace, name, errors)
            for claim in running.claims:
                with contextlib.suppress(NotFound):
                    self.scheduler.release(claim)
        if running.sandbox in self.runtime.pods:
            self.runtime.remove_pod_sandbox(running.sandbox)
        for claim_name in running.generated:
            with contextlib.suppress(NotFound):
                self.cluster.delete(r.RESOURCE_CLAIMS, claim_name, namespace)
        # a Pod bound to a node is deleted gracefully: its kubelet finishes the deletion
        # (grace period 0, for this very Pod) once the sandbox is gone
        with contextlib.suppress(NotFound, Conflict):
            self.cluster.delete(r.PODS, name, namespace, grace_period_seconds=0, uid=running.uid)
