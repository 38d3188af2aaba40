"""``linux/*`` opcodes: netlink link lifecycle (move, configure, create children, bonds).

Why these hooks: every ``linux/*`` opcode but one acts on a link the workload will use, so
each runs in ``connect`` (design §6.2: kernel connect moves the allocated netdev into the
sandbox and configures it there). The exception, ``linux/host-link-state/v1``, runs in
``prepare`` for a link another component takes over (Multus automatic mode, design §6.8): it
records the link's state before the hand-over so the release can give the host its link back
as it was, whoever moved it meanwhile.

Shared-parent children (macvlan, ipvlan) have two designs. ``/v1`` creates the child on the
host parent and a separate ``linux/link-move/v1`` effect moves it into the sandbox (design
§6.4). ``/v2`` (issue 15, the design the builtin programs use) creates the child directly in
the call's verified, pinned sandbox in one journaled effect, as the reference CNI plugins do:
the before-image records the link's identity-to-be (a random ifindex, kind, lower on the
host) and the target pin before the create, the kernel creates it there under the workload's
name and admin state, it is claimed with the ownership alias, recovery finds it by that
recorded identity in the pinned namespace, and undo deletes it in place (no move back). This
avoids the kernel's namespace move, which alone costs more than the whole attach of the
reference plugin. No opcode takes a namespace or a device name from configuration; a
temporary link name (v1) is the executor's nonce.
"""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from dmn.opcodes.parameter_types import IfName, MonitorIntervalMs, Mtu, ParameterModel, VlanId
from dmn.opcodes.spec import OpcodeSpec, PortSpec
from dmn.vocabulary.terms import (
    Access,
    HandleType,
    Hook,
    LinkType,
    RecoveryStrategy,
    Reversibility,
    ScopeKind,
)

_ETHERNET = frozenset({LinkType.ETHERNET})
_ANY_LINK = frozenset({LinkType.ETHERNET, LinkType.INFINIBAND})
_CONNECT = frozenset({Hook.CONNECT})
_RESTORABLE = frozenset(
    {
        RecoveryStrategy.OBSERVE_AND_RECONCILE,
        RecoveryStrategy.RESTORE_BEFORE_IMAGE,
        RecoveryStrategy.QUARANTINE,
    }
)
_CREATED = frozenset({RecoveryStrategy.OBSERVE_AND_RECONCILE, RecoveryStrategy.QUARANTINE})
_CONFIGURE_GRANTS = frozenset({Access.READ, Access.EXCLUSIVE_CONFIGURE})
_CHILD_GRANTS = frozenset({Access.READ, Access.EXCLUSIVE_CONFIGURE, Access.CREATE_CHILD})


class LinkMoveParameters(ParameterModel):
    """``ifName`` is the name the link gets inside the sandbox (renamed during the move).
    ``carryHostConfig`` (default false): record the link's host addresses and the routes
    through it before the move, hand them on in the output handle (for
    ``ip/carried-host-config/v1`` to re-create in the sandbox) and put them back on the
    host when the link returns."""

    ifName: IfName
    carryHostConfig: bool = False


class LinkConfigureParameters(ParameterModel):
    """Link settings to apply; absent fields are left as they are (at least one is set)."""

    mtu: Mtu | None = None
    up: bool | None = None

    @model_validator(mode="after")
    def _something_to_do(self) -> LinkConfigureParameters:
        if self.mtu is None and self.up is None:
            raise ValueError("set at least one of mtu, up")
        return self


class CreateMacvlanParameters(ParameterModel):
    """macvlan mode (``bridge`` is the certified initial mode) and the child's MTU."""

    mode: Literal["bridge", "private", "vepa", "passthru"]
    mtu: Mtu


class CreateIpvlanParameters(ParameterModel):
    """ipvlan mode (``l2`` is the certified initial mode) and the child's MTU."""

    mode: Literal["l2", "l3", "l3s"]
    mtu: Mtu


class CreateMacvlanInSandboxParameters(ParameterModel):
    """``/v2``: the child's name in the sandbox, macvlan mode, MTU and admin state."""

    ifName: IfName
    mode: Literal["bridge", "private", "vepa", "passthru"]
    mtu: Mtu
    up: bool


