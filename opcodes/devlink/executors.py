"""Native executors of the ``devlink/*`` opcodes (devlink generic netlink and rtnetlink reads).

The environment is the call's :class:`~dmn.host.netns.LinkEnvironment`: the devlink
instance and its ports' netdevs live in its host namespace.
"""

from __future__ import annotations

from collections.abc import Mapping

from dmn.opcodes.devlink import specs
from dmn.opcodes.devlink.eswitch_configure import EswitchConfigure
from dmn.opcodes.executor import Executor

EXECUTORS: Mapping[str, Executor] = {specs.ESWITCH_CONFIGURE.name: EswitchConfigure()}
"""Every ``devlink/*`` executor by opcode name, for the runner's executor registry."""
