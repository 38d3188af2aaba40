"""Executor of ``sysctl/interface/v1``: allowlisted per-interface sysctls of a sandbox link.

The before-image records the link's identity as the link opcodes prove it (the pinned
namespace, the ifindex there and the kernel-set facts of :mod:`dmn.host.rtnetlink.
link_identity`) and the value of every requested key. Every later step — apply, observe,
recovery, undo — first proves the link at the recorded ifindex is that link, then reads its
*current* name from the kernel and hands both to :mod:`dmn.host.sysctl`, which opens the files
under that name in the namespace and proves afterwards that the name still belongs to the
ifindex. So a tenant that renamed our link has its setting restored under the new name, and
a foreign link given our link's old name is never written. Another link at the recorded
ifindex raises ``E_IDENTITY_MISMATCH`` (the runner quarantines the effect); a destroyed
namespace took the link's settings with it (undo has nothing to do; a device the kernel
returns to the host gets fresh per-interface tables on its way).
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError

from dmn.host import sysctl as kernel_sysctl
from dmn.host.netns import LinkEnvironment, NamespaceRef
from dmn.host.rtnetlink.link_identity import (
    IDENTITY_KEY,
    NAMESPACE_LOST,
    prove,
    record_identity,
    recorded,
)
from dmn.host.rtnetlink.links import LinkState
from dmn.host.sysctl import InterfaceSysctl
from dmn.opcodes.effect_handles import Outputs, environment, link_handle, locate_input, single
from dmn.opcodes.executor import EffectContext, ExecutorError, Observed, RecoveryObservation
from dmn.opcodes.spec import OpcodeSpec
from dmn.opcodes.sysctl import specs
from dmn.vocabulary.terms import ScopeKind

_log = logging.getLogger(__name__)


def wanted(ctx: EffectContext) -> dict[InterfaceSysctl, int]:
    """The bound parameters as kernel keys and values, re-validated against the model (a
    payload the binder did not make is refused, never turned into a path)."""
    try:
        model = specs.InterfaceSysctlParameters.model_validate(dict(ctx.parameters))
    except ValidationError as exc:
        raise ExecutorError("E_PARAM_TYPE", f"sysctl/interface/v1 parameters: {exc}") from exc
    return {
        InterfaceSysctl(*specs.SYSCTL_KEYS[name]): value
        for name, value in model.requested().items()
    }


def _recorded_values(before: Any) -> dict[InterfaceSysctl, int]:
    return {InterfaceSysctl.parse(k): int(v) for k, v in before["values"].items()}


class InterfaceSysctlExecutor:
    """``sysctl/interface/v1``; undo writes back the recorded values to the recorded link."""

    spec: OpcodeSpec = specs.INTERFACE

    def capture(self, ctx: EffectContext) -> Any:
        env = environment(ctx)
        handle = single(ctx, "interface")
        if handle.scope.kind is not ScopeKind.SANDBOX:
            raise ExecutorError("E_SCOPE", f"handle {handle.id} is not in a sandbox")
        keys = list(wanted(ctx))
        ref, link = locate_input(env, handle)
        values = kernel_sysctl.read_values(env, ref, link.index, link.name, keys)
        return {
            "netns": ref.to_json(),
            "values": {key.text: values[key] for key in keys},
            IDENTITY_KEY: record_identity(env, ref, link),
        }

    def _link(self, env: LinkEnvironment, before: Any) -> tuple[NamespaceRef, LinkState | None]:
        """The recorded namespace and the link at the recorded ifindex when it has the
        recorded identity; None when the ifindex is free; ``E_IDENTITY_MISMATCH`` when
        another link holds it."""
        ref = NamespaceRef.from_json(before["netns"])
        return ref, prove(env, ref, recorded(before))

    def _read(
        self, env: LinkEnvironment, before: Any, keys: list[InterfaceSysctl]
    ) -> tuple[NamespaceRef, LinkState, dict[InterfaceSysctl, int]] | None:
        ref, link = self._link(env, before)
        if link is None:
            return None
        return ref, link, kernel_sysctl.read_values(env, ref, link.index, link.name, keys)

    def apply(self, ctx: EffectContext, before: Any) -> None:
        env = environment(ctx)
        ref, link = self._link(env, before)
        if link is None:
            raise ExecutorError("E_LINK_CHANGED", "the captured link is gone")
        kernel_sysctl.write_values(env, ref, link.index, link.name, wanted(ctx))

    def observe(self, ctx: EffectContext, before: Any) -> Observed:
        env = environment(ctx)
        want = wanted(ctx)
        found = self._read(env, before, list(want))
        if found is None:
            return Observed(False, detail="link is gone")
        ref, link, live = found
        out = link_handle(single(ctx, "interface"), ctx, env, ref, link, frozenset())
        differ = sorted(k.text for k, v in want.items() if live[k] != v)
        detail = f"read back otherwise: {', '.join(differ)}" if differ else ""
        return Observed(not differ, {"interface": (out,)}, detail)

    def recover(self, ctx: EffectContext, before: Any) -> RecoveryObservation:
        env = environment(ctx)
        want = wanted(ctx)
        try:
            found = self._read(env, before, list(want))
        except ExecutorError:
            return RecoveryObservation.UNCERTAIN
        if found is None:
            return RecoveryObservation.UNCERTAIN
        live = found[2]
        if all(live[k] == v for k, v in want.items()):
            return RecoveryObservation.APPLIED
        if all(live[k] == v for k, v in _recorded_values(before).items()):
            return RecoveryObservation.NOT_APPLIED
        return RecoveryObservation.UNCERTAIN

    def undo(self, ctx: EffectContext, before: Any, outputs: Outputs) -> None:
        env = environment(ctx)
        try:
            ref, link = self._link(env, before)
        except ExecutorError as exc:
            if exc.code not in NAMESPACE_LOST:
                raise
            # the namespace is gone: a virtual link died with it, a device went back to the
            # host with fresh per-interface tables
            _log.info("effect=%s event=undo-noop reason=%s", ctx.effect_id, exc.code)
            return
        if link is None:
            _log.warning("effect=%s event=undo-skip reason=link-gone", ctx.effect_id)
            return
        restore = _recorded_values(before)
        ordered = dict(reversed(list(restore.items())))
        kernel_sysctl.write_values(env, ref, link.index, link.name, ordered)
        live = kernel_sysctl.read_values(env, ref, link.index, link.name, list(restore))
        differ = sorted(k.text for k, v in restore.items() if live[k] != v)
        if differ:
            raise ExecutorError(
                "E_SYSCTL", f"{link.name!r}: {differ} read back otherwise after the restore"
            )
