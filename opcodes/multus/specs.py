"""``multus/*`` opcodes: the API effects of Multus automatic mode (design §6.8).

Why these are effects like any other: a shadow NetworkAttachmentDefinition and an entry in the
Pod's ``k8s.v1.cni.cncf.io/networks`` selection are changes this node makes for one
allocation, outside the kernel but exactly as real — Multus runs the delegate CNI plugin
from them at sandbox creation. So they go through the same runner: intent journaled before
the request, a deterministic name so recovery finds what a lost response created, ownership
proven by the UID and content recorded (never by a name or an annotation a tenant can
write), undo from the record alone with UID preconditions.

Why ``prepare``: automatic mode hands the device to Multus at NodePrepare, before the sandbox
exists (the kubelet prepares resources before it creates the sandbox, and Multus' ADD runs
inside sandbox creation). There is no ``connect`` effect: Multus is the only owner of the
secondary CNI ADD and DEL in this mode.

The three effects of a binding run in this order and undo in the reverse, which is the
release order of design §6.8: ``multus/binding-ready`` (first undone) requests the shadow's
deletion with its UID as precondition; ``multus/pod-selection`` removes the claim's
owned selections; ``multus/shadow-nad`` (last undone, after every other effect of the
preparation is durably undone) removes only this node's protection finalizer with a
UID- and resourceVersion-checked JSON patch.

The shadow comes in two typed forms because what Multus does with the device is access the
checker proves: ``multus/shadow-nad`` takes a device handed over whole (``ExclusiveConfigure``:
any delegate), ``multus/shadow-nad-shared`` a share of a parent (``CreateChild``: only a
macvlan or ipvlan delegate, which makes a child of it).
"""

from __future__ import annotations

from dmn.opcodes.parameter_types import ParameterModel
from dmn.opcodes.spec import OpcodeSpec, PortSpec
from dmn.vocabulary.terms import (
    Access,
    HandleType,
    Hook,
    LinkType,
    RecoveryStrategy,
    Reversibility,
    ScopeKind,
)

_PREPARE = frozenset({Hook.PREPARE})
_RECOVERY = frozenset({RecoveryStrategy.OBSERVE_AND_RECONCILE, RecoveryStrategy.QUARANTINE})
_READ = frozenset({Access.READ})


class NoParameters(ParameterModel):
    """No parameters: what is bound — consumer, template, rendered configuration, names —
    is what the node agent verified and rendered for the allocated device before anything
    changed, handed to the effect by the node (never from a program or configuration) and
    journaled in its before-image."""


def _attachment(inherits: str | None = None) -> PortSpec:
    """The shadow's handle as an output (it carries Read: a later effect may name it)."""
    return PortSpec(
        HandleType.NETWORK_ATTACHMENT, None, ScopeKind.HOST, grants=_READ, inherits=inherits
    )


_ATTACHMENT_INPUT = PortSpec(HandleType.NETWORK_ATTACHMENT, None, ScopeKind.HOST, Access.READ)


_SHADOW_CHANGES = (
    "Creates, in the consuming Pod's namespace, one NetworkAttachmentDefinition under a "
    "name derived from the binding (Pod, claim, driver, pool, device) whose "
    "`spec.config` is the administrator's template rendered for the allocated device "
    "(frozen bytes, digest journaled), owned by the verified Pod (ownerReference with "
    "its UID, `blockOwnerDeletion: false`), carrying this node's protection finalizer "
    "and provenance labels and annotations — all in the one create, journaled before "
    "it is sent. A lost response is resolved by reading the name: an object equal to "
    "the recorded one in identity and content is adopted; any other object under the "
    "name is `E_MULTUS_SHADOW_CONFLICT` and is never changed. A shadow being deleted "
    "is `E_MULTUS_SHADOW_DELETING`."
)
_SHADOW_UNDO = (
    "Last of the binding's undos, after every other effect of the preparation is "
    "durably undone: makes sure the recorded shadow (same UID) has been asked to go, "
    "then removes only this node's finalizer from it with a JSON patch that tests its "
    "UID and resourceVersion (a changed resourceVersion is read again and retried; a "
    "replaced UID is never touched). A shadow that is gone, or is being deleted "
    "without our finalizer, is done."
)


