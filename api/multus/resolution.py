"""Which template NAD an allocated device binds to: the administrator's precedence.

Two administrator sources can name a template: the allocated device's
:data:`TEMPLATE_ATTRIBUTE` (set per device through a DeviceExposurePolicy exposure's
``attributes``, published under the driver's attribute domain) and the class's configuration
(``class_ref``). :func:`resolve_template` applies the precedence of issue 41:

1. A per-device reference, when present, must be well formed; a malformed one is an error,
   never a reason to fall back to the class.
2. When both exist, their namespace/name pairs after resolution must be equal: a
   disagreement is :data:`~dmn.api.multus.errors.TEMPLATE_CONFLICT`, not an override.
3. Otherwise the one that exists wins; with none, :data:`~dmn.api.multus.errors.TEMPLATE_MISSING`.

A missing or empty namespace resolves to the verified Pod's namespace, once, here; never to
the policy's, the class's or the driver's namespace. Whether the Pod may read the resolved
namespace is the caller's check (``E_MULTUS_TEMPLATE_FORBIDDEN``).

Attribute value: ``"name"`` or ``"namespace/name"``, at most 64 characters (the DRA attribute
string limit; a longer reference is refused, never truncated — use the class configuration).
"""

from __future__ import annotations

from collections.abc import Mapping

from dmn.api.multus.errors import TEMPLATE_CONFLICT, TEMPLATE_INVALID, TEMPLATE_MISSING, MultusError
from dmn.api.multus.template import TemplateRef, valid_dns_label, valid_dns_subdomain

TEMPLATE_ATTRIBUTE = "dra-multi-network.schseba.github.io/multusTemplate"

#: Kubernetes' limit on a DRA device attribute's string value.
MAX_ATTRIBUTE_VALUE = 64

_FIELD = f"attributes[{TEMPLATE_ATTRIBUTE}]"


def _attribute_text(value: object) -> str:
    """The string of an attribute, given plainly or as ResourceSlice's ``{"string": ...}``."""
    if isinstance(value, Mapping):
        if set(value) != {"string"}:
            raise MultusError(
                TEMPLATE_INVALID, _FIELD, "the template attribute must be a string attribute"
            )
        value = value["string"]
    if not isinstance(value, str):
        raise MultusError(TEMPLATE_INVALID, _FIELD, "the template attribute must be a string")
    return value


def parse_reference(text: str, field: str) -> tuple[str, str]:
    """``"name"`` or ``"namespace/name"`` as ``(namespace or "", name)``; refused if malformed."""
    parts = text.split("/")
    if len(parts) > 2:
        raise MultusError(TEMPLATE_INVALID, field, f"{text!r}: more than one '/'")
    namespace, name = (parts[0], parts[1]) if len(parts) == 2 else ("", parts[0])
    if len(parts) == 2 and not namespace:
        raise MultusError(TEMPLATE_INVALID, field, f"{text!r}: empty namespace before '/'")
    if not name:
        raise MultusError(TEMPLATE_INVALID, field, f"{text!r}: the template name is empty")
    if namespace and not valid_dns_label(namespace):
        raise MultusError(TEMPLATE_INVALID, field, f"{namespace!r} is no namespace name")
    if not valid_dns_subdomain(name):
        raise MultusError(TEMPLATE_INVALID, field, f"{name!r} is no NAD name")
    return namespace, name


def device_reference(device_attributes: Mapping[str, object]) -> tuple[str, str] | None:
    """The per-device reference (unresolved namespace may be ""), or None when absent."""
    if TEMPLATE_ATTRIBUTE not in device_attributes:
        return None
    text = _attribute_text(device_attributes[TEMPLATE_ATTRIBUTE])
    if len(text) > MAX_ATTRIBUTE_VALUE:
        raise MultusError(
            TEMPLATE_INVALID, _FIELD, f"{len(text)} characters, more than {MAX_ATTRIBUTE_VALUE}"
        )
    return parse_reference(text, _FIELD)


def resolve_template(
    device_attributes: Mapping[str, object],
    class_ref: TemplateRef | None,
    class_ref_namespace_given: bool,
    pod_namespace: str,
) -> TemplateRef:
    """The one template the device binds to, namespace resolved against ``pod_namespace``.

    ``class_ref_namespace_given`` False means the class named no namespace (its
    ``class_ref.namespace`` is then ignored); given but empty means the same.
    """
    if not valid_dns_label(pod_namespace):
        raise MultusError(TEMPLATE_INVALID, "pod.namespace", f"{pod_namespace!r} is no namespace")
    per_device = device_reference(device_attributes)
    from_device = (
        None if per_device is None else TemplateRef(per_device[0] or pod_namespace, per_device[1])
    )
    from_class: TemplateRef | None = None
    if class_ref is not None:
        namespace = class_ref.namespace if class_ref_namespace_given else ""
        if namespace and not valid_dns_label(namespace):
            raise MultusError(
                TEMPLATE_INVALID, "class.namespace", f"{namespace!r} is no namespace name"
            )
        if not valid_dns_subdomain(class_ref.name):
            raise MultusError(TEMPLATE_INVALID, "class.name", f"{class_ref.name!r} is no NAD name")
        from_class = TemplateRef(namespace or pod_namespace, class_ref.name)
    if from_device is not None and from_class is not None and from_device != from_class:
        raise MultusError(
            TEMPLATE_CONFLICT,
            _FIELD,
            f"the device names {from_device.namespace}/{from_device.name}, the class "
            f"{from_class.namespace}/{from_class.name}",
        )
    chosen = from_device or from_class
    if chosen is None:
        raise MultusError(
            TEMPLATE_MISSING,
            _FIELD,
            "neither the device's template attribute nor the class names a template",
        )
    return chosen
