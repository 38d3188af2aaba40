"""Multus automatic mode at NodePrepare: verify the consumer and render every template of a
claim before anything changes (design §6.8).

:func:`plan_bindings` is called with a claim the node already verified against its revision
and this node's devices (:func:`~.verify.verify_allocation`). For every root of the builtin
``multus-cni`` plugin it returns the :class:`~dmn.opcodes.multus_objects.ShadowBinding` the
``multus/*`` effects bind; for a claim without one it returns ``[]`` and reads nothing. It
reads, never writes: the Pod, the Pod's other claims and their revisions (for the interface
names the Pod already uses), the template NetworkAttachmentDefinitions and the shadow names.
Every refusal is a :class:`~.verify.Refusal` with the reason of design §6.8, raised before
the first effect runs, so bad input changes nothing on the node or in the API:

1. **Consumer.** The claim is reserved for exactly one Pod (``reservedFor``: one entry,
   core group, resource ``pods``, name and UID); that Pod, read live, has that UID, runs on
   this node, is not terminating, does not use the host network, and references the claim
   (a claim generated for the Pod's extended resources is not supported). Else
   ``E_MULTUS_CONSUMER``.
2. **Template.** The device's published ``multusTemplate`` attribute (the administrator's
   DeviceExposurePolicy ``attributes``) and the step's ``template`` configuration (the
   class's) resolve to one template, a missing namespace to the Pod's
   (:func:`~dmn.api.multus.resolution.resolve_template`); the node reads it with its own
   credentials: absent is ``E_MULTUS_TEMPLATE_MISSING``, forbidden (403) is
   ``E_MULTUS_TEMPLATE_FORBIDDEN``.
3. **Device.** The allocated device comes from the node's inventory (the link the persona
   was scanned as, its PCI address), never from configuration; a delegate that takes the
   device whole (host-device, sriov) needs a persona granting ``ExclusiveConfigure``, a
   macvlan/ipvlan master a share (``CreateChild``) or a whole link
   (``E_MULTUS_DEVICE_MISMATCH``).
4. **Render.** :func:`~dmn.api.multus.template.render_template` freezes the configuration.
5. **Names.** The binding's key and shadow name (:mod:`dmn.api.multus.names`), interfaces
   ``net<n>`` skipping every name the Pod's selections and this driver's own interfaces
   (every claim of the Pod, renamed as attachment renames them) already take; a binding the
   Pod's registry already records keeps its interface.
6. **Selection.** The Pod's selection takes every entry of the claim
   (:func:`~dmn.api.multus.selections.merge_selections`, dry run: manual selection of the
   template, interface conflicts, the annotation size limit), and no object of another
   owner holds a shadow name (``E_MULTUS_SHADOW_CONFLICT``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from dmn.agent.coordinator.config import NodeConfig
from dmn.agent.coordinator.handles import DeviceView
from dmn.agent.coordinator.interface_names import IFNAME_KEY, distinct_interface_names
from dmn.agent.coordinator.node_objects import referenced_claims
from dmn.agent.coordinator.verify import Refusal, VerifiedClaim, VerifiedRoot, driver_results
from dmn.api.cluster import ApiFailure, Cluster, Forbidden, NotFound
from dmn.api.cluster import resources as r
from dmn.api.multus.errors import (
    DEVICE_MISMATCH,
    SHADOW_CONFLICT,
    TEMPLATE_FORBIDDEN,
    TEMPLATE_MISSING,
    MultusError,
)
from dmn.api.multus.names import BindingIdentity, assign_interfaces, binding_key, shadow_name
from dmn.api.multus.resolution import resolve_template
from dmn.api.multus.selections import (
    REGISTRY_ANNOTATION,
    ManagedSelection,
    merge_selections,
    parse_registry,
    selected_interfaces,
)
from dmn.api.multus.template import (
    AllocatedDevice,
    RenderedTemplate,
    SourceTemplate,
    TemplateRef,
    render_template,
)
from dmn.opcodes.multus_objects import PodRef, SelectionEntry, ShadowBinding
from dmn.opcodes.multus_shadow import problems
from dmn.vocabulary.terms import Access, HandleType

#: The builtin plugins of this mode: a whole device, and a share of a parent.
MULTUS_PLUGINS = frozenset({"multus-cni", "multus-cni-shared"})
CONSUMER = "E_MULTUS_CONSUMER"

DOMAIN = "multus.dra-multi-network.schseba.github.io"
FINALIZER = f"{DOMAIN}/attachment-protection"
BINDING_ANNOTATION = f"{DOMAIN}/binding"
#: The node's name (not a label: a node name may exceed a label value's 63 characters); the
#: chart's policy dra-multi-network-node-shadows lets an agent write only its own node's
NODE_NAME_ANNOTATION = f"{DOMAIN}/node-name"
MANAGED_BY = f"{DOMAIN}/managed-by"
POD_UID_LABEL = f"{DOMAIN}/pod-uid"
CLAIM_UID_LABEL = f"{DOMAIN}/claim-uid"
NODE_UID_LABEL = f"{DOMAIN}/node-uid"
MANAGED_BY_VALUE = "dra-multi-network"
BINDING_VERSION = 1

#: Delegates that take the allocated device whole, and those that make children of it.
WHOLE = frozenset({"host-device", "sriov"})
CHILDREN = frozenset({"macvlan", "ipvlan"})


def multus_roots(verified: VerifiedClaim) -> list[VerifiedRoot]:
    """The roots of the claim that run a builtin of this mode (an administrator's plugin never
    binds a template: its multus effects refuse without a binding)."""
    return [
        root
        for root in verified.roots
        if root.plugin.name in MULTUS_PLUGINS
        and root.plugin.descriptor.spec.implementation.type == "Builtin"
    ]


def _refuse(exc: MultusError) -> Refusal:
    return Refusal(exc.reason, exc.message, exc.field)


def _get(cluster: Cluster, res: r.Resource, name: str, namespace: str) -> dict[str, Any] | None:
    try:
        return cluster.get(res, name, namespace)
    except NotFound:
        return None
    except ApiFailure as exc:
        raise Refusal(
            "E_API", f"reading {res.kind} {namespace}/{name}: {exc}", retryable=True
        ) from exc


def consumer(cluster: Cluster, config: NodeConfig, claim: Mapping[str, Any]) -> dict[str, Any]:
    """The one live Pod on this node the claim is reserved for (rule 1 of the module doc)."""
    meta = claim.get("metadata") or {}
    namespace, claim_name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    reserved = (claim.get("status") or {}).get("reservedFor") or []
    entry = reserved[0] if len(reserved) == 1 and isinstance(reserved[0], Mapping) else None
    if (
        entry is None
        or entry.get("resource") != "pods"
        or entry.get("apiGroup")
        or not entry.get("name")
        or not entry.get("uid")
    ):
        raise Refusal(
            CONSUMER,
            f"claim {namespace}/{claim_name} is reserved for {len(reserved)} consumers; "
            "automatic mode needs exactly one Pod",
            "status.reservedFor",
        )
    pod = _get(cluster, r.PODS, str(entry["name"]), namespace)
    problem = ""
    if pod is None:
        problem = f"Pod {namespace}/{entry['name']} does not exist"
    else:
        pod_meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        if pod_meta.get("uid") != entry["uid"]:
            problem = f"Pod {namespace}/{entry['name']} is not UID {entry['uid']}"
        elif spec.get("nodeName") != config.node_name:
            problem = f"Pod {entry['name']} is bound to {spec.get('nodeName')!r}, not this node"
        elif pod_meta.get("deletionTimestamp"):
            problem = f"Pod {entry['name']} is terminating"
        elif spec.get("hostNetwork"):
            problem = f"Pod {entry['name']} uses the host network"
        else:
            extended = ((pod.get("status") or {}).get("extendedResourceClaimStatus")) or {}
            names = referenced_claims(pod) or []
            if extended.get("resourceClaimName") == claim_name:
                problem = f"claim {claim_name} was made for the Pod's extended resources"
            elif claim_name not in names:
                problem = f"Pod {entry['name']} does not reference claim {claim_name}"
    if problem:
        raise Refusal(CONSUMER, problem, "status.reservedFor")
    assert pod is not None
    return pod


def _our_interfaces(
    cluster: Cluster,
    config: NodeConfig,
    pod: Mapping[str, Any],
    claim: Mapping[str, Any],
    verified: VerifiedClaim,
) -> set[str]:
    """The interface names this driver's own path gives the Pod (every claim's steps, in the
    Pod's order, renamed as attachment renames them): Multus must not take them."""
    namespace = str((pod.get("metadata") or {}).get("namespace"))
    this = str((claim.get("metadata") or {}).get("name"))
    revisions: dict[str, Mapping[str, Any] | None] = {}
    claims_steps: list[list[tuple[str, Mapping[str, Any]]]] = []
    for name in referenced_claims(dict(pod)) or []:
        if name == this:
            steps = [(root.step, root.config) for root in verified.roots]
            steps += [(sid, s.config) for sid, s in verified.operations.items()]
            claims_steps.append([(s, c) for s, c in steps if s not in _multus_steps(verified)])
            continue
        other = _get(cluster, r.RESOURCE_CLAIMS, name, namespace)
        results = driver_results(other, config.driver) if other is not None else []
        if not results:
            continue
        ref = results[0].root.revision_ref.name
        if ref not in revisions:
            revisions[ref] = _get(cluster, r.NETWORK_TOPOLOGY_REVISIONS, ref, "")
        revision = revisions[ref]
        if revision is None:
            continue
        workload = {res.root.root_step: res.workload for res in results}
        normalized = (revision.get("spec") or {}).get("normalizedSpec") or {}
        claims_steps.append(
            [
                (str(s["id"]), {**(s.get("config") or {}), **workload.get(str(s["id"]), {})})
                for s in normalized.get("steps") or []
                if (s.get("pluginRef") or {}).get("name") not in MULTUS_PLUGINS
            ]
        )
    names = {str(c[IFNAME_KEY]) for steps in claims_steps for _, c in steps if IFNAME_KEY in c}
    for renames in distinct_interface_names(claims_steps):
        names |= set(renames.values())
    return names


