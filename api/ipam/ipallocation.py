"""IPAllocation: one address of one pool held by one owner (design §5.7).

Cluster-scoped, named ``<pool>-<address>`` by :func:`dmn.api.ipam.addresses.allocation_name`
so the API server's create is the arbiter: the second owner to ask for an address gets 409
AlreadyExists. The spec is immutable (an allocation never changes hands; it is released by
deletion with a UID precondition). ``owner`` says who holds it — the ResourceClaim (namespace,
name, UID), the node and the journal's operation id — so the controller can collect it when
the claim is gone and a node that lost a create's response can find what it made.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from dmn.api.identity import API_VERSION, DRIVER
from dmn.api.ipam.addresses import Family, allocation_name
from dmn.api.ipam.ippool import ADDRESS_FIELD
from dmn.api.model import DNS_LABEL, ApiModel, validations

IPFamily = Literal["IPv4", "IPv6"]
AllocationKind = Literal["Dynamic", "Static"]

#: Labels on every allocation (``find`` and the controller select by them).
LABEL_POOL = f"{DRIVER}/ippool"
LABEL_CLAIM_UID = f"{DRIVER}/claim-uid"


class AllocationOwner(ApiModel):
    claim_namespace: str = Field(min_length=1, max_length=63, pattern=DNS_LABEL)
    claim_name: str = Field(min_length=1, max_length=253)
    claim_uid: str = Field(min_length=1, max_length=63, alias="claimUID")
    node_name: str = Field(min_length=1, max_length=253)
    #: The node journal's id of the effect that asked; one owner holds at most one address
    #: per pool and family under one operation id.
    operation_id: str = Field(min_length=1, max_length=128, alias="operationID")


class IPAllocationSpec(ApiModel):
    pool: str = Field(min_length=1, max_length=63, pattern=DNS_LABEL)
    address: str = Field(**ADDRESS_FIELD)
    family: IPFamily
    kind: AllocationKind
    owner: AllocationOwner


class IPAllocation(ApiModel):
    api_version: Literal["networking.dra-multi-network.schseba.github.io/v1alpha1"] = (
        "networking.dra-multi-network.schseba.github.io/v1alpha1"
    )
    kind: Literal["IPAllocation"] = "IPAllocation"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: IPAllocationSpec = Field(
        json_schema_extra=validations(("self == oldSelf", "an allocation never changes hands"))
    )


@dataclass(frozen=True)
class Owner:
    """Who holds an address: the ResourceClaim, the node, and the journal's operation id."""

    claim_namespace: str
    claim_name: str
    claim_uid: str
    node_name: str
    operation_id: str

    def to_api(self) -> dict[str, str]:
        return {
            "claimNamespace": self.claim_namespace,
            "claimName": self.claim_name,
            "claimUID": self.claim_uid,
            "nodeName": self.node_name,
            "operationID": self.operation_id,
        }

    @property
    def key(self) -> str:
        """Where this owner's dynamic search starts (stable across retries)."""
        return f"{self.claim_uid}/{self.operation_id}"


def allocation_manifest(
    pool: str, address: str, family: Family, kind: AllocationKind, owner: Owner
) -> dict[str, Any]:
    """The IPAllocation object ``owner`` creates to hold ``address`` (canonical text) of
    ``pool``: its deterministic name, the labels ``find`` and the controller select by."""
    return {
        "apiVersion": API_VERSION,
        "kind": "IPAllocation",
        "metadata": {
            "name": allocation_name(pool, address),
            "labels": {LABEL_POOL: pool, LABEL_CLAIM_UID: owner.claim_uid},
        },
        "spec": {
            "pool": pool,
            "address": address,
            "family": f"IPv{family}",
            "kind": kind,
            "owner": owner.to_api(),
        },
    }
