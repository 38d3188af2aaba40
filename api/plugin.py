"""NetworkPlugin: a plugin's strict contract — config, ports, effects, state (design §4.2).

The CRD is generated from the language core's own model: ``spec`` *is*
:class:`dmn.interpreter.documents.PluginSpec`, the model ``dmn lint``, the loader and
the checker validate plugins with, so the API server's structural bounds and the
checker's document shape cannot drift apart. The descriptor's *meaning* — its hook
programs, config schema and conditional ports — is checked by the language core; the
CRD stores ``configSchema``, ``hooks`` and port ``access`` as bounded payloads for that
checker. This module adds what only the API has: the envelope and the status.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from dmn.api.model import DIGEST, ApiModel, Condition, DiagnosticEntry, list_map
from dmn.interpreter.documents import PluginSpec


class NetworkPluginStatus(ApiModel):
    observed_generation: int | None = Field(default=None, ge=0)
    contract_digest: str | None = Field(default=None, pattern=DIGEST)
    conditions: list[Condition] | None = list_map("type", max_items=16, default=None)
    diagnostics: list[DiagnosticEntry] | None = Field(default=None, max_length=64)


class NetworkPlugin(ApiModel):
    api_version: Literal["networking.dra-multi-network.schseba.github.io/v1alpha1"] = (
        "networking.dra-multi-network.schseba.github.io/v1alpha1"
    )
    kind: Literal["NetworkPlugin"] = "NetworkPlugin"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: PluginSpec
    status: NetworkPluginStatus | None = None
