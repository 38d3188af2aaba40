"""The node coordinator: NodePrepare / NRI hooks over journal, binder, runner and executors.

Modules, one job each: :mod:`.verify` checks a ResourceClaim allocation against its
NetworkTopologyRevision and the node's published personas before anything mutates (pure);
:mod:`.handles` builds allocation handles from personas and live links and wires ports;
:mod:`.pod_claims` resolves which claims a Pod sandbox attaches; the state machine is
split into three services over shared collaborators — :mod:`.preparation` (NodePrepare /
Unprepare: Preparing → Prepared → Released), :mod:`.sandbox_attachment` (RunPodSandbox,
container gate, Stop, Remove: Connecting → Ready → Removing → Removed) and :mod:`.reconcile`
(start-up recovery, NRI Synchronize) — which bind the revision's programs and run them
through :mod:`.operations` (the journaled :class:`Runner` and the pins);
:mod:`.claim_verifier` reads and verifies claims for the first two; :mod:`.node_services` is
the composition root that builds the collaborators and wires the services;
:mod:`.attachment_status` reports NetworkAttachmentStatus and claim device status (never
authority); :mod:`.adapters` implements the kubelet ``DraHandler`` and the NRI
``NriHandler`` as thin calls into the services; :mod:`.node_agent` wires them to the kubelet and NRI
sockets in restart order.
"""

from dmn.agent.coordinator.config import NodeConfig
from dmn.agent.coordinator.node_services import NodeServices
from dmn.agent.coordinator.verify import Refusal

__all__ = ["NodeConfig", "NodeServices", "Refusal"]
