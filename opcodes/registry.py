"""The default opcode registry: every pure spec of every family (design §3.6).

Importing this module imports specs only — never an executor or a native library — so the
interpreter, ``dmn lint`` and the controller can use it anywhere. The registry is built once
and cached; it is immutable by convention (callers never register into it).

Hook placement, in short (each family's module says why in full): ``prepare`` holds what
changes what the node exposes before a sandbox exists — ``share/hold-parent``,
``pci/driver-bind``, ``pci/function-reset``, ``devlink/eswitch-configure``,
``sriov/vf-configure``; ``connect`` holds
everything that acts toward the verified sandbox — ``linux/*``, ``vfio/device-access``,
``rdma/*``, ``ib/port-configure``, ``bridge/*``, ``ovs/port-attach``,
``sysctl/interface``, ``ethtool/features``; ``multus/*`` runs at prepare too (the API
objects Multus reads at sandbox creation must exist before it);
``representor/configure`` is legal in both because a representor is a host resource that a
root may settle at prepare and a bridge operation finishes at connect.
"""

from __future__ import annotations

from functools import cache

from dmn.opcodes.bridge import specs as bridge
from dmn.opcodes.devlink import specs as devlink
from dmn.opcodes.ethtool import specs as ethtool
from dmn.opcodes.ib import specs as ib
from dmn.opcodes.ip import specs as ip
from dmn.opcodes.linux import specs as linux
from dmn.opcodes.multus import specs as multus
from dmn.opcodes.ovs import specs as ovs
from dmn.opcodes.pci import specs as pci
from dmn.opcodes.rdma import specs as rdma
from dmn.opcodes.representor import specs as representor
from dmn.opcodes.share import specs as share
from dmn.opcodes.spec import OpcodeRegistry, OpcodeSpec
from dmn.opcodes.sriov import specs as sriov
from dmn.opcodes.sysctl import specs as sysctl
from dmn.opcodes.vfio import specs as vfio

ALL_SPECS: tuple[OpcodeSpec, ...] = (
    *linux.SPECS,
    *share.SPECS,
    *pci.SPECS,
    *vfio.SPECS,
    *rdma.SPECS,
    *ib.SPECS,
    *devlink.SPECS,
    *representor.SPECS,
    *bridge.SPECS,
    *ovs.SPECS,
    *sriov.SPECS,
    *sysctl.SPECS,
    *ethtool.SPECS,
    *ip.SPECS,
    *multus.SPECS,
)


@cache
def default_registry() -> OpcodeRegistry:
    """The registry of every builtin opcode spec, built once per process."""
    return OpcodeRegistry(ALL_SPECS)
