"""Executor of ``ethtool/features/v1``: offload features of a sandbox link.

The before-image records the link's identity as the link opcodes prove it (pinned namespace,
ifindex, kernel-set facts; :mod:`dmn.host.rtnetlink.link_identity`) and, for exactly the
requested features, which the kernel knows, which are changeable, and which were wanted and
active. Capture refuses before anything changes: a name this kernel does not know
(``E_FEATURE_UNKNOWN``), a fixed feature asked to change (``E_FEATURE_FIXED``). Every later
step proves the link at the recorded ifindex first and talks to the kernel by that ifindex on
an ethtool socket inside the recorded namespace (``host/ethtool.py``): names play no part,
so a tenant's rename changes nothing, and another link at that ifindex raises
``E_IDENTITY_MISMATCH`` (the runner quarantines the effect).

Undo asks for the recorded *wanted* state of the requested changeable features (what
``ethtool -K`` sets; the kernel re-derives the active state and the features that depend on
them) and reads it back. Features survive a namespace move, so when the recorded namespace
is gone and the identity names hardware (permanent MAC or parent device), the device the
kernel returned to the host is found by those facts and restored there; a virtual link died
with its namespace (nothing to do).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from dmn.host.ethtool import Features, open_in
from dmn.host.netns import LinkEnvironment, NamespaceRef
from dmn.host.rtnetlink.link_identity import (
    IDENTITY_KEY,
    NAMESPACE_LOST,
    find_hardware,
    of_earlier_boot,
    prove,
    record_identity,
    recorded,
)
from dmn.host.rtnetlink.links import LinkState
from dmn.opcodes.effect_handles import Outputs, environment, link_handle, locate_input, single
from dmn.opcodes.ethtool import specs
from dmn.opcodes.executor import EffectContext, ExecutorError, Observed, RecoveryObservation
from dmn.opcodes.spec import OpcodeSpec
from dmn.vocabulary.terms import ScopeKind

_log = logging.getLogger(__name__)


def wanted(ctx: EffectContext) -> dict[str, bool]:
    """The bound ``features`` map, re-validated against the model."""
    try:
        model = specs.FeaturesParameters.model_validate(dict(ctx.parameters))
    except ValidationError as exc:
        raise ExecutorError("E_PARAM_TYPE", f"ethtool/features/v1 parameters: {exc}") from exc
    return {str(name): on for name, on in model.features.items()}


def _refusal(link: LinkState, features: Features, want: Mapping[str, bool]) -> None:
    unknown = sorted(name for name in want if name not in features.known)
    if unknown:
        raise ExecutorError(
            "E_FEATURE_UNKNOWN",
            f"parameters.features: this kernel has no feature {', '.join(unknown)}",
        )
    fixed = sorted(
        name
        for name, on in want.items()
        if features.fixed(name) and (name in features.active) != on
    )
    if fixed:
        raise ExecutorError(
            "E_FEATURE_FIXED",
            f"parameters.features: {link.name!r} ({link.kind or 'device'}) has "
            f"{', '.join(fixed)} fixed; it cannot be turned "
            + ", ".join(f"{n} {'on' if want[n] else 'off'}" for n in fixed),
        )


def _matches(features: Features, want: Mapping[str, bool]) -> bool:
    return all((name in features.active) == on for name, on in want.items())


class FeaturesExecutor:
    """``ethtool/features/v1``; undo asks for the recorded wanted state again."""

    spec: OpcodeSpec = specs.FEATURES

    def capture(self, ctx: EffectContext) -> Any:
        env = environment(ctx)
        handle = single(ctx, "interface")
        if handle.scope.kind is not ScopeKind.SANDBOX:
            raise ExecutorError("E_SCOPE", f"handle {handle.id} is not in a sandbox")
        want = wanted(ctx)
        ref, link = locate_input(env, handle)
        with open_in(env, ref) as ethtool:
            features = ethtool.features(link.index)
        _refusal(link, features, want)
        return {
            "netns": ref.to_json(),
            "features": features.to_json(frozenset(want)),
            IDENTITY_KEY: record_identity(env, ref, link),
        }

    def _link(self, env: LinkEnvironment, before: Any) -> tuple[NamespaceRef, LinkState | None]:
        ref = NamespaceRef.from_json(before["netns"])
        return ref, prove(env, ref, recorded(before))

    def _read(
        self, env: LinkEnvironment, before: Any
    ) -> tuple[NamespaceRef, LinkState, Features] | None:
        ref, link = self._link(env, before)
        if link is None:
            return None
        with open_in(env, ref) as ethtool:
            return ref, link, ethtool.features(link.index)

    def apply(self, ctx: EffectContext, before: Any) -> None:
        env = environment(ctx)
        captured = Features.from_json(before["features"])
        ref, link = self._link(env, before)
        if link is None:
            raise ExecutorError("E_LINK_CHANGED", "the captured link is gone")
        change = {n: on for n, on in wanted(ctx).items() if not captured.fixed(n)}
        if change:
            with open_in(env, ref) as ethtool:
                ethtool.set_wanted(link.index, change)

    def observe(self, ctx: EffectContext, before: Any) -> Observed:
        env = environment(ctx)
        want = wanted(ctx)
        found = self._read(env, before)
        if found is None:
            return Observed(False, detail="link is gone")
        ref, link, features = found
        out = link_handle(single(ctx, "interface"), ctx, env, ref, link, frozenset())
        differ = sorted(n for n, on in want.items() if (n in features.active) != on)
        detail = f"not in effect as asked: {', '.join(differ)}" if differ else ""
        return Observed(not differ, {"interface": (out,)}, detail)

    def recover(self, ctx: EffectContext, before: Any) -> RecoveryObservation:
        env = environment(ctx)
        want = wanted(ctx)
        try:
            found = self._read(env, before)
        except ExecutorError:
            return RecoveryObservation.UNCERTAIN
        if found is None:
            return RecoveryObservation.UNCERTAIN
        live = found[2]
        if _matches(live, want):
            return RecoveryObservation.APPLIED
        captured = Features.from_json(before["features"])
        now, then = live.to_json(captured.known), captured.to_json(captured.known)
        if (now["wanted"], now["active"]) == (then["wanted"], then["active"]):
            return RecoveryObservation.NOT_APPLIED
        return RecoveryObservation.UNCERTAIN

    def _restore(
        self, env: LinkEnvironment, ref: NamespaceRef, index: int, captured: Features
    ) -> None:
        restore = {n: n in captured.wanted for n in captured.changeable}
        if not restore:
            return
        with open_in(env, ref) as ethtool:
            ethtool.set_wanted(index, restore)
            live = ethtool.features(index)
        differ = sorted(n for n, on in restore.items() if (n in live.wanted) != on)
        if differ:
            raise ExecutorError(
                "E_ETHTOOL", f"ifindex {index}: {', '.join(differ)} not restored as recorded"
            )

    def undo(self, ctx: EffectContext, before: Any, outputs: Outputs) -> None:
        env = environment(ctx)
        captured = Features.from_json(before["features"])
        try:
            ref, link = self._link(env, before)
        except ExecutorError as exc:
            if exc.code not in NAMESPACE_LOST:
                raise
            self._restore_returned(ctx, env, before, captured, exc.code)
            return
        if link is None:
            _log.warning("effect=%s event=undo-skip reason=link-gone", ctx.effect_id)
            return
        self._restore(env, ref, link.index, captured)

    def _restore_returned(
        self, ctx: EffectContext, env: LinkEnvironment, before: Any, captured: Features, why: str
    ) -> None:
        """The namespace is gone: hardware went back to the host with our features still
        set (restore it there, found by its recorded hardware facts); a virtual link died."""
        identity = recorded(before)
        if of_earlier_boot(env, identity):
            _log.info("effect=%s event=undo-noop reason=%s", ctx.effect_id, why)
            return
        host_link = find_hardware(env, identity)
        if host_link is None:
            _log.info("effect=%s event=undo-noop reason=%s", ctx.effect_id, why)
            return
        self._restore(env, env.host, host_link.index, captured)
        _log.info(
            "effect=%s event=undo-restored-on-host ifindex=%s", ctx.effect_id, host_link.index
        )