class CreateIpvlanInSandboxParameters(ParameterModel):
    """``/v2``: the child's name in the sandbox, ipvlan mode, MTU and admin state."""

    ifName: IfName
    mode: Literal["l2", "l3", "l3s"]
    mtu: Mtu
    up: bool


class CreateVlanParameters(ParameterModel):
    """802.1Q child of a sandbox-local parent: name, tag and MTU (≤ the parent's)."""

    ifName: IfName
    vlanId: VlanId
    mtu: Mtu


class CreateBondParameters(ParameterModel):
    """An active-backup bond with explicit MII monitoring and ``fail_over_mac=active``."""

    ifName: IfName
    mode: Literal["active-backup"]
    miimon: MonitorIntervalMs
    failOverMac: Literal["active"]
    mtu: Mtu


class AttachMasterParameters(ParameterModel):
    """No parameters: the member and master are both handles."""


LINK_MOVE = OpcodeSpec(
    name="linux/link-move/v1",
    boot_volatile=True,
    summary="Move a host link the call exclusively owns into the verified sandbox, renaming it.",
    changes=(
        "Moves the granted host link into the Pod's network namespace and renames it to "
        "ifName there; the host namespace loses the link, and the kernel drops its "
        "addresses and the routes through it. With carryHostConfig, the link's permanent "
        "global addresses and the routes through it are recorded first and handed on to "
        "`ip/carried-host-config/v1`."
    ),
    undo=(
        "Moves the link back to the host namespace under its recorded original name "
        "(found by the ownership the journal recorded, never by name) and puts back its "
        "recorded MTU, MAC, alias, addresses and admin state; with carryHostConfig also the "
        "recorded addresses' flags and the recorded routes (an entry the host already has, "
        "or whose key another route holds, is left as it is)."
    ),
    parameters=LinkMoveParameters,
    inputs={
        "interface": PortSpec(
            HandleType.KERNEL_INTERFACE, _ANY_LINK, ScopeKind.HOST, Access.EXCLUSIVE_CONFIGURE
        )
    },
    outputs={
        "interface": PortSpec(
            HandleType.KERNEL_INTERFACE,
            _ANY_LINK,
            ScopeKind.SANDBOX,
            grants=_CONFIGURE_GRANTS,
            inherits="interface",
        )
    },
    hooks=_CONNECT,
    reversibility=Reversibility.REVERSIBLE,
    recovery=_RESTORABLE,
    requires=frozenset(
        {"host-scope", "owned-link", "exclusive-grant", "name-free", "protected-scope-clear"}
    ),
    postconditions=frozenset({"link-in-sandbox"}),
)

LINK_CONFIGURE = OpcodeSpec(
    name="linux/link-configure/v1",
    boot_volatile=True,
    summary="Set MTU and admin state of a sandbox link the call exclusively configures.",
    changes=(
        "Sets the MTU and/or administrative state (up/down) of a link inside the Pod's "
        "namespace; the original values are recorded first."
    ),
    undo="Restores the recorded MTU and administrative state.",
    parameters=LinkConfigureParameters,
    inputs={
        "interface": PortSpec(
            HandleType.KERNEL_INTERFACE, _ANY_LINK, ScopeKind.SANDBOX, Access.EXCLUSIVE_CONFIGURE
        )
    },
    outputs={
        "interface": PortSpec(
            HandleType.KERNEL_INTERFACE,
            _ANY_LINK,
            ScopeKind.SANDBOX,
            grants=_CONFIGURE_GRANTS,
            inherits="interface",
        )
    },
    hooks=_CONNECT,
    reversibility=Reversibility.REVERSIBLE,
    recovery=_RESTORABLE,
    requires=frozenset({"same-sandbox", "owned-link", "exclusive-grant"}),
    postconditions=frozenset({"link-state-match"}),
)


class HostLinkStateParameters(ParameterModel):
    """No parameters: what is recorded and restored is the allocated link's own state."""


