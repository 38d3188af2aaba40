"""Hand-built bound programs over the test opcodes (before the binder existed)."""

from __future__ import annotations

from dmn.engine.bound import BoundEffect, BoundProgram, EffectOutputRef
from dmn.vocabulary.terms import Access
from tests.journal.world import host_handle

PARENT = host_handle("eth0", Access.CREATE_CHILD, Access.READ)
DEVICE = host_handle("pf0", Access.EXCLUSIVE_CONFIGURE)


def child_program(name: str = "vlan10", mtu: int = 1400) -> BoundProgram:
    """create child → set mtu → set up; exports the child (3 effects)."""
    ref = EffectOutputRef("create", "interface")
    return BoundProgram(
        plugin="test-cni",
        plugin_version="v1",
        hook="connect",
        contract_digest="sha256:contract",
        effects=(
            BoundEffect(
                "create", "create", "test/create/v1", {"parent": (PARENT,)}, {"name": name}
            ),
            BoundEffect(
                "mtu", "mtu", "test/set/v1", {"interface": (ref,)}, {"key": "mtu", "value": mtu}
            ),
            BoundEffect(
                "up", "up", "test/set/v1", {"interface": (ref,)}, {"key": "up", "value": True}
            ),
        ),
        exports={"interface": (ref,)},
    )


def reset_program() -> BoundProgram:
    """reset pf0 (irreversible) → set pf0.mode (2 effects)."""
    return BoundProgram(
        plugin="test-reset",
        plugin_version="v1",
        hook="prepare",
        contract_digest="sha256:contract",
        effects=(
            BoundEffect("reset", "reset", "test/reset/v1", {"device": (DEVICE,)}, {}),
            BoundEffect(
                "mode",
                "mode",
                "test/set/v1",
                {"interface": (DEVICE,)},
                {"key": "mode", "value": "switchdev"},
            ),
        ),
        exports={"device": (DEVICE,)},
    )


def foreign_world() -> dict[str, object]:
    """A world with objects the journal does not own, which tests assert are untouched."""
    return {
        "objects": {"eth0": {"alias": "host"}, "pf0": {"alias": "host"}, "other": {"alias": "x"}},
        "attrs": {"obj:eth0.mtu": 9000, "obj:pf0.mode": "legacy"},
        "resets": {},
    }