def _shadow(name: str, summary: str, access: Access, delegates: str) -> OpcodeSpec:
    return OpcodeSpec(
        name=name,
        summary=summary,
        changes=f"{_SHADOW_CHANGES} {delegates}",
        undo=_SHADOW_UNDO,
        parameters=NoParameters,
        inputs={
            "device": PortSpec(
                HandleType.KERNEL_INTERFACE, frozenset({LinkType.ETHERNET}), ScopeKind.HOST, access
            )
        },
        outputs={"attachment": _attachment()},
        hooks=_PREPARE,
        reversibility=Reversibility.REVERSIBLE,
        recovery=_RECOVERY,
        requires=frozenset({"consumer-verified", "shadow-name-free"}),
        postconditions=frozenset({"shadow-present"}),
    )


SHADOW_NAD = _shadow(
    "multus/shadow-nad/v1",
    "Create the Pod-owned shadow NetworkAttachmentDefinition for a whole allocated device.",
    Access.EXCLUSIVE_CONFIGURE,
    "The device is handed over whole: any delegate (host-device, sriov, or a macvlan or "
    "ipvlan master).",
)
SHADOW_NAD_SHARED = _shadow(
    "multus/shadow-nad-shared/v1",
    "Create the Pod-owned shadow NetworkAttachmentDefinition for a share of a parent.",
    Access.CREATE_CHILD,
    "The device is a share of its parent: only a macvlan or ipvlan delegate, whose child "
    "Multus creates (a delegate that takes the device whole is `E_MULTUS_DEVICE_MISMATCH`).",
)

POD_SELECTION = OpcodeSpec(
    name="multus/pod-selection/v1",
    summary="Add the shadow to the Pod's Multus network selection, recording ownership.",
    changes=(
        "Adds one entry naming the shadow and its interface to the Pod's "
        "`k8s.v1.cni.cncf.io/networks` annotation and records it in this node's "
        "registry annotation, with a JSON patch that tests the Pod's UID and "
        "resourceVersion (a conflict is read again: Pod UID, node and the claim's "
        "reservation verified anew, the merge recomputed from the live annotations). "
        "Every other selection, its unknown fields and order are kept. Refused, with "
        "nothing changed, for a manual selection of the managed template "
        "(`E_MULTUS_MANUAL_SELECTION`) or an annotation over the size limit "
        "(`E_MULTUS_ANNOTATION_SIZE`)."
    ),
    undo=(
        "Removes the claim's owned entries from the selection and the registry, the same "
        "way, from the Pod of the recorded UID only; a Pod that is gone or replaced needs "
        "nothing."
    ),
    parameters=NoParameters,
    inputs={"attachment": _ATTACHMENT_INPUT},
    outputs={"attachment": _attachment("attachment")},
    hooks=_PREPARE,
    reversibility=Reversibility.REVERSIBLE,
    recovery=_RECOVERY,
    requires=frozenset({"consumer-verified", "selection-mergeable"}),
    postconditions=frozenset({"selection-present"}),
)

BINDING_READY = OpcodeSpec(
    name="multus/binding-ready/v1",
    summary="Prove the binding complete; first of its undos: request the shadow's deletion.",
    changes=(
        "Changes nothing: reads the shadow (recorded UID, identity, frozen content, "
        "finalizer, not being deleted) and the Pod's selection once more before the "
        "preparation is Ready."
    ),
    undo=(
        "First of the binding's undos (the release order of design §6.8): deletes the shadow "
        "with its recorded UID as precondition (one being deleted, or gone, is fine); our "
        "finalizer keeps it, with its frozen configuration, until `multus/shadow-nad/v1` is "
        "undone."
    ),
    parameters=NoParameters,
    inputs={"attachment": _ATTACHMENT_INPUT},
    outputs={"attachment": _attachment("attachment")},
    hooks=_PREPARE,
    reversibility=Reversibility.REVERSIBLE,
    recovery=_RECOVERY,
    requires=frozenset({"shadow-owned"}),
    postconditions=frozenset({"shadow-present", "selection-present"}),
)

SPECS: tuple[OpcodeSpec, ...] = (SHADOW_NAD, SHADOW_NAD_SHARED, POD_SELECTION, BINDING_READY)
