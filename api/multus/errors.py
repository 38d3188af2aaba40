"""The one error type of the Multus automatic-mode core, and its reason codes.

Every refusal of the pure core is a :class:`MultusError` carrying a stable reason code
(registered in :mod:`dmn.reason_codes`), the path of the offending value and a message for a
person. Callers (the node agent) turn it into a prepare failure before anything changes on the
node or in the API. The constants below are the codes' only spelling in the code base; the
agent emits the ones the core never raises itself (forbidden template, shadow conflict, not
attached, shadow deleting) through the same names.
"""

from __future__ import annotations

TEMPLATE_MISSING = "E_MULTUS_TEMPLATE_MISSING"
TEMPLATE_INVALID = "E_MULTUS_TEMPLATE_INVALID"
TEMPLATE_UNSUPPORTED = "E_MULTUS_TEMPLATE_UNSUPPORTED"
TEMPLATE_CONFLICT = "E_MULTUS_TEMPLATE_CONFLICT"
TEMPLATE_FORBIDDEN = "E_MULTUS_TEMPLATE_FORBIDDEN"
DEVICE_MISMATCH = "E_MULTUS_DEVICE_MISMATCH"
SELECTION_INVALID = "E_MULTUS_SELECTION_INVALID"
MANUAL_SELECTION = "E_MULTUS_MANUAL_SELECTION"
INTERFACE_CONFLICT = "E_MULTUS_INTERFACE_CONFLICT"
ANNOTATION_SIZE = "E_MULTUS_ANNOTATION_SIZE"
OWNERSHIP = "E_MULTUS_OWNERSHIP"
SHADOW_CONFLICT = "E_MULTUS_SHADOW_CONFLICT"
SHADOW_DELETING = "E_MULTUS_SHADOW_DELETING"
NOT_ATTACHED = "E_MULTUS_NOT_ATTACHED"

#: Every code above, for callers that check a reason is one of the core's.
REASONS = frozenset(
    {
        TEMPLATE_MISSING,
        TEMPLATE_INVALID,
        TEMPLATE_UNSUPPORTED,
        TEMPLATE_CONFLICT,
        TEMPLATE_FORBIDDEN,
        DEVICE_MISMATCH,
        SELECTION_INVALID,
        MANUAL_SELECTION,
        INTERFACE_CONFLICT,
        ANNOTATION_SIZE,
        OWNERSHIP,
        SHADOW_CONFLICT,
        SHADOW_DELETING,
        NOT_ATTACHED,
    }
)


class MultusError(Exception):
    """A refusal: ``reason`` (a registered code), ``field`` (where), ``message`` (why).

    ``field`` is a path into the input that was refused: ``spec.config.plugins[0].master``
    for a template, ``metadata.annotations[k8s.v1.cni.cncf.io/networks][2]`` for a Pod's
    selection, ``device.pci_address`` for the allocation.
    """

    def __init__(self, reason: str, field: str, message: str) -> None:
        super().__init__(reason, field, message)
        self.reason = reason
        self.field = field
        self.message = message

    def __str__(self) -> str:
        return f"{self.reason} at {self.field}: {self.message}"

    def __repr__(self) -> str:
        return f"MultusError({self.reason!r}, {self.field!r}, {self.message!r})"