def _multus_steps(verified: VerifiedClaim) -> set[str]:
    return {root.step for root in multus_roots(verified)}


def _template(cluster: Cluster, ref: TemplateRef) -> tuple[SourceTemplate, Mapping[str, Any]]:
    try:
        obj = cluster.get(r.NETWORK_ATTACHMENT_DEFINITIONS, ref.name, ref.namespace)
    except NotFound as exc:
        raise Refusal(
            TEMPLATE_MISSING, f"template {ref.namespace}/{ref.name} does not exist"
        ) from exc
    except Forbidden as exc:
        raise Refusal(
            TEMPLATE_FORBIDDEN,
            f"the node may not read templates in namespace {ref.namespace}: {exc}",
        ) from exc
    except ApiFailure as exc:
        raise Refusal(
            "E_API", f"reading template {ref.namespace}/{ref.name}: {exc}", retryable=True
        ) from exc
    meta = obj.get("metadata") or {}
    config = (obj.get("spec") or {}).get("config")
    source = SourceTemplate(
        namespace=ref.namespace,
        name=ref.name,
        uid=str(meta.get("uid") or ""),
        annotations={str(k): str(v) for k, v in (meta.get("annotations") or {}).items()},
        config=config if isinstance(config, str) else "",
    )
    return source, obj


