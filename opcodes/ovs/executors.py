"""Native executors of the ``ovs/*`` opcodes (the ``ovs`` Python IDL over the node's OVSDB
remote; no ``ovs-vsctl``, no shell).

They need a :class:`~dmn.opcodes.device_environment.DeviceEnvironment` whose
``ovs_bridge_grants`` holds the approved OVS bridges by alias and whose ``ovsdb_remote`` is
the node's ``ovsdb-server`` socket.
"""

from __future__ import annotations

from collections.abc import Mapping

from dmn.opcodes.executor import Executor
from dmn.opcodes.ovs import specs
from dmn.opcodes.ovs.port_attach import PortAttach

EXECUTORS: Mapping[str, Executor] = {specs.PORT_ATTACH.name: PortAttach()}
"""The ``ovs/*`` executors by opcode name, for the runner's executor registry."""
