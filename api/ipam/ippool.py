"""IPPool: the addresses one secondary network hands out (design §5.7).

Cluster-scoped. ``spec.subnets`` holds one IPv4 and/or one IPv6 subnet (dual-stack); each
subnet names its allocatable ``ranges`` (dynamic requests; the whole subnet's host addresses
when omitted), its ``reserved`` ranges (static requests only, never handed out dynamically),
``exclude`` ranges (never handed out), its ``gateway`` and its ``routes``. The shape is
checked here and by the API server (the generated CRD); what needs address arithmetic —
ranges inside their subnet, the gateway outside every range, overlaps, the size bound — is
:func:`dmn.api.ipam.pool_plan.pool_diagnostics`, run by admission, the controller, ``dmn
lint`` and the allocation client alike. The controller owns ``status``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field

from dmn.api.identity import GROUP
from dmn.api.model import ApiModel, Condition, list_map, validations

#: The controller keeps this finalizer on every pool and removes it only when no address is
#: allocated from the pool any more: a pool in use is never deleted under its allocations.
POOL_FINALIZER = f"{GROUP}/ippool-in-use"

#: Loose shapes the API server can check; the exact parse is the pool plan's.
ADDRESS_PATTERN = r"^[0-9a-fA-F.:]+$"
PREFIX_PATTERN = r"^[0-9a-fA-F.:]+/[0-9]{1,3}$"
ADDRESS_FIELD: dict[str, Any] = {"min_length": 2, "max_length": 45, "pattern": ADDRESS_PATTERN}
PREFIX_FIELD: dict[str, Any] = {"min_length": 4, "max_length": 49, "pattern": PREFIX_PATTERN}
#: Bounds on list lengths (a pool is small and read on every allocation).
MAX_RANGES = 16
MAX_ROUTES = 32


class AddressRange(ApiModel):
    """``start`` to ``end`` inclusive; one address when ``end`` is omitted."""

    start: str = Field(**ADDRESS_FIELD)
    end: str | None = Field(default=None, **ADDRESS_FIELD)


class IPRoute(ApiModel):
    """A route the attachment gets: ``destination`` prefix, through ``gateway`` when set
    (else on-link)."""

    destination: str = Field(**PREFIX_FIELD)
    gateway: str | None = Field(default=None, **ADDRESS_FIELD)


class IPPoolSubnet(ApiModel):
    cidr: str = Field(**PREFIX_FIELD)
    gateway: str | None = Field(default=None, **ADDRESS_FIELD)
    ranges: list[AddressRange] | None = Field(default=None, max_length=MAX_RANGES)
    reserved: list[AddressRange] | None = Field(default=None, max_length=MAX_RANGES)
    exclude: list[AddressRange] | None = Field(default=None, max_length=MAX_RANGES)
    routes: list[IPRoute] | None = list_map("destination", max_items=MAX_ROUTES, default=None)


class IPPoolSpec(ApiModel):
    subnets: list[IPPoolSubnet] = Field(
        min_length=1,
        json_schema_extra={
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["cidr"],
            **validations(
                (
                    "self.size() < 2 || self[0].cidr.contains(':') != self[1].cidr.contains(':')",
                    "at most one IPv4 and one IPv6 subnet",
                )
            ),
        },
        max_length=2,
    )


class IPPoolStatus(ApiModel):
    observed_generation: int | None = Field(default=None, ge=0)
    #: Addresses the pool can hand out: allocatable plus reserved, both families.
    size: int = Field(default=0, ge=0)
    allocated: int = Field(default=0, ge=0)
    dynamic_allocated: int = Field(default=0, ge=0)
    static_allocated: int = Field(default=0, ge=0)
    free: int = Field(default=0, ge=0)
    conditions: list[Condition] | None = list_map("type", max_items=16, default=None)


class IPPool(ApiModel):
    model_config = ConfigDict(
        **ApiModel.model_config,
        json_schema_extra=validations(
            (
                "self.metadata.name.size() <= 63",
                "an IPPool name is at most 63 characters (it is a label value)",
            )
        ),
    )

    api_version: Literal["networking.dra-multi-network.schseba.github.io/v1alpha1"] = (
        "networking.dra-multi-network.schseba.github.io/v1alpha1"
    )
    kind: Literal["IPPool"] = "IPPool"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: IPPoolSpec
    status: IPPoolStatus | None = None
