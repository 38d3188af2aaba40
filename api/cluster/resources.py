"""The Kubernetes resources the project reads and writes, as ``group/version/plural`` refs.

A :class:`Resource` is all :class:`~.access.Cluster` needs to build a REST path; one constant
per kind keeps plurals and scopes in one place for the controller, the agent and the lab.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from dmn.api.cluster.errors import InvalidName
from dmn.api.identity import GROUP, VERSION

#: Kubernetes' longest object name (a DNS subdomain)
MAX_NAME_LENGTH = 253


def path_segment(value: str, what: str) -> str:
    """``value`` as one escaped path segment, or :class:`InvalidName`.

    Kubernetes refuses the same names (``IsValidPathSegmentName``: not ``.`` or ``..``, no
    ``/`` or ``%``); refusing them here keeps ``../networkplugins/x`` from walking to
    another collection. What remains is percent-encoded (``?``, ``#``, spaces)."""
    if (
        not value
        or value in (".", "..")
        or len(value) > MAX_NAME_LENGTH
        or "/" in value
        or "%" in value
        or not value.isprintable()
    ):
        raise InvalidName(what, value)
    return quote(value, safe=":@!$&'()*+,;=-._~")


@dataclass(frozen=True)
class Resource:
    group: str  # "" = core
    version: str
    plural: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None, sub: str = "") -> str:
        """The REST path of the collection, or of one object (and its subresource)."""
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{path_segment(namespace, 'namespace')}"
        base += f"/{self.plural}"
        if name is not None:  # "" is an invalid name, never the collection
            base += f"/{path_segment(name, f'{self.kind} name')}"
            if sub:
                base += f"/{path_segment(sub, 'subresource')}"
        return base


# core/v1
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", False)
PODS = Resource("", "v1", "pods", "Pod", True)
NODES = Resource("", "v1", "nodes", "Node", False)
EVENTS = Resource("", "v1", "events", "Event", True)
CONFIG_MAPS = Resource("", "v1", "configmaps", "ConfigMap", True)
SECRETS = Resource("", "v1", "secrets", "Secret", True)
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount", True)

# other built-in groups
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease", True)
EVENTS_V1 = Resource("events.k8s.io", "v1", "events", "Event", True)
RESOURCE_SLICES = Resource("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", False)
DEVICE_CLASSES = Resource("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", False)
RESOURCE_CLAIMS = Resource("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", True)
RESOURCE_CLAIM_TEMPLATES = Resource(
    "resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate", True
)
CUSTOM_RESOURCE_DEFINITIONS = Resource(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False
)
VALIDATING_WEBHOOK_CONFIGURATIONS = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "validatingwebhookconfigurations",
    "ValidatingWebhookConfiguration",
    False,
)
# the Network Plumbing WG's NetworkAttachmentDefinition (Multus automatic mode's shadows and
# templates; the CRD is Multus', never installed by this project's chart)
NETWORK_ATTACHMENT_DEFINITIONS = Resource(
    "k8s.cni.cncf.io", "v1", "network-attachment-definitions", "NetworkAttachmentDefinition", True
)
MUTATING_WEBHOOK_CONFIGURATIONS = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "mutatingwebhookconfigurations",
    "MutatingWebhookConfiguration",
    False,
)

# the project's custom resources (api/crdgen.py is the authority on plurals and scope)
DEVICE_EXPOSURE_POLICIES = Resource(
    GROUP, VERSION, "deviceexposurepolicies", "DeviceExposurePolicy", False
)
NETWORK_PLUGINS = Resource(GROUP, VERSION, "networkplugins", "NetworkPlugin", False)
NETWORK_TOPOLOGIES = Resource(GROUP, VERSION, "networktopologies", "NetworkTopology", False)
NETWORK_TOPOLOGY_REVISIONS = Resource(
    GROUP, VERSION, "networktopologyrevisions", "NetworkTopologyRevision", False
)
NETWORK_ATTACHMENT_STATUSES = Resource(
    GROUP, VERSION, "networkattachmentstatuses", "NetworkAttachmentStatus", True
)
IP_POOLS = Resource(GROUP, VERSION, "ippools", "IPPool", False)
IP_ALLOCATIONS = Resource(GROUP, VERSION, "ipallocations", "IPAllocation", False)

ALL: tuple[Resource, ...] = tuple(v for v in list(globals().values()) if isinstance(v, Resource))
