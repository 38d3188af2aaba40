"""A world for the ``multus/*`` executors: the lab API server with the NAD CRD, a Pod on
``node-a`` with its claim reserved for it, one binding of a macvlan template to a device, the
builtin ``multus-cni-shared`` prepare program bound to it, and the real port
(:class:`~dmn.agent.coordinator.multus_objects.ClusterMultusObjects`) — optionally behind a
:class:`FaultyPort` that loses responses, fails to answer or lets another writer in."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dmn.agent.coordinator.config import NodeConfig
from dmn.agent.coordinator.multus_objects import ClusterMultusObjects
from dmn.agent.coordinator.multus_plan import shadow_object
from dmn.api.cluster import Cluster
from dmn.api.cluster import resources as r
from dmn.api.identity import DRIVER
from dmn.api.multus.names import BindingIdentity, binding_key, shadow_name
from dmn.api.multus.selections import NETWORKS_ANNOTATION, REGISTRY_ANNOTATION
from dmn.api.multus.template import AllocatedDevice, SourceTemplate, render_template
from dmn.engine.binder import Call, bind_program
from dmn.engine.bound import BoundProgram
from dmn.host.netns import NamespaceRef
from dmn.interpreter.loader import load_builtin_plugins
from dmn.opcodes.device_environment import DeviceEnvironment
from dmn.opcodes.multus_objects import (
    ApiUnreachable,
    Obj,
    PodRef,
    SelectionEntry,
    ShadowBinding,
)
from dmn.vocabulary.handles import Handle, Provenance
from dmn.vocabulary.terms import Access, HandleType, LinkType

NADS = r.NETWORK_ATTACHMENT_DEFINITIONS
NODE = "node-a"
TEMPLATE = json.dumps(
    {
        "cniVersion": "1.0.0",
        "name": "macvlan-net",
        "type": "macvlan",
        "mode": "bridge",
        "ipam": {"type": "whereabouts", "range": "10.77.0.0/24", "network_name": "rail-a"},
    }
)
USER_NETWORKS = '[{"name":"user-net","interface":"eth7","x-unknown":{"kept":[1,2.50]}}]'


def pod_body(namespace: str, name: str, annotations: Mapping[str, str] | None = None) -> Obj:
    meta: dict[str, Any] = {"namespace": namespace, "name": name}
    if annotations:
        meta["annotations"] = dict(annotations)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "nodeName": NODE,
            "containers": [{"name": "c", "image": "example.invalid/app:1"}],
            "resourceClaims": [{"name": "net", "resourceClaimName": "claim"}],
        },
    }


@dataclass
class FaultyPort(ClusterMultusObjects):
    """The real port with faults a test arms: ``lose`` (method names whose next call does
    the request, then raises ``ApiUnreachable``: a lost response), ``unreachable`` (method
    names whose next call raises it without a request), ``before`` (method name → a hook run
    once before that method's next request: another writer), and ``calls`` (every write,
    in order)."""

    cluster: Cluster
    bindings: Sequence[ShadowBinding] = ()
    lose: set[str] = field(default_factory=set)
    unreachable: set[str] = field(default_factory=set)
    before: dict[str, Callable[[], None]] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__init__(self.cluster, self.bindings)

    def bound(self, bindings: Sequence[ShadowBinding]) -> FaultyPort:
        view = FaultyPort(self.cluster, bindings)
        view.lose, view.unreachable, view.before, view.calls = (
            self.lose,
            self.unreachable,
            self.before,
            self.calls,
        )
        return view

    def _fault(self, method: str, call: Callable[[], Any]) -> Any:
        hook = self.before.pop(method, None)
        if hook is not None:
            hook()
        if method in self.unreachable:
            self.unreachable.discard(method)
            raise ApiUnreachable(f"injected: {method} got no answer")
        if method not in ("read_nad", "read_pod", "read_claim"):
            self.calls.append(method)
        result = call()
        if method in self.lose:
            self.lose.discard(method)
            raise ApiUnreachable(f"injected: {method}'s response was lost")
        return result

    def read_nad(self, namespace: str, name: str) -> Obj | None:
        return self._fault("read_nad", lambda: super(FaultyPort, self).read_nad(namespace, name))

    def create_nad(self, body: Obj) -> Obj:
        return self._fault("create_nad", lambda: super(FaultyPort, self).create_nad(body))

    def delete_nad(self, namespace: str, name: str, uid: str) -> Obj | None:
        return self._fault(
            "delete_nad", lambda: super(FaultyPort, self).delete_nad(namespace, name, uid)
        )

    def patch_nad(self, namespace: str, name: str, operations: Sequence[Obj]) -> Obj:
        return self._fault(
            "patch_nad", lambda: super(FaultyPort, self).patch_nad(namespace, name, operations)
        )

    def patch_pod(self, namespace: str, name: str, operations: Sequence[Obj]) -> Obj:
        return self._fault(
            "patch_pod", lambda: super(FaultyPort, self).patch_pod(namespace, name, operations)
        )


@dataclass
class MultusWorld:
    cluster: Cluster
    namespace: str
    pod: dict[str, Any]
    claim: dict[str, Any]
    binding: ShadowBinding
    device: Handle
    port: FaultyPort

    @property
    def name(self) -> str:
        return self.binding.name

    def program(self, op: str) -> BoundProgram:
        plugin = load_builtin_plugins()["multus-cni-shared"]
        call = Call(
            config={"mode": "shared"}, operation_id=op, allocation={"device": (self.device,)}
        )
        bound = bind_program(plugin, "prepare", call)
        assert isinstance(bound, BoundProgram), [str(d) for d in bound]
        return bound

    def env(self, bound: bool = True) -> DeviceEnvironment:
        """The run's environment (the binding given), or cleanup's and recovery's (none)."""
        port = self.port.bound([self.binding]) if bound else self.port
        return DeviceEnvironment(host=NamespaceRef.at("/proc/self/ns/net"), multus=port)

    def shadow(self) -> dict[str, Any] | None:
        items = self.cluster.list(NADS, self.namespace).items
        found = [o for o in items if o["metadata"]["name"] == self.name]
        return found[0] if found else None

    def live_pod(self) -> dict[str, Any]:
        return self.cluster.get(r.PODS, self.pod["metadata"]["name"], self.namespace)

    def annotations(self) -> dict[str, str]:
        return dict(self.live_pod()["metadata"].get("annotations") or {})


