"""Native executors of the ``ip/*`` opcodes (rtnetlink through ``host/``, no shell)."""

from __future__ import annotations

from collections.abc import Mapping

from dmn.opcodes.executor import Executor
from dmn.opcodes.ip import specs
from dmn.opcodes.ip.addresses import IpAddresses
from dmn.opcodes.ip.carried_config import IpCarriedHostConfig
from dmn.opcodes.ip.neighbours import IpNeighbours
from dmn.opcodes.ip.pool_addresses import IpPoolAddresses
from dmn.opcodes.ip.routes import IpRoutes
from dmn.opcodes.ip.rules import IpRules

EXECUTORS: Mapping[str, Executor] = {
    specs.IP_ADDRESSES.name: IpAddresses(),
    specs.IP_ROUTES.name: IpRoutes(),
    specs.IP_NEIGHBOURS.name: IpNeighbours(),
    specs.IP_RULES.name: IpRules(),
    specs.IP_POOL_ADDRESSES.name: IpPoolAddresses(),
    specs.IP_CARRIED_HOST_CONFIG.name: IpCarriedHostConfig(),
}
"""Every ``ip/*`` executor by opcode name, for the runner's executor registry."""
