"""Native executor of ``share/hold-parent/v1``: hold one share of a host parent, change nothing.

Holding a share mutates no kernel state: the journaled effect *is* the share reference (the
journal is the only authority, design §8.1). What the executor does natively is prove the
parent is the allocated link, record its baseline (name, MTU, MAC, admin state, kind) and
refuse, before anything changes, a share whose child kind is incompatible with children that
already hang off the parent (macvlan and ipvlan cannot share a lower device; ipvlan's mode is
parent-wide). Undo verifies the parent still matches the baseline and reconfigures nothing:
a share never configures, resets or restores its parent.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from dmn.host.netns import LinkEnvironment
from dmn.host.rtnetlink.links import LinkState, by_index
from dmn.opcodes.executor import (
    EffectContext,
    Executor,
    ExecutorError,
    Observed,
    RecoveryObservation,
)
from dmn.opcodes.linux.executors import (
    IPVLAN_MODES,
    environment,
    host_children,
    locate_input,
    single,
)
from dmn.opcodes.share import specs
from dmn.opcodes.spec import OpcodeSpec
from dmn.vocabulary.handles import Handle
from dmn.vocabulary.terms import Access, HandleType, ScopeKind

_log = logging.getLogger(__name__)


def _compatible(env: LinkEnvironment, parent: LinkState, kind: str, mode: str) -> None:
    for child in host_children(env, parent.index):
        if child.kind in ("macvlan", "ipvlan") and child.kind != kind:
            raise ExecutorError(
                "E_FAMILY_CONFLICT",
                f"parent {parent.name} already has {child.kind} child {child.name}; "
                f"a {kind} share cannot be held on it",
            )
        if kind == "ipvlan" and child.kind == "ipvlan":
            live = child.info.get("IFLA_IPVLAN_MODE")
            if live is not None and live != IPVLAN_MODES[mode]:
                raise ExecutorError(
                    "E_FAMILY_CONFLICT", f"parent {parent.name} runs ipvlan mode {live}, not {mode}"
                )


class HoldParent:
    """``share/hold-parent/v1``."""

    spec: OpcodeSpec = specs.HOLD_PARENT

    def capture(self, ctx: EffectContext) -> Any:
        env = environment(ctx)
        parent = single(ctx, "parent")
        if parent.scope.kind is not ScopeKind.HOST:
            raise ExecutorError("E_SCOPE", "a shared parent lives in the host namespace")
        _, link = locate_input(env, parent)
        kind, mode = str(ctx.parameters["childKind"]), str(ctx.parameters["mode"])
        _compatible(env, link, kind, mode)
        return {"host": env.host.to_json(), "baseline": link.to_json()}

    def _live(self, ctx: EffectContext, before: Any) -> LinkState | None:
        env = environment(ctx)
        baseline = LinkState.from_json(before["baseline"])
        live = by_index(env.rtnl(env.host), baseline.index)
        if live is None or live.name != baseline.name or live.mac != baseline.mac:
            return None
        return live

    def apply(self, ctx: EffectContext, before: Any) -> None:
        live = self._live(ctx, before)
        if live is None:
            raise ExecutorError("E_LINK_CHANGED", "the parent is no longer the captured link")
        env = environment(ctx)
        _compatible(
            env,
            live,
            str(ctx.parameters["childKind"]),
            str(ctx.parameters["mode"]),
        )

    def observe(self, ctx: EffectContext, before: Any) -> Observed:
        live = self._live(ctx, before)
        if live is None:
            return Observed(False, detail="parent changed identity")
        parent = single(ctx, "parent")
        held = Handle(
            id=f"{parent.id}/share/{ctx.operation_id}",
            type=HandleType.SHARED_PARENT,
            inventory_id=parent.inventory_id,
            scope=parent.scope,
            accesses=frozenset({Access.CREATE_CHILD}),
            link_type=parent.link_type,
            provenance=parent.provenance,
            observations={
                "ifName": live.name,
                "ifIndex": live.index,
                "mac": live.mac,
                "childKind": str(ctx.parameters["childKind"]),
                "mode": str(ctx.parameters["mode"]),
            },
        )
        return Observed(True, {"parent": (held,)})

    def recover(self, ctx: EffectContext, before: Any) -> RecoveryObservation:
        # nothing in the kernel changed; the journal's record is the share reference
        return RecoveryObservation.APPLIED

    def undo(
        self, ctx: EffectContext, before: Any, outputs: Mapping[str, tuple[Handle, ...]]
    ) -> None:
        live = self._live(ctx, before)
        baseline = LinkState.from_json(before["baseline"])
        if live is None:
            _log.warning("effect=%s event=release parent=%s gone", ctx.effect_id, baseline.name)
        elif (live.mtu, live.up) != (baseline.mtu, baseline.up):
            _log.warning(
                "effect=%s event=release parent=%s baseline-drift (left as is)",
                ctx.effect_id,
                baseline.name,
            )


EXECUTORS: Mapping[str, Executor] = {specs.HOLD_PARENT.name: HoldParent()}
