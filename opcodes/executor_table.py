"""The table of native executors this build can run, keyed by opcode name (design §3.6).

Why one function: the agent, the crash tests and the benchmarks all need "every executor
that exists", and each used to assemble ``{**LINUX, **SHARE}`` itself; a family added to
one copy but not another would make a test or benchmark run a different node than ships.

Contract: :func:`default_executors` returns a fresh, caller-owned mapping from opcode name
to executor; every key is the name of a spec in :func:`dmn.opcodes.registry.default_registry`.
Opcodes whose executors are not built yet (``bridge/shared-uplink-vlan``) are absent,
so the runner refuses programs that use them. Unlike ``registry``, importing this module
imports the native executor modules (pyroute2), so pure code must not import it.
"""

from __future__ import annotations

from dmn.opcodes.bridge.executors import EXECUTORS as BRIDGE
from dmn.opcodes.devlink.executors import EXECUTORS as DEVLINK
from dmn.opcodes.ethtool.executors import EXECUTORS as ETHTOOL
from dmn.opcodes.executor import Executor
from dmn.opcodes.ib.executors import EXECUTORS as IB
from dmn.opcodes.ip.executors import EXECUTORS as IP
from dmn.opcodes.linux.executors import EXECUTORS as LINUX
from dmn.opcodes.multus.executors import EXECUTORS as MULTUS
from dmn.opcodes.ovs.executors import EXECUTORS as OVS
from dmn.opcodes.pci.executors import EXECUTORS as PCI
from dmn.opcodes.rdma.executors import EXECUTORS as RDMA
from dmn.opcodes.representor.executors import EXECUTORS as REPRESENTOR
from dmn.opcodes.share.executors import EXECUTORS as SHARE
from dmn.opcodes.sriov.executors import EXECUTORS as SRIOV
from dmn.opcodes.sysctl.executors import EXECUTORS as SYSCTL
from dmn.opcodes.vfio.executors import EXECUTORS as VFIO


def default_executors() -> dict[str, Executor]:
    """Every builtin executor, keyed by opcode name; a new dict on every call."""
    return {
        **LINUX,
        **SHARE,
        **SRIOV,
        **REPRESENTOR,
        **BRIDGE,
        **PCI,
        **VFIO,
        **RDMA,
        **DEVLINK,
        **OVS,
        **IB,
        **SYSCTL,
        **ETHTOOL,
        **IP,
        **MULTUS,
    }
