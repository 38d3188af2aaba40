"""Pod admission: make containerd's NRI required-plugin check hold for Pods of ours (pure).

Why: NRI only calls plugins that are registered. While our node agent is down (a rollout,
a crash, a containerd restart), containerd would create the containers of a Pod that holds
one of our network claims without asking us — the Pod would start without its networks.
containerd's NRI default validator refuses CreateContainer when a plugin the Pod names as
required did not take part; the Pod names it in the annotation
``required-plugins.noderesource.dev/pod`` (a YAML/JSON list). Kubelet hands every Pod
annotation to the runtime, so the annotation has to be on the Pod when it is created: the
mutating webhook adds our plugin name to it, the validating one refuses a Pod of ours
without it (and an update that removes it).

A Pod is *ours* when a device request of one of its claims (``exactly`` or any
``firstAvailable`` subrequest, through a ResourceClaim or a ResourceClaimTemplate) names a
DeviceClass the controller generates (:func:`is_our_class`, the same test the DeviceClass
admission uses), or a container limit names an extended resource such a class declares
(``spec.extendedResourceName``, or the implicit ``deviceclass.resource.kubernetes.io/<class>``).
Pods that are not ours are admitted unchanged: this module never blocks another driver's Pod.

A Pod of ours also gets a required node affinity on the capability labels of the revisions
it uses, and a created one that lacks it or names a Node without them in ``spec.nodeName``
is refused (:mod:`.pod_affinity`, design §9.3).

Everything here is data in, decision out: the thin adapter in :mod:`.pod_sources` reads the
claims, templates and classes the Pod names (:func:`claim_refs` says which), the revisions
those classes pin (:func:`revisions_to_read`) and the Node a created Pod names. Nothing here
raises on any JSON value (a property test feeds it arbitrary Pod-shaped data).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from dmn import NRI_PLUGIN_NAME
from dmn.api.identity import DRIVER, LABEL_MANAGED_BY, LABEL_REVISION, LABEL_TOPOLOGY, MANAGED_BY
from dmn.controller.webhook import pod_affinity
from dmn.interpreter.diagnostics import Code, Diagnostic

#: containerd/NRI's annotation naming the plugins a Pod (or one container) requires.
REQUIRED_PLUGINS = "required-plugins.noderesource.dev"
POD_KEY = f"{REQUIRED_PLUGINS}/pod"
CONTAINER_PREFIX = f"{REQUIRED_PLUGINS}/container."
#: the name Kubernetes gives the extended resource of a DeviceClass without one of its own
IMPLICIT_EXTENDED_PREFIX = "deviceclass.resource.kubernetes.io/"
#: longest annotation value parsed as a plugin list (Kubernetes caps all of them at 256 KiB)
MAX_VALUE = 64 * 1024

CLAIM = "ResourceClaim"
TEMPLATE = "ResourceClaimTemplate"


@dataclass(frozen=True)
class ClaimRef:
    """One ``spec.resourceClaims[i]`` entry: what it names and where."""

    path: str
    kind: str  # CLAIM or TEMPLATE
    name: str


@dataclass(frozen=True)
class World:
    """What the adapter read for one Pod: the claims and templates :func:`claim_refs` named
    (kind, name) -> object, absent when it does not exist; every DeviceClass; the
    NetworkTopologyRevisions :func:`revisions_to_read` named, by name; and the Node a
    created Pod's ``spec.nodeName`` names, by name (absent: it does not exist)."""

    objects: Mapping[tuple[str, str], Mapping[str, Any]] = field(default_factory=dict)
    classes: Sequence[Mapping[str, Any]] = ()
    revisions: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    nodes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class ClassUse:
    """A DeviceClass of ours the Pod uses, and the field that says so."""

    path: str
    name: str


