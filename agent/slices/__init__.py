"""ResourceSlice publication for the node's pool (design §5.6).

``NodeSlicePublisher`` publishes the pool and republishes it on inventory, policy and
allocation changes; each pass is ``NodePublication(node).plan(inventory, policies, labels,
allocated, cleanup_pending)`` then ``.verify(written, stored)``; underneath,
``build_slices`` and ``SlicePublisher``.
"""

from dmn.agent.slices.build import (
    SliceLimitError,
    SlicePublisher,
    build_slices,
    content_digest,
    limit_violations,
)
from dmn.agent.slices.node_publisher import InventoryWatch, NodeSlicePublisher
from dmn.agent.slices.pins import allocated_devices
from dmn.agent.slices.publication import NodePublication, Plan
from dmn.agent.slices.readback import node_allocation_check, stripped_prerequisites

__all__ = [
    "InventoryWatch",
    "NodePublication",
    "NodeSlicePublisher",
    "Plan",
    "SliceLimitError",
    "SlicePublisher",
    "allocated_devices",
    "build_slices",
    "content_digest",
    "limit_violations",
    "node_allocation_check",
    "stripped_prerequisites",
]
