"""ResourceSlice publication for the node's pool (seed 000 §7.6).

``build_slices(persona_set, node_name, generation) -> list[dict]`` and
``SlicePublisher(node_name).publish(persona_set) -> (changed, slices)``.
"""

from dmn.agent.slices.build import SliceLimitError, SlicePublisher, build_slices, content_digest
from dmn.agent.slices.readback import node_allocation_check, stripped_prerequisites

__all__ = [
    "SliceLimitError",
    "SlicePublisher",
    "build_slices",
    "content_digest",
    "node_allocation_check",
    "stripped_prerequisites",
]