HOST_LINK_STATE = OpcodeSpec(
    name="linux/host-link-state/v1",
    boot_volatile=True,
    summary="Record a lent host link's admin state and MTU; undo sets them again on its return.",
    changes=(
        "Changes nothing: records the link's administrative state and MTU in the host "
        "namespace, with its kernel identity, for the undo. Used where another component "
        "(Multus' delegate) takes the link over and hands it back."
    ),
    undo=(
        "Sets the recorded administrative state and MTU on the link when it is on the host "
        "again with the recorded identity (its recorded ifindex, or its hardware facts); a "
        "link not on the host, or not provably the recorded one, is left as it is."
    ),
    parameters=HostLinkStateParameters,
    inputs={
        "device": PortSpec(
            HandleType.KERNEL_INTERFACE, _ETHERNET, ScopeKind.HOST, Access.EXCLUSIVE_CONFIGURE
        )
    },
    outputs={},
    hooks=frozenset({Hook.PREPARE}),
    reversibility=Reversibility.REVERSIBLE,
    recovery=_CREATED,
    requires=frozenset({"host-scope", "exclusive-grant"}),
    postconditions=frozenset({"link-state-recorded"}),
)


def _shared_parent_child(kind: str, parameters: type[ParameterModel]) -> OpcodeSpec:
    """macvlan and ipvlan children share one contract: one owned child per held share,
    created on the host parent in the host namespace; only the mode check differs."""
    return OpcodeSpec(
        name=f"linux/create-{kind}/v1",
        boot_volatile=True,
        summary=f"Create one owned {kind} child of a held shared parent, in the host namespace.",
        changes=(
            f"Creates a new {kind} link on the held host parent, in the host namespace, named "
            "from its ownership alias; the parent itself is not changed."
        ),
        undo=(
            f"Deletes the {kind} child it created (identified by the recorded ownership alias); "
            "the parent is left as it is."
        ),
        parameters=parameters,
        inputs={
            "parent": PortSpec(
                HandleType.SHARED_PARENT, _ETHERNET, ScopeKind.HOST, Access.CREATE_CHILD
            )
        },
        outputs={
            "interface": PortSpec(
                HandleType.KERNEL_INTERFACE, _ETHERNET, ScopeKind.HOST, grants=_CHILD_GRANTS
            )
        },
        hooks=_CONNECT,
        reversibility=Reversibility.REVERSIBLE,
        recovery=_CREATED,
        requires=frozenset(
            {
                "host-scope",
                "create-child-grant",
                "share-entitlement",
                "parent-mode-compatible",
                "mtu-within-parent",
            }
        ),
        postconditions=frozenset({f"{kind}-mode-match"}),
    )


CREATE_MACVLAN = _shared_parent_child("macvlan", CreateMacvlanParameters)
CREATE_IPVLAN = _shared_parent_child("ipvlan", CreateIpvlanParameters)


def _sandbox_child(kind: str, parameters: type[ParameterModel]) -> OpcodeSpec:
    """``/v2`` of a shared-parent child: created in the verified sandbox in one effect."""
    return OpcodeSpec(
        name=f"linux/create-{kind}/v2",
        boot_volatile=True,
        summary=f"Create one owned {kind} child of a held host parent directly in the sandbox.",
        parameters=parameters,
        inputs={
            "parent": PortSpec(
                HandleType.SHARED_PARENT, _ETHERNET, ScopeKind.HOST, Access.CREATE_CHILD
            )
        },
        outputs={
            "interface": PortSpec(
                HandleType.KERNEL_INTERFACE, _ETHERNET, ScopeKind.SANDBOX, grants=_CHILD_GRANTS
            )
        },
        hooks=_CONNECT,
        reversibility=Reversibility.REVERSIBLE,
        recovery=_CREATED,
        requires=frozenset(
            {
                "host-scope",
                "create-child-grant",
                "share-entitlement",
                "parent-mode-compatible",
                "mtu-within-parent",
                "name-free",
            }
        ),
        postconditions=frozenset({f"{kind}-mode-match", "link-in-sandbox", "link-state-match"}),
        changes=(
            f"Creates a new {kind} link on the held host parent directly inside the Pod's "
            "namespace, named ifName, with the requested MTU and admin state; the parent "
            "itself is not changed."
        ),
        undo=(
            f"Deletes the {kind} child it created in place (identified by the recorded "
            "ifindex, kind and host lower device); the parent is left as it is."
        ),
    )


