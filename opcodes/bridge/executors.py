"""Native executors of the ``bridge/*`` opcodes (pyroute2 rtnetlink only, no shell).

They need a :class:`~dmn.opcodes.device_environment.DeviceEnvironment` whose
``bridge_grants`` holds the approved bridges by alias; ``bridge/shared-uplink-vlan/v1`` also
needs its ``effect_records`` (the journal's read-only record view), where its per-VID
references live.
"""

from __future__ import annotations

from collections.abc import Mapping

from dmn.opcodes.bridge import specs
from dmn.opcodes.bridge.port_attach import PortAttach
from dmn.opcodes.bridge.port_vlan import PortVlan
from dmn.opcodes.bridge.shared_uplink_vlan import SharedUplinkVlan
from dmn.opcodes.executor import Executor

EXECUTORS: Mapping[str, Executor] = {
    specs.PORT_ATTACH.name: PortAttach(),
    specs.PORT_VLAN.name: PortVlan(),
    specs.SHARED_UPLINK_VLAN.name: SharedUplinkVlan(),
}
"""The ``bridge/*`` executors by opcode name, for the runner's executor registry."""
