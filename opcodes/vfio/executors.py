"""Native executors of the ``vfio/*`` opcodes (sysfs and ``/dev`` reads, one CDI spec file).

The environment is a :class:`~dmn.opcodes.device_environment.DeviceEnvironment` of a connect
call: the verified sandbox, the exposure policy's driver allowlist, and the node's sysfs,
``/dev`` and CDI roots.
"""

from __future__ import annotations

from collections.abc import Mapping

from dmn.opcodes.executor import Executor
from dmn.opcodes.vfio import specs
from dmn.opcodes.vfio.device_access import DeviceAccess

EXECUTORS: Mapping[str, Executor] = {specs.DEVICE_ACCESS.name: DeviceAccess()}
"""Every ``vfio/*`` executor by opcode name, for the runner's executor registry."""