CREATE_MACVLAN_IN_SANDBOX = _sandbox_child("macvlan", CreateMacvlanInSandboxParameters)
CREATE_IPVLAN_IN_SANDBOX = _sandbox_child("ipvlan", CreateIpvlanInSandboxParameters)

CREATE_VLAN = OpcodeSpec(
    name="linux/create-vlan/v1",
    boot_volatile=True,
    summary="Create an owned 802.1Q child of an Ethernet parent already in the same sandbox.",
    changes=("Creates a new 802.1Q VLAN link named ifName on a parent inside the Pod's namespace."),
    undo="Deletes the VLAN link it created; the parent is left as it is.",
    parameters=CreateVlanParameters,
    inputs={
        "parent": PortSpec(
            HandleType.KERNEL_INTERFACE, _ETHERNET, ScopeKind.SANDBOX, Access.CREATE_CHILD
        )
    },
    outputs={
        "interface": PortSpec(
            HandleType.KERNEL_INTERFACE, _ETHERNET, ScopeKind.SANDBOX, grants=_CHILD_GRANTS
        )
    },
    hooks=_CONNECT,
    reversibility=Reversibility.REVERSIBLE,
    recovery=_CREATED,
    requires=frozenset(
        {"same-sandbox", "create-child-grant", "name-free", "mtu-within-parent", "vlan-tag-free"}
    ),
    postconditions=frozenset({"vlan-parent-and-tag-match", "link-in-sandbox"}),
)

CREATE_BOND = OpcodeSpec(
    name="linux/create-bond/v1",
    boot_volatile=True,
    summary="Create an owned active-backup bond (no members yet) in the verified sandbox.",
    changes=(
        "Creates a new active-backup bond named ifName, without members, inside the Pod's "
        "namespace."
    ),
    undo=(
        "Deletes the bond it created (members attached by later effects are released by "
        "their own undo first)."
    ),
    parameters=CreateBondParameters,
    inputs={},
    outputs={
        "interface": PortSpec(
            HandleType.KERNEL_INTERFACE,
            _ETHERNET,
            ScopeKind.SANDBOX,
            grants=_CHILD_GRANTS | {Access.EXCLUSIVE_MASTER},
        )
    },
    hooks=_CONNECT,
    reversibility=Reversibility.REVERSIBLE,
    recovery=_CREATED,
    requires=frozenset({"same-sandbox", "name-free"}),
    postconditions=frozenset({"bond-mode-match", "link-in-sandbox"}),
)

ATTACH_MASTER = OpcodeSpec(
    name="linux/attach-master/v1",
    boot_volatile=True,
    summary="Enslave one sandbox Ethernet member to a bond this step created.",
    changes="Enslaves one link in the Pod's namespace to a bond this step created.",
    undo="Releases the member from the bond, restoring its recorded state.",
    parameters=AttachMasterParameters,
    inputs={
        "master": PortSpec(
            HandleType.KERNEL_INTERFACE, _ETHERNET, ScopeKind.SANDBOX, Access.EXCLUSIVE_MASTER
        ),
        "member": PortSpec(
            HandleType.KERNEL_INTERFACE, _ETHERNET, ScopeKind.SANDBOX, Access.ATTACH_MEMBER
        ),
    },
    outputs={},
    hooks=_CONNECT,
    reversibility=Reversibility.REVERSIBLE,
    recovery=_RESTORABLE,
    requires=frozenset({"same-sandbox", "member-grant", "master-grant", "member-mtu-match"}),
    postconditions=frozenset({"member-of-master"}),
)

SPECS: tuple[OpcodeSpec, ...] = (
    LINK_MOVE,
    LINK_CONFIGURE,
    HOST_LINK_STATE,
    CREATE_MACVLAN,
    CREATE_IPVLAN,
    CREATE_MACVLAN_IN_SANDBOX,
    CREATE_IPVLAN_IN_SANDBOX,
    CREATE_VLAN,
    CREATE_BOND,
    ATTACH_MASTER,
)
