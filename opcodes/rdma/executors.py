"""Native executors of the ``rdma/*`` opcodes (RDMA netlink and ``/dev`` reads, one CDI spec).

The environment is the call's :class:`~dmn.host.netns.LinkEnvironment` (host and
verified sandbox namespaces; RDMA netlink sockets are created inside them), optionally a
:class:`~dmn.opcodes.device_environment.DeviceEnvironment` for the ``/dev`` and CDI roots.
"""

from __future__ import annotations

from collections.abc import Mapping

from dmn.opcodes.executor import Executor
from dmn.opcodes.rdma import specs
from dmn.opcodes.rdma.device_access import DeviceAccess
from dmn.opcodes.rdma.netns_assign import NetnsAssign

EXECUTORS: Mapping[str, Executor] = {
    specs.NETNS_ASSIGN.name: NetnsAssign(),
    specs.DEVICE_ACCESS.name: DeviceAccess(),
}
"""Every ``rdma/*`` executor by opcode name, for the runner's executor registry."""
