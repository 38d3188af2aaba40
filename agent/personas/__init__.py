"""DeviceExposurePolicies → personas (design §5.3–5.5).

``build_personas(inventory, policies, node_labels, pins) -> PersonaSet``.
"""

from dmn.agent.personas.build import Pins, build_personas, device_name, policy_digest
from dmn.agent.personas.model import Finding, FindingCode, Persona, PersonaSet

__all__ = [
    "Finding",
    "FindingCode",
    "Persona",
    "PersonaSet",
    "Pins",
    "build_personas",
    "device_name",
    "policy_digest",
]
