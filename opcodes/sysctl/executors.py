"""Native executors of the ``sysctl/*`` opcodes (per-interface /proc/sys/net files opened
inside the sandbox's namespace by ``host/sysctl.py``, no shell)."""

from __future__ import annotations

from collections.abc import Mapping

from dmn.opcodes.executor import Executor
from dmn.opcodes.sysctl import specs
from dmn.opcodes.sysctl.interface_sysctl import InterfaceSysctlExecutor

EXECUTORS: Mapping[str, Executor] = {specs.INTERFACE.name: InterfaceSysctlExecutor()}
"""Every ``sysctl/*`` executor by opcode name, for the runner's executor registry."""
