"""WorkloadParameters: what a workload may say about its own claim's network.

It travels in ``ResourceClaim.spec.devices.config[].opaque.parameters`` (the scheduler copies
it to the allocation's configuration with ``source: FromClaim``). ``config`` holds only
scalar values of the fields the root step's plugin declares ``workloadSettable`` — a static
address from a pool's reserved range, an interface name — and the node merges them over the
topology's configuration of that root step, where the plugin's configSchema checks them like
any other value. Anything else a claim configures for this driver is refused.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from dmn.api.model import ApiModel

WORKLOAD_PARAMETERS_KIND = "WorkloadParameters"

FieldName = Annotated[str, Field(min_length=1, max_length=63)]
Scalar = Annotated[str, Field(max_length=256)] | int | bool


class WorkloadParameters(ApiModel):
    api_version: Literal["networking.dra-multi-network.schseba.github.io/v1alpha1"] = (
        "networking.dra-multi-network.schseba.github.io/v1alpha1"
    )
    kind: Literal["WorkloadParameters"] = "WorkloadParameters"
    config: dict[FieldName, Scalar] = Field(min_length=1, max_length=8)