@dataclass
class Decision:
    """The answer for one Pod: JSONPatch operations (mutation), warnings, denials."""

    uses: list[ClassUse] = field(default_factory=list)
    patch: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    denials: list[Diagnostic] = field(default_factory=list)

    @property
    def ours(self) -> bool:
        return bool(self.uses)


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def is_our_class(obj: Any) -> bool:
    """A DeviceClass the controller generates: the managed-by label (per-revision and stable
    classes carry it), or a config carrying our TopologyRootConfiguration."""
    if not isinstance(obj, Mapping):
        return False
    labels = _map(_map(obj.get("metadata")).get("labels"))
    if labels.get(LABEL_MANAGED_BY) == MANAGED_BY:
        return True
    for cfg in _list(_map(obj.get("spec")).get("config")):
        opaque = _map(_map(cfg).get("opaque"))
        params = _map(opaque.get("parameters"))
        if opaque.get("driver") == DRIVER and params.get("kind") == "TopologyRootConfiguration":
            return True
    return False


def claim_refs(pod: Any) -> list[ClaimRef]:
    """The claims and templates ``spec.resourceClaims`` names (entries of the wrong shape
    are skipped: the API server validates Pods before our validating webhook sees them)."""
    refs: list[ClaimRef] = []
    for i, entry in enumerate(_list(_map(_map(pod).get("spec")).get("resourceClaims"))):
        entry = _map(entry)
        path = f"spec.resourceClaims[{i}]"
        claim, template = entry.get("resourceClaimName"), entry.get("resourceClaimTemplateName")
        if isinstance(claim, str) and claim:
            refs.append(ClaimRef(f"{path}.resourceClaimName", CLAIM, claim))
        elif isinstance(template, str) and template:
            refs.append(ClaimRef(f"{path}.resourceClaimTemplateName", TEMPLATE, template))
    return refs


def _requested_classes(ref: ClaimRef, obj: Mapping[str, Any]) -> list[str]:
    """Every ``deviceClassName`` of the claim's device requests (``exactly`` and each
    ``firstAvailable`` subrequest); a template's claim spec is ``spec.spec``."""
    spec = _map(obj.get("spec"))
    if ref.kind == TEMPLATE:
        spec = _map(spec.get("spec"))
    names: list[str] = []
    for request in _list(_map(spec.get("devices")).get("requests")):
        request = _map(request)
        subrequests = _list(request.get("firstAvailable"))
        candidates = [_map(request.get("exactly")), *map(_map, subrequests)]
        for candidate in candidates:
            name = candidate.get("deviceClassName")
            if isinstance(name, str) and name:
                names.append(name)
    return names


