"""The node coordinator: NodePrepare / NRI hooks over journal, binder, runner and executors.

Modules, one job each: :mod:`.verify` checks a ResourceClaim allocation against its
NetworkTopologyRevision and the node's published personas before anything mutates (pure);
:mod:`.handles` builds allocation handles from personas and live links and wires ports;
:mod:`.pod_claims` resolves which claims a Pod sandbox attaches; :mod:`.coordinator` is
the state machine (Preparing → Prepared → Released, Connecting → Ready → Removing →
Removed) that binds the revision's programs and runs them through the journaled
:class:`Runner`; :mod:`.attachment_status` reports NetworkAttachmentStatus and claim
device status (never authority); :mod:`.adapters` implements the kubelet ``DraHandler``
and the NRI ``NriHandler`` as thin calls into it; :mod:`.node_agent` wires them to the
kubelet and NRI sockets in restart order.
"""

from dmn.agent.coordinator.coordinator import Coordinator, NodeConfig
from dmn.agent.coordinator.verify import Refusal

__all__ = ["Coordinator", "NodeConfig", "Refusal"]
