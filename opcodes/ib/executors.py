"""Native executors of the ``ib/*`` opcodes (sysfs of the sandbox's namespace, no shell)."""

from __future__ import annotations

from collections.abc import Mapping

from dmn.opcodes.executor import Executor
from dmn.opcodes.ib import specs
from dmn.opcodes.ib.port_configure import PortConfigure

EXECUTORS: Mapping[str, Executor] = {specs.PORT_CONFIGURE.name: PortConfigure()}
"""Every ``ib/*`` executor by opcode name, for the runner's executor registry."""