def _extended_names(classes: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Extended resource name -> our class that declares it (explicit or implicit)."""
    out: dict[str, str] = {}
    for name, cls in classes.items():
        out[IMPLICIT_EXTENDED_PREFIX + name] = name
        explicit = _map(cls.get("spec")).get("extendedResourceName")
        if isinstance(explicit, str) and explicit:
            out[explicit] = name
    return out


def _containers(pod: Any) -> list[tuple[str, Mapping[str, Any]]]:
    spec = _map(_map(pod).get("spec"))
    return [
        (f"spec.{part}[{i}]", _map(c))
        for part in ("initContainers", "containers")
        for i, c in enumerate(_list(spec.get(part)))
    ]


def _our_classes(world: World) -> dict[str, Mapping[str, Any]]:
    return {
        str(_map(c.get("metadata")).get("name")): c
        for c in world.classes
        if isinstance(c, Mapping) and is_our_class(c)
    }


def class_uses(pod: Any, world: World) -> tuple[list[ClassUse], list[str]]:
    """The classes of ours the Pod uses (by claim or extended resource), and a warning per
    claim or template that does not exist yet (Kubernetes lets it come later)."""
    ours = _our_classes(world)
    uses: list[ClassUse] = []
    warnings: list[str] = []
    for ref in claim_refs(pod):
        obj = world.objects.get((ref.kind, ref.name))
        if obj is None:
            warnings.append(
                f"{ref.kind} {ref.name!r} ({ref.path}) does not exist yet: the Pod was admitted "
                f"without the {POD_KEY} annotation; if it is a claim of "
                "dra-multi-network, the node agent still refuses its containers until the "
                "claim is prepared"
            )
            continue
        for name in _requested_classes(ref, obj):
            if name in ours:
                uses.append(ClassUse(ref.path, name))
    extended = _extended_names(ours)
    for path, container in _containers(pod):
        for resource in _map(_map(container.get("resources")).get("limits")):
            if isinstance(resource, str) and resource in extended:
                uses.append(ClassUse(f"{path}.resources.limits[{resource}]", extended[resource]))
    return uses, warnings


def revisions_to_read(pod: Any, world: World) -> list[str]:
    """The NetworkTopologyRevisions the classes of ours ``pod`` uses pin (``world`` needs
    only the claims, templates and classes): what the adapter reads next."""
    ours = _our_classes(world)
    uses, _ = class_uses(pod, world)
    return pod_affinity.revision_names(ours.get(u.name) for u in uses)


def _needs(uses: list[ClassUse], world: World) -> pod_affinity.Needs:
    pairs = [(u.path, u.name) for u in uses]
    return pod_affinity.needs(pairs, _our_classes(world), world.revisions)


def node_name(pod: Any) -> str | None:
    """The Node ``spec.nodeName`` binds the Pod to, None when it names none."""
    name = _map(_map(pod).get("spec")).get("nodeName")
    return name if isinstance(name, str) and name else None


def parse_plugins(value: Any) -> list[str] | None:
    """The plugin names of a required-plugins annotation value, None when it is not a list
    of names (containerd would refuse to parse it too)."""
    if not isinstance(value, str) or len(value) > MAX_VALUE:
        return None
    try:
        parsed = yaml.safe_load(value)
    except (yaml.YAMLError, RecursionError, ValueError):
        return None
    if not isinstance(parsed, list) or not all(isinstance(p, str) for p in parsed):
        return None
    return list(parsed)


def _requirement_keys(annotations: Mapping[str, Any]) -> list[str]:
    """The required-plugins keys a Pod carries that decide for at least one container: the
    Pod key, the bare key, each container key. NRI takes a container's own key before the
    Pod's, so a container key without our plugin would override ours."""
    return sorted(
        k
        for k in annotations
        if isinstance(k, str)
        and (k in (REQUIRED_PLUGINS, POD_KEY) or k.startswith(CONTAINER_PREFIX))
    )


def _pointer(key: str) -> str:
    return "/metadata/annotations/" + key.replace("~", "~0").replace("/", "~1")


def _encode(names: list[str]) -> str:
    return json.dumps(names, separators=(",", ":"))


def mutate(pod: Any, world: World, plugin: str = NRI_PLUGIN_NAME) -> Decision:
    """For a Pod of ours: JSONPatch operations that put ``plugin`` in the Pod's
    required-plugins annotation (merged into the list already there) and in every
    container-scoped one it carries, and that require the capability labels of its
    revisions in every term of its required node affinity (:func:`.pod_affinity.with_keys`).
    Other names and affinity fields are kept; a value that is not a list, or an affinity not
    of a Pod's shape, is left alone (the validating webhook refuses it, with the reason)."""
    uses, warnings = class_uses(pod, world)
    decision = Decision(uses=uses, warnings=warnings)
    if not uses:
        return decision
    _annotate(pod, decision, plugin)
    need = _needs(uses, world)
    decision.warnings.extend(need.warnings)
    spec = _map(pod).get("spec")
    affinity, problem = pod_affinity.with_keys(_map(spec).get("affinity"), need.keys)
    if problem:
        decision.warnings.append(f"{problem}; the node capability affinity was not added")
    elif affinity is not None and isinstance(spec, Mapping):
        decision.patch.append({"op": "add", "path": "/spec/affinity", "value": affinity})
    return decision


def _annotate(pod: Any, decision: Decision, plugin: str) -> None:
    """Add to ``decision`` the patch (or warnings) for the required-plugins annotations."""
    metadata = _map(pod).get("metadata")
    annotations = _map(_map(metadata).get("annotations"))
    wanted: dict[str, str] = {}
    for key in sorted({POD_KEY, *_requirement_keys(annotations)}):
        current = annotations.get(key)
        names = [] if current is None and key == POD_KEY else parse_plugins(current)
        if names is None:
            decision.warnings.append(
                f"annotation {key} is not a list of plugin names; {plugin!r} was not added to it"
            )
        elif plugin not in names:
            wanted[key] = _encode([*names, plugin])
    if not wanted:
        return
    if not isinstance(metadata, Mapping):
        decision.patch.append({"op": "add", "path": "/metadata", "value": {"annotations": wanted}})
    elif not isinstance(metadata.get("annotations"), Mapping):
        decision.patch.append({"op": "add", "path": "/metadata/annotations", "value": wanted})
    else:
        decision.patch.extend(
            {"op": "add", "path": _pointer(k), "value": v} for k, v in sorted(wanted.items())
        )


def _revision_mix(
    uses: list[ClassUse], classes: Mapping[str, Mapping[str, Any]]
) -> list[Diagnostic]:
    """A denial per use whose class is of another revision of a topology than the first
    class of that topology the Pod uses: one Pod attaches through one revision."""
    first: dict[str, tuple[str, ClassUse]] = {}
    problems: list[Diagnostic] = []
    for use in uses:
        labels = _map(_map(classes.get(use.name, {}).get("metadata")).get("labels"))
        topology, revision = labels.get(LABEL_TOPOLOGY), labels.get(LABEL_REVISION)
        if not isinstance(topology, str) or not isinstance(revision, str):
            continue
        seen = first.setdefault(topology, (revision, use))
        if seen[0] != revision:
            problems.append(
                Diagnostic(
                    Code.E_POD_REVISION_MIXED,
                    f"DeviceClass {use.name!r} is of revision {revision!r} of topology "
                    f"{topology!r}, but {seen[1].path} uses {seen[1].name!r} of revision "
                    f"{seen[0]!r}; use classes of one revision (the stable class follows the "
                    "newest Ready one)",
                    path=use.path,
                )
            )
    return problems


def _lists_plugin(annotations: Mapping[str, Any], key: str, plugin: str) -> bool:
    names = parse_plugins(annotations.get(key))
    return names is not None and plugin in names


def validate(
    pod: Any, old: Any, world: World, plugin: str = NRI_PLUGIN_NAME, operation: str = "CREATE"
) -> Decision:
    """Denials for a Pod (after mutation): a created Pod of ours must name ``plugin`` in its
    Pod required-plugins annotation and in every container-scoped one, must not use
    classes of two revisions of one topology, must require its revisions' capability labels
    in every term of its required node affinity, and a ``spec.nodeName`` it names must be a
    Node carrying them; an UPDATE never removes ``plugin`` from a required-plugins annotation
    that named it (and is not judged otherwise: ``world`` is not read for it, and a Pod's
    affinity can only change while it is gated)."""
    annotations = _map(_map(_map(pod).get("metadata")).get("annotations"))
    if operation != "CREATE":
        # an update changes neither claims nor extended resources: only the removal rule
        # applies (a Pod of ours created before this webhook may still drop a finalizer)
        decision = Decision()
    else:
        uses, warnings = class_uses(pod, world)
        decision = Decision(uses=uses, warnings=warnings)
    uses = decision.uses
    if uses:
        decision.denials.extend(_revision_mix(uses, _our_classes(world)))
        for key in sorted({POD_KEY, *_requirement_keys(annotations)}):
            if not _lists_plugin(annotations, key, plugin):
                decision.denials.append(
                    Diagnostic(
                        Code.E_POD_NRI_REQUIREMENT,
                        f"the Pod uses a network of dra-multi-network ({uses[0].path}: "
                        f"DeviceClass {uses[0].name!r}) but its annotation {key} does not list "
                        f"{plugin!r} as a YAML list of names (containerd would then create its "
                        "containers while the node agent is down)",
                        path=f"metadata.annotations[{key}]",
                    )
                )
        need = _needs(uses, world)
        decision.warnings.extend(need.warnings)
        spec = _map(_map(pod).get("spec"))
        decision.denials.extend(pod_affinity.affinity_denials(spec.get("affinity"), need))
        decision.denials.extend(pod_affinity.node_denials(spec.get("nodeName"), world.nodes, need))
    if operation == "UPDATE":
        before = _map(_map(_map(old).get("metadata")).get("annotations"))
        for key in _requirement_keys(before):
            if _lists_plugin(before, key, plugin) and not _lists_plugin(annotations, key, plugin):
                decision.denials.append(
                    Diagnostic(
                        Code.E_POD_NRI_REQUIREMENT_REMOVED,
                        f"the update removes {plugin!r} from the annotation {key}",
                        path=f"metadata.annotations[{key}]",
                    )
                )
    return decision
