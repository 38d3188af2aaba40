"""Native executors of the ``sriov/*`` opcodes (pyroute2 rtnetlink and sysfs reads only).

The environment is the :class:`~dmn.host.netns.LinkEnvironment` of the call: the PF
lives in its host namespace. A :class:`~dmn.opcodes.device_environment.DeviceEnvironment`
may point the sysfs reads (``virtfnN`` of a PCI PF) at another tree; the default is ``/sys``.
"""

from __future__ import annotations

from collections.abc import Mapping

from dmn.opcodes.executor import Executor
from dmn.opcodes.sriov import specs
from dmn.opcodes.sriov.vf_configure import VfConfigure

EXECUTORS: Mapping[str, Executor] = {specs.VF_CONFIGURE.name: VfConfigure()}
"""Every ``sriov/*`` executor by opcode name, for the runner's executor registry."""
