"""The port through which the ``multus/*`` executors reach the API server (design §6.8).

Why a port: the opcode layer sits below the API layer, so an executor may not import the
cluster client or the Multus core (``dmn.api.multus``); the node agent gives it this
interface through the executor environment
(:attr:`~dmn.opcodes.device_environment.DeviceEnvironment.multus`), implemented over its
cluster connection by ``dmn.agent.coordinator.multus_objects``. The executors own the
effect's protocol — what is journaled before a request, how a lost response is resolved,
what proves an object ours — and the port owns only the wire: reads, writes with
preconditions, and the core's pure selection merge.

Contract:

* :class:`ShadowBinding` is what the agent verified and rendered for one allocated device
  before anything changed (design §6.8): the consumer Pod, the complete shadow
  NetworkAttachmentDefinition to create and the Pod selection that names it. The port hands
  it out for a device handle of this run only (:meth:`MultusObjects.binding`); cleanup and
  recovery get none and work from the before-image the executor recorded.
* Reads return the object or None when it does not exist. Writes raise
  :class:`ObjectExists` (create: the name is taken), :class:`ObjectGone` (404),
  :class:`ObjectChanged` (a precondition — UID, resourceVersion, a JSON patch ``test`` —
  did not hold: 409 or 422), :class:`ApiUnreachable` (no answer: the write may or may not
  have happened) or :class:`ApiRefused` (any other refusal, with its HTTP code).
* :meth:`MultusObjects.merge_selection` and :meth:`MultusObjects.release_selections` are
  the core's ``merge_selections``/``release_selections``: the new values of the Pod's
  networks and registry annotations (None: nothing to change; a None value: remove the
  key), or :class:`SelectionRefused` with the core's reason code.

Pure: imports no native or cluster library.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

Obj = Mapping[str, Any]


class MultusApiError(Exception):
    """A request the port could not complete; the subclass says how."""


class ObjectExists(MultusApiError):
    """Create found the name taken."""


class ObjectGone(MultusApiError):
    """The object does not exist (404)."""


class ObjectChanged(MultusApiError):
    """A precondition (UID, resourceVersion, JSON patch ``test``) did not hold."""


class ApiUnreachable(MultusApiError):
    """No answer: a write may or may not have happened (read the object to find out)."""


class ApiRefused(MultusApiError):
    """Any other refusal (403 Forbidden, 422 Invalid, ...)."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(f"HTTP {status}: {message}")


class SelectionRefused(Exception):
    """The core refused a selection change; ``code`` is its reason code."""

    def __init__(self, code: str, message: str) -> None:
        self.code = code
        super().__init__(message)


@dataclass(frozen=True, slots=True)
class SelectionEntry:
    """One managed entry of the Pod's networks selection (the core's ``ManagedSelection``)."""

    key: str
    claim_uid: str
    namespace: str
    name: str
    interface: str
    source_namespace: str
    source_name: str

    def to_json(self) -> dict[str, str]:
        return {
            "key": self.key,
            "claimUID": self.claim_uid,
            "namespace": self.namespace,
            "name": self.name,
            "interface": self.interface,
            "sourceNamespace": self.source_namespace,
            "sourceName": self.source_name,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SelectionEntry:
        return cls(
            str(data["key"]),
            str(data["claimUID"]),
            str(data["namespace"]),
            str(data["name"]),
            str(data["interface"]),
            str(data["sourceNamespace"]),
            str(data["sourceName"]),
        )


@dataclass(frozen=True, slots=True)
class PodRef:
    """The verified consumer: the Pod (namespace, name, UID) on this node, through the claim
    (namespace, name, UID) reserved for it alone."""

    namespace: str
    name: str
    uid: str
    node_name: str
    claim_namespace: str
    claim_name: str
    claim_uid: str

    def to_json(self) -> dict[str, str]:
        return {
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "nodeName": self.node_name,
            "claimNamespace": self.claim_namespace,
            "claimName": self.claim_name,
            "claimUID": self.claim_uid,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PodRef:
        return cls(
            str(data["namespace"]),
            str(data["name"]),
            str(data["uid"]),
            str(data["nodeName"]),
            str(data["claimNamespace"]),
            str(data["claimName"]),
            str(data["claimUID"]),
        )


@dataclass(frozen=True, slots=True)
class ShadowBinding:
    """One allocated device bound to a template: the allocation (claim UID, request, pool,
    device — the device handle's provenance must name exactly these), the consumer, the
    shadow object to create (complete: metadata with its owner reference, labels,
    provenance annotations and protection finalizer; ``spec.config`` the frozen rendered
    bytes), its digest, the interface the Pod gets, the Pod selection entry and the
    delegate plugin's type."""

    claim_uid: str
    request: str
    pool: str
    device: str
    pod: PodRef
    nad: Obj
    digest: str
    interface: str
    selection: SelectionEntry
    #: the template's device plugin (macvlan, ipvlan, host-device, sriov): what Multus does
    #: with the device, checked against the access the effect's device port proves
    delegate: str

    @property
    def namespace(self) -> str:
        return str(self.nad["metadata"]["namespace"])

    @property
    def name(self) -> str:
        return str(self.nad["metadata"]["name"])

    def to_json(self) -> dict[str, Any]:
        return {
            "claimUID": self.claim_uid,
            "request": self.request,
            "pool": self.pool,
            "device": self.device,
            "pod": self.pod.to_json(),
            "nad": dict(self.nad),
            "digest": self.digest,
            "interface": self.interface,
            "selection": self.selection.to_json(),
            "delegate": self.delegate,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ShadowBinding:
        return cls(
            str(data["claimUID"]),
            str(data["request"]),
            str(data["pool"]),
            str(data["device"]),
            PodRef.from_json(data["pod"]),
            dict(data["nad"]),
            str(data["digest"]),
            str(data["interface"]),
            SelectionEntry.from_json(data["selection"]),
            str(data["delegate"]),
        )


class MultusObjects(Protocol):
    def binding(self, claim_uid: str, request: str, pool: str, device: str) -> ShadowBinding | None:
        """The binding the agent verified for this allocation in this run, or None."""
        ...

    def read_nad(self, namespace: str, name: str) -> Obj | None: ...

    def create_nad(self, body: Obj) -> Obj: ...

    def delete_nad(self, namespace: str, name: str, uid: str) -> Obj | None:
        """Delete with ``uid`` as precondition; the object while finalizers hold it, None
        once it is gone."""
        ...

    def patch_nad(self, namespace: str, name: str, operations: Sequence[Obj]) -> Obj:
        """A JSON patch (RFC 6902) on the object's main endpoint."""
        ...

    def read_pod(self, namespace: str, name: str) -> Obj | None: ...

    def patch_pod(self, namespace: str, name: str, operations: Sequence[Obj]) -> Obj: ...

    def read_claim(self, namespace: str, name: str) -> Obj | None: ...

    def merge_selection(
        self, annotations: Mapping[str, str], entry: SelectionEntry
    ) -> dict[str, str] | None: ...

    def release_selections(
        self, annotations: Mapping[str, str], claim_uid: str
    ) -> dict[str, str | None] | None: ...