def _class_ref(root: VerifiedRoot) -> tuple[TemplateRef | None, bool]:
    template = root.config.get("template")
    if not isinstance(template, Mapping):
        return None, False
    namespace = str(template.get("namespace") or "")
    return TemplateRef(namespace, str(template.get("name") or "")), bool(namespace)


def _device(devices: DeviceView, root: VerifiedRoot) -> AllocatedDevice:
    inventory = root.persona.inventory_id
    link = devices.link(inventory)
    if link is None:
        raise Refusal(
            "E_DEVICE_GONE",
            f"device {root.result.device} has no kernel link on this node",
            root.result.device,
        )
    function = devices.function(inventory)
    pci = function.pci_address.lower() if function is not None else None
    return AllocatedDevice("link", link.ifname, pci)


def _check_grant(root: VerifiedRoot, rendered: RenderedTemplate) -> None:
    accesses = {
        a
        for g in root.persona.grants
        if g.type in (HandleType.KERNEL_INTERFACE, HandleType.SHARED_PARENT)
        for a in g.accesses
    }
    whole = Access.EXCLUSIVE_CONFIGURE in accesses
    if rendered.delegate_type in WHOLE and not whole:
        raise Refusal(
            DEVICE_MISMATCH,
            f"{rendered.delegate_type} takes the device whole; device {root.result.device} "
            f"({root.persona.persona}) is only a share of its parent",
            root.result.device,
        )
    if rendered.delegate_type in CHILDREN and not (whole or Access.CREATE_CHILD in accesses):
        raise Refusal(
            DEVICE_MISMATCH,
            f"{rendered.delegate_type} makes a child of device {root.result.device}, whose "
            f"persona {root.persona.persona} grants neither a share nor the whole link",
            root.result.device,
        )


