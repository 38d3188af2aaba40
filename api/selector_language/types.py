"""The CEL types a device selector works with, and the shapes (size bounds) of values.

A :class:`Shape` bounds a value's size the way Kubernetes' size estimator does for DRA
selectors (k8s.io/dynamic-resource-allocation/cel): every string, list and map reachable
from ``device`` has a maximum length fixed by ResourceSlice validation, so the cost of any
traversal of it is bounded. :data:`UNBOUNDED` stands for a size nothing bounds; a
comprehension over such a value has an unbounded estimate and is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

#: the saturation point of the estimate (cel-go counts in uint64)
UNBOUNDED = 2**64 - 1

#: ResourceSlice limits (k8s.io/api/resource/v1): attributes and capacities per device,
#: attribute values per list, string attribute length, domain and identifier lengths.
MAX_ATTRIBUTES_PER_DEVICE = 32
MAX_ATTRIBUTE_VALUE_LENGTH = 64
MAX_ATTRIBUTE_VALUES = 48
MAX_DOMAIN_LENGTH = 63
MAX_ID_LENGTH = 32
MAX_DRIVER_NAME_LENGTH = 63


@dataclass(frozen=True, slots=True)
class CelType:
    name: str
    params: tuple[CelType, ...] = ()

    def __str__(self) -> str:
        if not self.params:
            return self.name
        return f"{self.name}({', '.join(str(p) for p in self.params)})"


BOOL = CelType("bool")
INT = CelType("int")
UINT = CelType("uint")
DOUBLE = CelType("double")
STRING = CelType("string")
BYTES = CelType("bytes")
NULL = CelType("null_type")
DYN = CelType("dyn")
TYPE = CelType("type")
DURATION = CelType("google.protobuf.Duration")
TIMESTAMP = CelType("google.protobuf.Timestamp")
DEVICE = CelType("kubernetes.DRADevice")
QUANTITY = CelType("kubernetes.Quantity")
SEMVER = CelType("kubernetes.Semver")
IP = CelType("net.IP")
CIDR = CelType("net.CIDR")
URL = CelType("kubernetes.URL")

NUMERIC = frozenset({INT, UINT, DOUBLE})


def list_of(elem: CelType) -> CelType:
    return CelType("list", (elem,))


def map_of(key: CelType, value: CelType) -> CelType:
    return CelType("map", (key, value))


def is_list(t: CelType) -> bool:
    return t.name == "list"


def is_map(t: CelType) -> bool:
    return t.name == "map"


def elem_type(t: CelType) -> CelType:
    """The element of a list, the key of a map (what a comprehension iterates), else dyn."""
    if t.name in ("list", "map"):
        return t.params[0]
    return DYN


def assignable(have: CelType, want: CelType) -> bool:
    """Whether a value of type ``have`` may stand where ``want`` is expected (dyn is both)."""
    if have == DYN or want == DYN:
        return True
    if have.name != want.name or len(have.params) != len(want.params):
        return False
    return all(assignable(h, w) for h, w in zip(have.params, want.params, strict=True))


def join(a: CelType, b: CelType) -> CelType | None:
    """The common type of two branches or elements (dyn absorbs), or None if none."""
    if a == DYN:
        return b
    if b == DYN:
        return a
    if a == NULL or b == NULL:
        return a if b == NULL else b
    if not assignable(a, b):
        return None
    if a.params:
        params = [join(x, y) for x, y in zip(a.params, b.params, strict=True)]
        if any(p is None for p in params):
            return None
        return CelType(a.name, tuple(p for p in params if p is not None))
    return a


@dataclass(frozen=True, slots=True)
class Shape:
    """Size bound of a value: its length (string, bytes, list, map; 1 for scalars), and
    the shapes of its elements and keys when it is a container."""

    size: int
    elem: Shape | None = None
    key: Shape | None = None

    def element(self) -> Shape:
        return self.elem if self.elem is not None else UNKNOWN

    def keys(self) -> Shape:
        return self.key if self.key is not None else UNKNOWN


UNKNOWN = Shape(UNBOUNDED)
SCALAR = Shape(1)

#: The shape of ``device``'s fields, from the ResourceSlice limits: a domain map of
#: identifier maps of values (a string of at most 64 characters, or a list of at most
#: max(64, 48) values — Kubernetes declares one bound for both), or of quantities.
ATTRIBUTE_VALUE = Shape(
    max(MAX_ATTRIBUTE_VALUE_LENGTH, MAX_ATTRIBUTE_VALUES), Shape(MAX_ATTRIBUTE_VALUE_LENGTH)
)
DEVICE_FIELDS: dict[str, tuple[CelType, Shape]] = {
    "driver": (STRING, Shape(MAX_DRIVER_NAME_LENGTH)),
    "allowMultipleAllocations": (BOOL, SCALAR),
    "attributes": (
        map_of(STRING, map_of(STRING, DYN)),
        Shape(
            MAX_ATTRIBUTES_PER_DEVICE,
            Shape(MAX_ATTRIBUTES_PER_DEVICE, ATTRIBUTE_VALUE, Shape(MAX_ID_LENGTH)),
            Shape(MAX_DOMAIN_LENGTH),
        ),
    ),
    "capacity": (
        map_of(STRING, map_of(STRING, QUANTITY)),
        Shape(
            MAX_ATTRIBUTES_PER_DEVICE,
            Shape(MAX_ATTRIBUTES_PER_DEVICE, SCALAR, Shape(MAX_ID_LENGTH)),
            Shape(MAX_DOMAIN_LENGTH),
        ),
    ),
}
