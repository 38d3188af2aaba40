"""The resource types the lab serves: built-in kinds plus those that CRDs add at run time.

A :class:`ResourceType` is everything the store and the router need to know about one
``group/version/plural``: its kind, scope, whether it has a ``status`` subresource, whether
it tracks ``metadata.generation``, the field labels its field selectors accept, and for
custom resources the CRD's schema for validation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .selectors import FieldReader, path_reader


@dataclass(frozen=True)
class ResourceType:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    singular: str = ""
    short_names: tuple[str, ...] = ()
    status_subresource: bool = False
    tracks_generation: bool = True
    extra_field_labels: tuple[str, ...] = ()
    schema: Mapping[str, Any] | None = None  # CRD openAPIV3Schema of this version
    custom: bool = False  # served from a CustomResourceDefinition
    versions: tuple[str, ...] = ()  # every served version sharing this storage (CRDs)
    categories: tuple[str, ...] = ()
    field_readers: Mapping[str, FieldReader] = field(default_factory=dict, compare=False)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """``plural.group`` as used in error messages (``pods`` for the core group)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def storage_key(self) -> tuple[str, str]:
        return (self.group, self.plural)

    def readers(self) -> Mapping[str, FieldReader]:
        labels = ["metadata.name", *self.extra_field_labels]
        if self.namespaced:
            labels.append("metadata.namespace")
        readers = {label: path_reader(label) for label in labels}
        readers.update(self.field_readers)
        return readers


def _core(plural: str, kind: str, namespaced: bool, **kw: Any) -> ResourceType:
    return ResourceType("", "v1", plural, kind, namespaced, singular=kind.lower(), **kw)


def _group(
    group: str, version: str, plural: str, kind: str, namespaced: bool, **kw: Any
) -> ResourceType:
    return ResourceType(group, version, plural, kind, namespaced, singular=kind.lower(), **kw)


_EVENT_FIELDS = (
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
)

BUILTINS: tuple[ResourceType, ...] = (
    _core(
        "namespaces",
        "Namespace",
        False,
        short_names=("ns",),
        status_subresource=True,
        tracks_generation=False,
        extra_field_labels=("status.phase",),
    ),
    _core(
        "pods",
        "Pod",
        True,
        short_names=("po",),
        status_subresource=True,
        extra_field_labels=(
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ),
    ),
    _core(
        "nodes",
        "Node",
        False,
        short_names=("no",),
        status_subresource=True,
        tracks_generation=False,
        extra_field_labels=("spec.unschedulable",),
    ),
    _core(
        "events",
        "Event",
        True,
        short_names=("ev",),
        tracks_generation=False,
        extra_field_labels=_EVENT_FIELDS,
        field_readers={"source": path_reader("source.component")},
    ),
    _core("configmaps", "ConfigMap", True, short_names=("cm",), tracks_generation=False),
    _core("secrets", "Secret", True, tracks_generation=False, extra_field_labels=("type",)),
    _core("serviceaccounts", "ServiceAccount", True, short_names=("sa",), tracks_generation=False),
    _group("coordination.k8s.io", "v1", "leases", "Lease", True, tracks_generation=False),
    _group(
        "events.k8s.io", "v1", "events", "Event", True, short_names=("ev",), tracks_generation=False
    ),
    _group(
        "resource.k8s.io",
        "v1",
        "resourceslices",
        "ResourceSlice",
        False,
        extra_field_labels=("spec.nodeName", "spec.driver"),
    ),
    _group("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", False),
    _group(
        "resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", True, status_subresource=True
    ),
    _group("resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate", True),
    _group(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        False,
        short_names=("crd", "crds"),
        status_subresource=True,
    ),
    _group(
        "admissionregistration.k8s.io",
        "v1",
        "validatingwebhookconfigurations",
        "ValidatingWebhookConfiguration",
        False,
    ),
    _group(
        "admissionregistration.k8s.io",
        "v1",
        "mutatingwebhookconfigurations",
        "MutatingWebhookConfiguration",
        False,
    ),
)

CRD = next(t for t in BUILTINS if t.kind == "CustomResourceDefinition")
NAMESPACES = BUILTINS[0]


def from_crd(crd: Mapping[str, Any]) -> list[ResourceType]:
    """The resource types one (already validated) CRD serves, one per served version."""
    spec = crd["spec"]
    names = spec["names"]
    served = [v for v in spec["versions"] if v.get("served", True)]
    versions = tuple(v["name"] for v in served)
    types = []
    for version in served:
        subresources = version.get("subresources") or {}
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        selectable = tuple(f["jsonPath"].lstrip(".") for f in version.get("selectableFields") or [])
        types.append(
            ResourceType(
                group=spec["group"],
                version=version["name"],
                plural=names["plural"],
                kind=names["kind"],
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                singular=names.get("singular") or names["kind"].lower(),
                short_names=tuple(names.get("shortNames") or ()),
                status_subresource="status" in subresources,
                tracks_generation=True,
                extra_field_labels=selectable,
                schema=schema,
                custom=True,
                versions=versions,
                categories=tuple(names.get("categories") or ()),
            )
        )
    return types
