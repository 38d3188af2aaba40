"""The node coordinator: NodePrepare / NRI hooks over journal, binder, runner and executors.

:mod:`.verify` checks a ResourceClaim allocation against its NetworkTopologyRevision and the
node's published personas before anything mutates (pure); :mod:`.coordinator` is the state
machine (Preparing → Prepared, Connecting → Ready → Removing → Removed) that binds the
revision's programs and runs them through the journaled :class:`Runner`; :mod:`.adapters`
implements the kubelet ``DraHandler`` and the NRI ``NriHandler`` as thin calls into it.
"""

from dmn.agent.coordinator.coordinator import Coordinator, NodeConfig
from dmn.agent.coordinator.verify import Refusal

__all__ = ["Coordinator", "NodeConfig", "Refusal"]
