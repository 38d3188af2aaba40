"""TopologyRootConfiguration: the opaque DeviceClass parameter binding a root (design §4.7).

It is not a CRD: it travels inside ``DeviceClass.spec.config[].opaque.parameters`` and
the node decodes it from the allocation's class-origin configuration. It pins the exact
revision (name, UID, digest) and the locked plugin contract of its root step.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from dmn.api.model import DIGEST, STEP_ID, ApiModel, RevisionRef


class TopologyRootConfiguration(ApiModel):
    api_version: Literal["networking.dra-multi-network.schseba.github.io/v1alpha1"] = (
        "networking.dra-multi-network.schseba.github.io/v1alpha1"
    )
    kind: Literal["TopologyRootConfiguration"] = "TopologyRootConfiguration"
    revision_ref: RevisionRef
    root_step: str = Field(min_length=1, max_length=40, pattern=STEP_ID)
    plugin_contract_digest: str = Field(pattern=DIGEST)
