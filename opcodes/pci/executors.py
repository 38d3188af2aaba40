"""Native executors of the ``pci/*`` opcodes (sysfs reads and writes only, no shell).

The environment is a :class:`~dmn.opcodes.device_environment.DeviceEnvironment`: its sysfs,
``/dev`` and ``/proc`` roots and the exposure policy's driver allowlist (a plain
``LinkEnvironment`` allows no driver, so ``pci/driver-bind`` refuses).
"""

from __future__ import annotations

from collections.abc import Mapping

from dmn.opcodes.executor import Executor
from dmn.opcodes.pci import specs
from dmn.opcodes.pci.driver_bind import DriverBind
from dmn.opcodes.pci.function_reset import FunctionReset

EXECUTORS: Mapping[str, Executor] = {
    specs.DRIVER_BIND.name: DriverBind(),
    specs.FUNCTION_RESET.name: FunctionReset(),
}
"""Every ``pci/*`` executor by opcode name, for the runner's executor registry."""
