"""Executors of ``multus/shadow-nad/v1``, ``multus/pod-selection/v1`` and
``multus/binding-ready/v1`` (design §6.8; specs in :mod:`.specs`).

They reach the API server only through the node's port (:mod:`dmn.opcodes.multus_objects`)
and take what they bind only from the :class:`~dmn.opcodes.multus_objects.ShadowBinding` the
agent verified for the effect's own device (matched by the input handle's provenance: the
claim, request, pool and device of the allocation). Everything undo and recovery need is in
the before-image the runner journals before the first request: the complete shadow object,
the consumer Pod and claim, the selection entry.

Lifecycle and why a crash anywhere leaves nothing of ours behind and nothing of others
touched:

* ``shadow-nad`` creates the object in one request with its owner reference and protection
  finalizer. A lost response is resolved by reading the name: equal in identity and content
  → adopted; another object → ``E_MULTUS_SHADOW_CONFLICT`` and never changed; nothing →
  uncertain, and the runner's recovery reads again. Its outcome records the UID; every later
  write names it (delete precondition, JSON patch ``test``). Undo (last): request deletion
  if nobody did, then remove only our finalizer.
* ``pod-selection`` merges the entry into the live Pod with a JSON patch that tests UID and
  resourceVersion, re-reading the Pod, its node and the claim's reservation on every retry;
  the merge itself is the core's. Undo removes the claim's owned entries from the Pod of the
  recorded UID.
* ``binding-ready`` reads both once more and changes nothing; its undo (first) requests the
  shadow's deletion with the recorded UID as precondition.

An API server that does not answer during an undo defers it (``UndoDeferred``: retried by
the next cleanup or recovery, never quarantined for a blip); an object that is not provably
ours quarantines the effect (``E_MULTUS_SHADOW_CONFLICT``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, TypeVar

from dmn.opcodes import multus_shadow as shadow
from dmn.opcodes.device_environment import multus_objects
from dmn.opcodes.executor import (
    EffectContext,
    Executor,
    ExecutorError,
    Observed,
    RecoveryObservation,
    UndoDeferred,
)
from dmn.opcodes.multus import specs
from dmn.opcodes.multus_objects import (
    ApiRefused,
    ApiUnreachable,
    MultusObjects,
    ObjectChanged,
    ObjectExists,
    ObjectGone,
    PodRef,
    SelectionEntry,
    SelectionRefused,
    ShadowBinding,
)
from dmn.opcodes.spec import OpcodeSpec
from dmn.vocabulary.handles import Handle, Provenance
from dmn.vocabulary.terms import Access, HandleType

_log = logging.getLogger(__name__)

T = TypeVar("T")
Outputs = Mapping[str, tuple[Handle, ...]]

RETRIES = 8
"""Optimistic-concurrency rounds of one write (another writer changed the object between
our read and our patch); each round reads again and recomputes from the live object."""


def _port(ctx: EffectContext) -> MultusObjects:
    port = multus_objects(ctx.env)
    if port is None:
        raise ExecutorError(
            "E_MULTUS_NOT_CONFIGURED", "this node gave the effect no API connection for Multus"
        )
    return port


def _single(ctx: EffectContext, port: str) -> Handle:
    handles = ctx.inputs.get(port, ())
    if len(handles) != 1:
        raise ExecutorError("E_PORT", f"input {port!r} needs exactly one handle")
    return handles[0]


def _binding(port: MultusObjects, handle: Handle) -> ShadowBinding:
    p = handle.provenance
    found = port.binding(p.claim_uid, p.request, p.pool, p.device)
    if found is None:
        raise ExecutorError(
            "E_MULTUS_NOT_CONFIGURED",
            f"no verified binding for device {p.device} of claim {p.claim_uid} in this run: "
            "the node agent binds a template only for a consumer it verified",
        )
    return found


def _api(what: str, call: Callable[[], T], *, undo: bool = False) -> T:
    """``call``; a failure of the API server becomes the effect's error (during an undo, a
    server that did not answer defers it instead)."""
    try:
        return call()
    except ApiUnreachable as exc:
        if undo:
            raise UndoDeferred("E_MULTUS_API", f"{what}: {exc}") from exc
        raise ExecutorError("E_MULTUS_API", f"{what}: {exc}") from exc
    except ApiRefused as exc:
        raise ExecutorError("E_MULTUS_API", f"{what}: {exc}") from exc


def _conflict(binding: ShadowBinding, found: list[str]) -> ExecutorError:
    return ExecutorError(
        "E_MULTUS_SHADOW_CONFLICT",
        f"{binding.namespace}/{binding.name} exists but is not this binding's shadow "
        f"({'; '.join(found)}); it is never changed or adopted",
    )


def _deleting(namespace: str, name: str) -> ExecutorError:
    return ExecutorError(
        "E_MULTUS_SHADOW_DELETING",
        f"shadow {namespace}/{name} is being deleted while its binding is live; deletion "
        "cannot be cancelled: delete and recreate the Pod",
    )


def _attachment(device: Handle, binding: ShadowBinding, uid: str, ctx: EffectContext) -> Handle:
    p = device.provenance
    return Handle(
        id=f"{binding.namespace}/{binding.name}",
        type=HandleType.NETWORK_ATTACHMENT,
        inventory_id=device.inventory_id,
        accesses=frozenset({Access.READ}),
        provenance=Provenance(
            claim_uid=p.claim_uid,
            request=p.request,
            pool=p.pool,
            device=p.device,
            share_id=p.share_id,
            root_step=p.root_step,
            operation=ctx.operation_id,
            effect=ctx.effect_id,
        ),
        observations={
            "namespace": binding.namespace,
            "name": binding.name,
            "uid": uid,
            "interface": binding.interface,
            "configSHA256": binding.digest,
            "podUID": binding.pod.uid,
        },
    )


def _recorded_uid(outputs: Outputs) -> str:
    handles = outputs.get("attachment", ())
    value = handles[0].observations.get("uid") if handles else None
    return value if isinstance(value, str) else ""


#: Delegates that take the device whole (its link moved, its VF driven by the plugin).
WHOLE = frozenset({"host-device", "sriov"})


class ShadowNad:
    """``multus/shadow-nad/v1`` (a whole device) and ``multus/shadow-nad-shared/v1`` (a
    share): one protocol, two typed device ports."""

    def __init__(self, spec: OpcodeSpec) -> None:
        self.spec = spec

    def capture(self, ctx: EffectContext) -> Any:
        port = _port(ctx)
        device = _single(ctx, "device")
        binding = _binding(port, device)
        if binding.delegate in WHOLE and not device.grants(Access.EXCLUSIVE_CONFIGURE):
            raise ExecutorError(
                "E_MULTUS_DEVICE_MISMATCH",
                f"{binding.delegate} takes device {device.id} whole; it is only a share",
            )
        live = _api("read the shadow", lambda: port.read_nad(binding.namespace, binding.name))
        if live is not None:
            found = shadow.problems(live, binding.nad)
            if found:
                raise _conflict(binding, found)
            if shadow.deleting(live):
                raise _deleting(binding.namespace, binding.name)
        return {"binding": binding.to_json()}

    def apply(self, ctx: EffectContext, before: Any) -> None:
        port = _port(ctx)
        binding = ShadowBinding.from_json(before["binding"])
        lost: ExecutorError | None = None
        try:
            port.create_nad(binding.nad)
            return
        except ObjectExists:
            pass
        except ApiUnreachable as exc:
            lost = ExecutorError("E_MULTUS_API", f"create the shadow: {exc}")
        except ApiRefused as exc:
            raise ExecutorError("E_MULTUS_API", f"create the shadow: {exc}") from exc
        live = _api("read the shadow", lambda: port.read_nad(binding.namespace, binding.name))
        if live is None:
            if lost is not None:
                raise lost  # outcome unknown: the runner observes it (recover) before undoing
            raise ExecutorError(
                "E_MULTUS_API", f"{binding.namespace}/{binding.name} was taken, then gone"
            )
        found = shadow.problems(live, binding.nad)
        if found:
            raise _conflict(binding, found)
        if shadow.deleting(live):
            raise _deleting(binding.namespace, binding.name)
        _log.info("event=shadow-adopted shadow=%s/%s", binding.namespace, binding.name)

    def observe(self, ctx: EffectContext, before: Any) -> Observed:
        port = _port(ctx)
        binding = ShadowBinding.from_json(before["binding"])
        live = _api("read the shadow", lambda: port.read_nad(binding.namespace, binding.name))
        if live is None:
            return Observed(False, detail=f"shadow {binding.name} is gone")
        found = shadow.problems(live, binding.nad)
        if found:
            return Observed(False, detail="; ".join(found))
        if shadow.deleting(live):
            return Observed(False, detail=f"shadow {binding.name} is being deleted")
        if shadow.protection(binding.nad) not in shadow.finalizers(live):
            return Observed(False, detail=f"shadow {binding.name} lost its protection finalizer")
        device = _single(ctx, "device")
        handle = _attachment(device, binding, shadow.uid_of(live), ctx)
        return Observed(True, {"attachment": (handle,)})

    def recover(self, ctx: EffectContext, before: Any) -> RecoveryObservation:
        port = _port(ctx)
        binding = ShadowBinding.from_json(before["binding"])
        live = _api("read the shadow", lambda: port.read_nad(binding.namespace, binding.name))
        if live is None:
            return RecoveryObservation.NOT_APPLIED
        if shadow.problems(live, binding.nad):
            # ours altered, or a foreign one created meanwhile: undo proves which, or
            # quarantines
            return RecoveryObservation.UNCERTAIN
        return RecoveryObservation.APPLIED

    def undo(self, ctx: EffectContext, before: Any, outputs: Outputs) -> None:
        port = _port(ctx)
        binding = ShadowBinding.from_json(before["binding"])
        ns, name = binding.namespace, binding.name
        uid = _recorded_uid(outputs)
        live = _api("read the shadow", lambda: port.read_nad(ns, name), undo=True)
        if live is None:
            return
        if uid and shadow.uid_of(live) != uid:
            _log.warning("event=shadow-replaced shadow=%s/%s recorded=%s", ns, name, uid)
            return  # ours is gone; the object now under the name is someone else's
        found = shadow.problems(live, binding.nad, uid=uid, releasing=True)
        if found:
            raise _conflict(binding, found)
        uid = shadow.uid_of(live)
        if not shadow.deleting(live):
            request_deletion(port, ns, name, uid)
        remove_protection(port, ns, name, uid, shadow.protection(binding.nad))


def request_deletion(port: MultusObjects, ns: str, name: str, uid: str) -> None:
    """Delete the shadow of ``uid`` (a replaced or gone object is left alone)."""
    try:
        _api("delete the shadow", lambda: port.delete_nad(ns, name, uid), undo=True)
    except (ObjectGone, ObjectChanged):
        return


def remove_protection(port: MultusObjects, ns: str, name: str, uid: str, finalizer: str) -> None:
    """Remove only ``finalizer`` from the shadow of ``uid`` with a UID- and
    resourceVersion-checked JSON patch; a changed version is read again, a replaced or gone
    object needs nothing (design §6.8, release)."""
    for _ in range(RETRIES):
        live = _api("read the shadow", lambda: port.read_nad(ns, name), undo=True)
        if live is None or shadow.uid_of(live) != uid:
            return
        patch = shadow.drop_finalizer(live, finalizer)
        if patch is None:
            return
        try:
            _api("remove the finalizer", partial(port.patch_nad, ns, name, patch), undo=True)
            return
        except ObjectGone:
            return
        except ObjectChanged:
            continue
    raise UndoDeferred("E_MULTUS_API", f"shadow {ns}/{name} kept changing under the finalizer")


def _pod_problem(pod: Mapping[str, Any] | None, ref: PodRef) -> str:
    """Why the live Pod is not the verified consumer (empty: it is)."""
    if pod is None:
        return f"Pod {ref.namespace}/{ref.name} is gone"
    m = shadow.meta(pod)
    if m.get("uid") != ref.uid:
        return f"Pod {ref.namespace}/{ref.name} is not UID {ref.uid}"
    if (pod.get("spec") or {}).get("nodeName") != ref.node_name:
        return f"Pod {ref.name} does not run on node {ref.node_name}"
    if m.get("deletionTimestamp"):
        return f"Pod {ref.name} is terminating"
    return ""


def _annotations(pod: Mapping[str, Any]) -> dict[str, str]:
    found = shadow.meta(pod).get("annotations")
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, Mapping) else {}


def _merged(port: MultusObjects, pod: Mapping[str, Any], entry: SelectionEntry) -> Any:
    try:
        return port.merge_selection(_annotations(pod), entry)
    except SelectionRefused as exc:
        raise ExecutorError(exc.code, str(exc)) from exc


def _consumer(port: MultusObjects, ref: PodRef) -> Mapping[str, Any]:
    """The live Pod, verified anew: UID, node, not terminating, the claim still reserved for
    it alone, on every retry (design §6.8)."""
    pod = _api("read the Pod", lambda: port.read_pod(ref.namespace, ref.name))
    problem = _pod_problem(pod, ref)
    if not problem:
        claim = _api("read the claim", lambda: port.read_claim(ref.claim_namespace, ref.claim_name))
        if (
            claim is None
            or shadow.uid_of(claim) != ref.claim_uid
            or not shadow.reserved_for(claim, ref.uid)
        ):
            problem = f"claim {ref.claim_name} is no longer reserved for Pod {ref.uid} alone"
    if problem:
        raise ExecutorError("E_MULTUS_CONSUMER", problem)
    assert pod is not None
    return pod


def _patch_pod(
    port: MultusObjects,
    ref: PodRef,
    change: Callable[[Mapping[str, Any]], Mapping[str, str | None] | None],
    *,
    verify: bool,
) -> None:
    """Change the Pod's annotations with a UID/resourceVersion-tested JSON patch, recomputed
    from the live Pod after every conflict. ``verify``: the consumer is verified each round
    (forward); without it (undo) a Pod that is gone or replaced needs nothing."""
    undo = not verify
    for _ in range(RETRIES):
        if verify:
            pod: Mapping[str, Any] | None = _consumer(port, ref)
        else:
            pod = _api("read the Pod", lambda: port.read_pod(ref.namespace, ref.name), undo=True)
            if pod is None or shadow.uid_of(pod) != ref.uid:
                return
        assert pod is not None
        values = change(pod)
        patch = shadow.annotation_patch(pod, values) if values is not None else None
        if patch is None:
            return
        try:
            _api(
                "patch the Pod", partial(port.patch_pod, ref.namespace, ref.name, patch), undo=undo
            )
            return
        except ObjectGone:
            if verify:
                raise ExecutorError("E_MULTUS_CONSUMER", f"Pod {ref.name} is gone") from None
            return
        except ObjectChanged:
            continue
    if undo:
        raise UndoDeferred("E_MULTUS_API", f"Pod {ref.name} kept changing under the patch")
    raise ExecutorError("E_MULTUS_API", f"Pod {ref.name} kept changing under the patch")


def _selection_of(before: Any) -> tuple[PodRef, SelectionEntry]:
    return PodRef.from_json(before["pod"]), SelectionEntry.from_json(before["selection"])


def _selected(port: MultusObjects, ref: PodRef, entry: SelectionEntry) -> bool | None:
    """Whether the Pod of the recorded UID selects the entry as recorded (None: the Pod is
    gone or replaced)."""
    pod = _api("read the Pod", lambda: port.read_pod(ref.namespace, ref.name))
    if pod is None or shadow.uid_of(pod) != ref.uid:
        return None
    return _merged(port, pod, entry) is None


class PodSelection:
    """``multus/pod-selection/v1``."""

    spec: OpcodeSpec = specs.POD_SELECTION

    def capture(self, ctx: EffectContext) -> Any:
        port = _port(ctx)
        binding = _binding(port, _single(ctx, "attachment"))
        pod = _consumer(port, binding.pod)
        _merged(port, pod, binding.selection)  # refuses before any change
        return {"pod": binding.pod.to_json(), "selection": binding.selection.to_json()}

    def apply(self, ctx: EffectContext, before: Any) -> None:
        port = _port(ctx)
        ref, entry = _selection_of(before)
        _patch_pod(port, ref, lambda pod: _merged(port, pod, entry), verify=True)

    def observe(self, ctx: EffectContext, before: Any) -> Observed:
        port = _port(ctx)
        ref, entry = _selection_of(before)
        if not _selected(port, ref, entry):
            return Observed(False, detail=f"Pod {ref.name} does not select {entry.name}")
        return Observed(True, {"attachment": ctx.inputs["attachment"]})

    def recover(self, ctx: EffectContext, before: Any) -> RecoveryObservation:
        port = _port(ctx)
        ref, entry = _selection_of(before)
        # one atomic patch: the entry is there as recorded, or the patch did not land
        selected = _selected(port, ref, entry)
        return RecoveryObservation.APPLIED if selected else RecoveryObservation.NOT_APPLIED

    def undo(self, ctx: EffectContext, before: Any, outputs: Outputs) -> None:
        port = _port(ctx)
        ref, entry = _selection_of(before)

        def release(pod: Mapping[str, Any]) -> Mapping[str, str | None] | None:
            try:
                return port.release_selections(_annotations(pod), entry.claim_uid)
            except SelectionRefused as exc:
                raise ExecutorError(exc.code, str(exc)) from exc

        _patch_pod(port, ref, release, verify=False)


class BindingReady:
    """``multus/binding-ready/v1``."""

    spec: OpcodeSpec = specs.BINDING_READY

    def capture(self, ctx: EffectContext) -> Any:
        port = _port(ctx)
        handle = _single(ctx, "attachment")
        binding = _binding(port, handle)
        uid = handle.observations.get("uid")
        if not isinstance(uid, str) or not uid:
            raise ExecutorError("E_PORT", f"attachment {handle.id} records no shadow UID")
        return {"binding": binding.to_json(), "uid": uid}

    def apply(self, ctx: EffectContext, before: Any) -> None:
        port = _port(ctx)
        binding = ShadowBinding.from_json(before["binding"])
        ns, name = binding.namespace, binding.name
        live = _api("read the shadow", lambda: port.read_nad(ns, name))
        if live is None:
            raise ExecutorError("E_MULTUS_SHADOW_CONFLICT", f"shadow {ns}/{name} is gone")
        found = shadow.problems(live, binding.nad, uid=str(before["uid"]))
        if found:
            raise _conflict(binding, found)
        if shadow.deleting(live):
            raise _deleting(ns, name)
        if shadow.protection(binding.nad) not in shadow.finalizers(live):
            raise ExecutorError(
                "E_MULTUS_SHADOW_CONFLICT", f"shadow {ns}/{name} lost its protection finalizer"
            )
        if not _selected(port, binding.pod, binding.selection):
            raise ExecutorError(
                "E_MULTUS_CONSUMER", f"Pod {binding.pod.name} no longer selects {name}"
            )

    def observe(self, ctx: EffectContext, before: Any) -> Observed:
        return Observed(True, {"attachment": ctx.inputs["attachment"]})

    def recover(self, ctx: EffectContext, before: Any) -> RecoveryObservation:
        return RecoveryObservation.APPLIED  # apply changes nothing

    def undo(self, ctx: EffectContext, before: Any, outputs: Outputs) -> None:
        port = _port(ctx)
        binding = ShadowBinding.from_json(before["binding"])
        ns, name, uid = binding.namespace, binding.name, str(before["uid"])
        live = _api("read the shadow", lambda: port.read_nad(ns, name), undo=True)
        if live is None or shadow.uid_of(live) != uid:
            return  # gone, or replaced by an object that is not ours
        found = shadow.problems(live, binding.nad, uid=uid, releasing=True)
        if found:
            raise _conflict(binding, found)
        if not shadow.deleting(live):
            request_deletion(port, ns, name, uid)


EXECUTORS: Mapping[str, Executor] = {
    specs.SHADOW_NAD.name: ShadowNad(specs.SHADOW_NAD),
    specs.SHADOW_NAD_SHARED.name: ShadowNad(specs.SHADOW_NAD_SHARED),
    specs.POD_SELECTION.name: PodSelection(),
    specs.BINDING_READY.name: BindingReady(),
}

__all__: Sequence[str] = ("EXECUTORS", "BindingReady", "PodSelection", "ShadowNad")