def shadow_object(
    config: NodeConfig,
    pod: Mapping[str, Any],
    identity: BindingIdentity,
    name: str,
    interface: str,
    rendered: RenderedTemplate,
    source: Mapping[str, Any],
) -> dict[str, Any]:
    """The complete shadow to create: in the Pod's namespace, owned by the Pod (its UID,
    ``blockOwnerDeletion: false``, no ``controller``), protected by this node's finalizer,
    with only our labels and the versioned provenance annotation (never anything copied from
    the template) and the frozen configuration."""
    pod_meta = pod["metadata"]
    provenance = {
        "version": BINDING_VERSION,
        "bindingKey": binding_key(identity),
        "podUID": identity.pod_uid,
        "claimUID": identity.claim_uid,
        "request": identity.request,
        "driver": identity.driver,
        "pool": identity.pool,
        "device": identity.device,
        "nodeName": config.node_name,
        "nodeUID": config.node_uid,
        "source": {
            "namespace": rendered.source.namespace,
            "name": rendered.source.name,
            "uid": rendered.source_uid,
            "resourceVersion": str((source.get("metadata") or {}).get("resourceVersion") or ""),
        },
        "interface": interface,
        "configSHA256": rendered.digest,
    }
    labels = {
        MANAGED_BY: MANAGED_BY_VALUE,
        POD_UID_LABEL: identity.pod_uid,
        CLAIM_UID_LABEL: identity.claim_uid,
    }
    if config.node_uid:
        labels[NODE_UID_LABEL] = config.node_uid
    return {
        "apiVersion": r.NETWORK_ATTACHMENT_DEFINITIONS.api_version,
        "kind": r.NETWORK_ATTACHMENT_DEFINITIONS.kind,
        "metadata": {
            "name": name,
            "namespace": str(pod_meta["namespace"]),
            "labels": labels,
            "annotations": {
                BINDING_ANNOTATION: json.dumps(provenance, sort_keys=True, separators=(",", ":")),
                NODE_NAME_ANNOTATION: config.node_name,
            },
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": str(pod_meta["name"]),
                    "uid": identity.pod_uid,
                    "blockOwnerDeletion": False,
                }
            ],
            "finalizers": [FINALIZER],
        },
        "spec": {"config": rendered.config.decode("utf-8")},
    }


