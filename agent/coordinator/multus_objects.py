"""The ``multus/*`` executors' API port over the agent's cluster connection (design §6.8).

:class:`ClusterMultusObjects` implements :class:`~dmn.opcodes.multus_objects.MultusObjects`:
NetworkAttachmentDefinition, Pod and ResourceClaim reads and writes through
:class:`~dmn.api.cluster.Cluster` (failures mapped to the port's exceptions) and the
selection merge and release of the pure core (:mod:`dmn.api.multus.selections`). The
bindings the agent verified for one run are given with :meth:`ClusterMultusObjects.bound`,
which returns a view holding exactly them; the base object (cleanup and recovery) holds none,
so an effect can only ever bind what the agent verified in the same call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dmn.api.cluster import (
    AlreadyExists,
    ApiFailure,
    Cluster,
    Conflict,
    Invalid,
    NotFound,
    Unavailable,
)
from dmn.api.cluster import resources as r
from dmn.api.multus.errors import MultusError
from dmn.api.multus.selections import ManagedSelection, merge_selections, release_selections
from dmn.api.multus.template import TemplateRef
from dmn.opcodes.multus_objects import (
    ApiRefused,
    ApiUnreachable,
    ObjectChanged,
    ObjectExists,
    ObjectGone,
    SelectionEntry,
    SelectionRefused,
    ShadowBinding,
)

Obj = Mapping[str, Any]
NADS = r.NETWORK_ATTACHMENT_DEFINITIONS


def _failure(exc: ApiFailure, patch: bool = False) -> Exception:
    """The port's exception for ``exc``. ``patch``: a 422 is a failed ``test`` operation
    (our patches are built from the object they test, so that is the only way one of them
    is unprocessable; a patch that stays unprocessable is retried a bounded number of times
    and then fails)."""
    if isinstance(exc, NotFound):
        return ObjectGone(str(exc))
    if isinstance(exc, AlreadyExists):
        return ObjectExists(str(exc))
    if isinstance(exc, Conflict) or (patch and isinstance(exc, Invalid)):
        return ObjectChanged(str(exc))
    if isinstance(exc, Unavailable) or exc.code == 0:
        return ApiUnreachable(str(exc))
    return ApiRefused(exc.code, str(exc))


def _managed(entry: SelectionEntry) -> ManagedSelection:
    return ManagedSelection(
        key=entry.key,
        claim_uid=entry.claim_uid,
        namespace=entry.namespace,
        name=entry.name,
        interface=entry.interface,
        source=TemplateRef(entry.source_namespace, entry.source_name),
    )


class ClusterMultusObjects:
    def __init__(
        self, cluster: Cluster, bindings: Sequence[ShadowBinding] = (), timeout: float = 10.0
    ) -> None:
        self.cluster = cluster
        self.timeout = timeout
        self._bindings = {(b.claim_uid, b.request, b.pool, b.device): b for b in bindings}

    def bound(self, bindings: Sequence[ShadowBinding]) -> ClusterMultusObjects:
        """A view of the same connection holding exactly ``bindings``."""
        return ClusterMultusObjects(self.cluster, bindings, self.timeout)

    def binding(self, claim_uid: str, request: str, pool: str, device: str) -> ShadowBinding | None:
        return self._bindings.get((claim_uid, request, pool, device))

    def _read(self, res: r.Resource, namespace: str, name: str) -> Obj | None:
        try:
            return self.cluster.get(res, name, namespace)
        except NotFound:
            return None
        except ApiFailure as exc:
            raise _failure(exc) from exc

    def _write(self, call: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return call(*args, **kwargs)
        except ApiFailure as exc:
            raise _failure(exc, patch=call == self.cluster.patch) from exc
        except OSError as exc:  # the connection broke: the write may have happened
            raise ApiUnreachable(str(exc)) from exc

    def read_nad(self, namespace: str, name: str) -> Obj | None:
        return self._read(NADS, namespace, name)

    def create_nad(self, body: Obj) -> Obj:
        namespace = str(body["metadata"]["namespace"])
        result: Obj = self._write(self.cluster.create, NADS, dict(body), namespace)
        return result

    def delete_nad(self, namespace: str, name: str, uid: str) -> Obj | None:
        try:
            got: Obj = self._write(self.cluster.delete, NADS, name, namespace, uid=uid)
        except ObjectGone:
            return None
        return got if got.get("kind") == "NetworkAttachmentDefinition" else None

    def patch_nad(self, namespace: str, name: str, operations: Sequence[Obj]) -> Obj:
        ops = [dict(o) for o in operations]
        result: Obj = self._write(self.cluster.patch, NADS, name, ops, namespace, patch_type="json")
        return result

    def read_pod(self, namespace: str, name: str) -> Obj | None:
        return self._read(r.PODS, namespace, name)

    def patch_pod(self, namespace: str, name: str, operations: Sequence[Obj]) -> Obj:
        ops = [dict(o) for o in operations]
        result: Obj = self._write(
            self.cluster.patch, r.PODS, name, ops, namespace, patch_type="json"
        )
        return result

    def read_claim(self, namespace: str, name: str) -> Obj | None:
        return self._read(r.RESOURCE_CLAIMS, namespace, name)

    def merge_selection(
        self, annotations: Mapping[str, str], entry: SelectionEntry
    ) -> dict[str, str] | None:
        try:
            return merge_selections(annotations, [_managed(entry)])
        except MultusError as exc:
            raise SelectionRefused(exc.reason, str(exc)) from exc

    def release_selections(
        self, annotations: Mapping[str, str], claim_uid: str
    ) -> dict[str, str | None] | None:
        try:
            return release_selections(annotations, claim_uid)
        except MultusError as exc:
            raise SelectionRefused(exc.reason, str(exc)) from exc