def make_world(
    cluster: Cluster, pod_annotations: Mapping[str, str] | None = None, share: bool = True
) -> MultusWorld:
    """A fresh namespace with the Pod, its claim reserved for it, and the binding of the
    macvlan template to device ``dev0`` (parent ``eth9``) as interface ``net1``."""
    namespace = f"mw-{uuid.uuid4().hex[:8]}"
    cluster.create(r.NAMESPACES, {"metadata": {"name": namespace}})
    annotations = {NETWORKS_ANNOTATION: USER_NETWORKS}
    annotations.update(pod_annotations or {})
    pod = cluster.create(r.PODS, pod_body(namespace, "app", annotations), namespace)
    claim = cluster.create(
        r.RESOURCE_CLAIMS,
        {
            "metadata": {"namespace": namespace, "name": "claim"},
            "spec": {
                "devices": {"requests": [{"name": "net", "exactly": {"deviceClassName": "x"}}]}
            },
        },
        namespace,
    )
    claim["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": "net", "driver": DRIVER, "pool": NODE, "device": "dev0"}]
            }
        },
        "reservedFor": [{"resource": "pods", "name": "app", "uid": pod["metadata"]["uid"]}],
    }
    claim = cluster.replace(r.RESOURCE_CLAIMS, claim, namespace, status=True)
    pod_uid, claim_uid = pod["metadata"]["uid"], claim["metadata"]["uid"]
    identity = BindingIdentity(pod_uid, claim_uid, "net", DRIVER, NODE, "dev0")
    source = SourceTemplate(namespace, "macvlan-net", "uid-template", {}, TEMPLATE)
    rendered = render_template(source, AllocatedDevice("link", "eth9", None))
    name = shadow_name(identity, rendered.source)
    config = NodeConfig(node_name=NODE, node_uid="node-uid-a", state_dir=Path("/nonexistent"))
    body = shadow_object(
        config, pod, identity, name, "net1", rendered, {"metadata": {"resourceVersion": "7"}}
    )
    binding = ShadowBinding(
        claim_uid,
        "net",
        NODE,
        "dev0",
        PodRef(namespace, "app", pod_uid, NODE, namespace, "claim", claim_uid),
        body,
        rendered.digest,
        "net1",
        SelectionEntry(
            binding_key(identity), claim_uid, namespace, name, "net1", namespace, "macvlan-net"
        ),
        rendered.delegate_type,
    )
    device = Handle(
        id="dev0",
        type=HandleType.KERNEL_INTERFACE,
        inventory_id="inv:eth9",
        accesses=frozenset({Access.CREATE_CHILD})
        if share
        else frozenset({Access.READ, Access.EXCLUSIVE_CONFIGURE}),
        link_type=LinkType.ETHERNET,
        provenance=Provenance(claim_uid=claim_uid, request="net", pool=NODE, device="dev0"),
        observations={"ifName": "eth9"},
    )
    return MultusWorld(cluster, namespace, pod, claim, binding, device, FaultyPort(cluster))


__all__ = ["REGISTRY_ANNOTATION", "FaultyPort", "MultusWorld", "make_world"]