def plan_bindings(
    cluster: Cluster,
    config: NodeConfig,
    devices: DeviceView,
    claim: Mapping[str, Any],
    verified: VerifiedClaim,
) -> list[ShadowBinding]:
    """The bindings of every ``multus-cni`` root of the claim (module doc), or ``[]``."""
    roots = multus_roots(verified)
    if not roots:
        return []
    pod = consumer(cluster, config, claim)
    pod_meta = pod["metadata"]
    namespace, pod_uid = str(pod_meta["namespace"]), str(pod_meta["uid"])
    claim_meta = claim["metadata"]
    annotations = {str(k): str(v) for k, v in (pod_meta.get("annotations") or {}).items()}
    try:
        taken = set(selected_interfaces(annotations))
    except MultusError as exc:
        raise _refuse(exc) from exc
    taken |= _our_interfaces(cluster, config, pod, claim, verified)
    planned: list[tuple[VerifiedRoot, BindingIdentity, RenderedTemplate, Mapping[str, Any]]] = []
    for root in roots:
        class_ref, given = _class_ref(root)
        try:
            ref = resolve_template(root.persona.attributes(), class_ref, given, namespace)
        except MultusError as exc:
            raise _refuse(exc) from exc
        source, source_obj = _template(cluster, ref)
        try:
            rendered = render_template(source, _device(devices, root))
        except MultusError as exc:
            raise _refuse(exc) from exc
        _check_grant(root, rendered)
        identity = BindingIdentity(
            pod_uid,
            verified.claim_uid,
            root.result.request,
            config.driver,
            root.result.pool,
            root.result.device,
        )
        planned.append((root, identity, rendered, source_obj))
    interfaces = _interfaces(annotations, [p[1] for p in planned], taken)
    ref_pod = PodRef(
        namespace,
        str(pod_meta["name"]),
        pod_uid,
        config.node_name,
        str(claim_meta["namespace"]),
        str(claim_meta["name"]),
        verified.claim_uid,
    )
    bindings: list[ShadowBinding] = []
    for root, identity, rendered, source_obj in planned:
        name = shadow_name(identity, rendered.source)
        interface = interfaces[identity]
        body = shadow_object(config, pod, identity, name, interface, rendered, source_obj)
        selection = SelectionEntry(
            binding_key(identity),
            verified.claim_uid,
            namespace,
            name,
            interface,
            rendered.source.namespace,
            rendered.source.name,
        )
        bindings.append(
            ShadowBinding(
                verified.claim_uid,
                root.result.request,
                root.result.pool,
                root.result.device,
                ref_pod,
                body,
                rendered.digest,
                interface,
                selection,
                rendered.delegate_type,
            )
        )
    _check_selection(annotations, bindings)
    _check_shadow_names(cluster, bindings)
    return bindings


def _interfaces(
    annotations: Mapping[str, str], identities: Sequence[BindingIdentity], taken: set[str]
) -> dict[BindingIdentity, str]:
    """``net<n>`` per binding; a binding the Pod's registry already records keeps its
    interface (a retry after a crash left it merged: a prepared binding never changes)."""
    try:
        recorded = {
            s.key: s.interface for s in parse_registry(annotations.get(REGISTRY_ANNOTATION))
        }
    except MultusError as exc:
        raise _refuse(exc) from exc
    kept = {i: recorded[binding_key(i)] for i in identities if binding_key(i) in recorded}
    fresh = assign_interfaces([i for i in identities if i not in kept], frozenset(taken))
    return {**kept, **fresh}


def managed(entry: SelectionEntry) -> ManagedSelection:
    return ManagedSelection(
        entry.key,
        entry.claim_uid,
        entry.namespace,
        entry.name,
        entry.interface,
        TemplateRef(entry.source_namespace, entry.source_name),
    )


def _check_selection(annotations: Mapping[str, str], bindings: Sequence[ShadowBinding]) -> None:
    try:
        merge_selections(annotations, [managed(b.selection) for b in bindings])
    except MultusError as exc:
        raise _refuse(exc) from exc


def _check_shadow_names(cluster: Cluster, bindings: Sequence[ShadowBinding]) -> None:
    for b in bindings:
        live = _get(cluster, r.NETWORK_ATTACHMENT_DEFINITIONS, b.name, b.namespace)
        found = problems(live, b.nad) if live is not None else []
        if found:
            raise Refusal(
                SHADOW_CONFLICT,
                f"{b.namespace}/{b.name} exists but is not this binding's shadow "
                f"({'; '.join(found)}); it is never changed or adopted",
                b.device,
            )


class MultusPlanner:
    """:func:`plan_bindings` over the agent's cluster connection, node and devices."""

    def __init__(self, cluster: Cluster, config: NodeConfig, devices: DeviceView) -> None:
        self.cluster = cluster
        self.config = config
        self.devices = devices

    def plan(self, claim: Mapping[str, Any], verified: VerifiedClaim) -> list[ShadowBinding]:
        return plan_bindings(self.cluster, self.config, self.devices, claim, verified)
