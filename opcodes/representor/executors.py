"""Native executors of the ``representor/*`` opcodes (pyroute2 rtnetlink only, no shell).

The representor lives in the host namespace of the call's
:class:`~dmn.host.netns.LinkEnvironment`; its identity is proven by
:mod:`dmn.host.rtnetlink.representor`.
"""

from __future__ import annotations

from collections.abc import Mapping

from dmn.opcodes.executor import Executor
from dmn.opcodes.representor import specs
from dmn.opcodes.representor.configure import RepresentorConfigure

EXECUTORS: Mapping[str, Executor] = {specs.CONFIGURE.name: RepresentorConfigure()}
"""Every ``representor/*`` executor by opcode name, for the runner's executor registry."""
