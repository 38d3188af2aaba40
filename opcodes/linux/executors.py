"""Native executors of the ``linux/*`` opcodes (pyroute2 rtnetlink only, no shell).

Each executor implements :class:`dmn.opcodes.executor.Executor` against the specs in
``specs.py`` and takes its namespaces from a :class:`LinkEnvironment` in ``ctx.env``.

Ownership (design §8.3): a link we create is first made under a random *nonce* name that is
journaled in the before-image, then given the ownership alias ``dmn:<operation>:<effect>``
(and, for sandbox links, its final name in the same request). Cleanup and recovery act on a
created link only when it carries that alias, or — in the crash window between creation and
aliasing — when it still has the journaled nonce name, the recorded kind and the recorded lower
device and no alias. A same-named link without that proof is foreign: never adopted, never
deleted. A moved root carries the move's alias while it is in the sandbox; undo returns it with
its original name, alias, MTU, MAC, addresses and admin state.

Where a link is not where it was left, undo and recovery search the host, the recorded
sandbox and every pinned namespace the environment lists, rather than assuming it is gone.

The executors live in one module per family — :mod:`link_move`, :mod:`link_configure`,
:mod:`host_link_state`, :mod:`child_links` (macvlan/ipvlan/vlan), :mod:`sandbox_child`
(macvlan/ipvlan ``/v2`` created directly in the sandbox), :mod:`bond` (bond +
attach-master) — over the shared :mod:`created_link` lifecycle, :mod:`link_ownership` proofs and
:mod:`effect_handles` lookups. This module is their registry, and re-exports every name it
held before the split so importers do not change.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from dmn.opcodes.effect_handles import (
    Outputs,
    environment,
    link_handle,
    locate_input,
    single,
)
from dmn.opcodes.executor import Executor
from dmn.opcodes.linux import specs
from dmn.opcodes.linux.bond import (
    BOND_MODE_ACTIVE_BACKUP,
    FAIL_OVER_MAC_ACTIVE,
    AttachMaster,
    CreateBond,
)
from dmn.opcodes.linux.child_links import (
    IPVLAN_MODES,
    MACVLAN_MODES,
    SHARED_CHILD_KINDS,
    CreateIpvlan,
    CreateMacvlan,
    CreateVlan,
    _shared_parent_check,
    _SharedChild,
    host_children,
)
from dmn.opcodes.linux.created_link import _CreatedLink
from dmn.opcodes.linux.host_link_state import HostLinkState
from dmn.opcodes.linux.link_configure import LinkConfigure
from dmn.opcodes.linux.link_move import LinkMove, restore_root
from dmn.opcodes.linux.link_ownership import delete_owned, find_owned, find_owned_in, set_alias
from dmn.opcodes.linux.sandbox_child import CreateIpvlanInSandbox, CreateMacvlanInSandbox

__all__ = [
    "BOND_MODE_ACTIVE_BACKUP",
    "EXECUTORS",
    "FAIL_OVER_MAC_ACTIVE",
    "IPVLAN_MODES",
    "MACVLAN_MODES",
    "SHARED_CHILD_KINDS",
    "AttachMaster",
    "CreateBond",
    "CreateIpvlan",
    "CreateIpvlanInSandbox",
    "CreateMacvlan",
    "CreateMacvlanInSandbox",
    "CreateVlan",
    "HostLinkState",
    "LinkConfigure",
    "LinkMove",
    "Outputs",
    "_CreatedLink",
    "_SharedChild",
    "_shared_parent_check",
    "delete_owned",
    "environment",
    "find_owned",
    "find_owned_in",
    "host_children",
    "link_handle",
    "locate_input",
    "restore_root",
    "set_alias",
    "single",
]

_log = logging.getLogger(__name__)


EXECUTORS: Mapping[str, Executor] = {
    specs.LINK_MOVE.name: LinkMove(),
    specs.LINK_CONFIGURE.name: LinkConfigure(),
    specs.HOST_LINK_STATE.name: HostLinkState(),
    specs.CREATE_MACVLAN.name: CreateMacvlan(),
    specs.CREATE_IPVLAN.name: CreateIpvlan(),
    specs.CREATE_MACVLAN_IN_SANDBOX.name: CreateMacvlanInSandbox(),
    specs.CREATE_IPVLAN_IN_SANDBOX.name: CreateIpvlanInSandbox(),
    specs.CREATE_VLAN.name: CreateVlan(),
    specs.CREATE_BOND.name: CreateBond(),
    specs.ATTACH_MASTER.name: AttachMaster(),
}
"""Every ``linux/*`` executor by opcode name, for the runner's executor registry."""
