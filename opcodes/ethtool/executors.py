"""Native executors of the ``ethtool/*`` opcodes (the ethtool generic-netlink family on a
socket inside the sandbox's namespace, ``host/ethtool.py``; no shell, no ethtool binary)."""

from __future__ import annotations

from collections.abc import Mapping

from dmn.opcodes.ethtool import specs
from dmn.opcodes.ethtool.features import FeaturesExecutor
from dmn.opcodes.executor import Executor

EXECUTORS: Mapping[str, Executor] = {specs.FEATURES.name: FeaturesExecutor()}
"""Every ``ethtool/*`` executor by opcode name, for the runner's executor registry."""
