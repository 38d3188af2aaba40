"""The lifecycle every link-creating ``linux/*`` executor shares.

Create under the journaled nonce name, then claim with the ownership alias (and the final
name, in one request); recovery finishes a claim a crash interrupted; undo deletes only a
link :mod:`link_ownership` proves is ours. Subclasses supply the kind, the create request,
the pre-create checks and the read-back checks.
"""

from __future__ import annotations

import errno
import logging
from typing import Any

from dmn.opcodes.executor import EffectContext, ExecutorError, Observed, RecoveryObservation
from dmn.opcodes.linux.effect_handles import Outputs, environment, link_handle
from dmn.opcodes.linux.link_ownership import delete_owned, find_owned, find_owned_in
from dmn.opcodes.linux.links import LinkState, netlink_call
from dmn.opcodes.linux.netns import LinkEnvironment, NamespaceRef
from dmn.opcodes.spec import OpcodeSpec
from dmn.vocabulary.terms import Access

_log = logging.getLogger("dmn.opcodes.linux.executors")  # the family logger, as before the split


class _CreatedLink:
    """Common lifecycle of a link this effect creates (nonce name → alias → maybe rename)."""

    spec: OpcodeSpec
    kind: str = ""

    def _nonce(self, before: Any) -> tuple[str, str, int]:
        return (before["nonce"], self.kind, int(before.get("lower", 0)))

    def _target_ref(self, env: LinkEnvironment, before: Any) -> NamespaceRef:
        return NamespaceRef.from_json(before["netns"])

    def _find(
        self, env: LinkEnvironment, before: Any, everywhere: bool = True
    ) -> tuple[NamespaceRef, LinkState] | None:
        """This effect's link: in the target namespace only (forward path, where nothing else
        can have moved it yet), or in every known namespace (recovery and undo)."""
        target = self._target_ref(env, before)
        names = (str(before.get("final") or ""), before["nonce"])
        if not everywhere:
            return find_owned_in(
                env, target, before["alias"], self._nonce(before), names, dump=False
            )
        return find_owned(env, before["alias"], self._nonce(before), target, names)

    def _create(self, ctx: EffectContext, ipr: Any, before: Any) -> None:
        raise NotImplementedError

    def _finish(
        self, env: LinkEnvironment, ref: NamespaceRef, link: LinkState, before: Any
    ) -> None:
        """Give the new link its proof of ownership (and its final name, in one request)."""
        changes: dict[str, Any] = {"ifalias": before["alias"]}
        final = before.get("final")
        if final and link.name != final:
            changes["ifname"] = final
        netlink_call("claim link", env.rtnl(ref).link, "set", index=link.index, **changes)

    def _grants(self) -> frozenset[Access]:
        port = self.spec.outputs["interface"]
        return port.grants

    def _check(self, ctx: EffectContext, env: LinkEnvironment, before: Any) -> None:
        """Re-check identity and compatibility immediately before creating (subclasses)."""

    def apply(self, ctx: EffectContext, before: Any) -> None:
        env = environment(ctx)
        ref = self._target_ref(env, before)
        ipr = env.rtnl(ref)
        if self._find(env, before, everywhere=False) is None:
            self._check(ctx, env, before)
            try:
                self._create(ctx, ipr, before)
            except ExecutorError as exc:
                if exc.code == f"E_NETLINK_{errno.EEXIST}":  # the kernel checks atomically
                    raise ExecutorError(
                        "E_NAME_TAKEN", f"nonce name {before['nonce']} exists"
                    ) from exc
                raise
        found = self._find(env, before, everywhere=False)
        if found is None:
            raise ExecutorError("E_LINK_LOST", "created link not found")
        if found[1].alias != before["alias"] or (
            before.get("final") and found[1].name != before["final"]
        ):
            self._finish(env, found[0], found[1], before)

    def _verify(self, ctx: EffectContext, link: LinkState, before: Any) -> str:
        """Empty when the link reads back as bound, else what differs (subclasses add)."""
        if before.get("final") and link.name != before["final"]:
            return f"name {link.name} != {before['final']}"
        if link.mtu != int(ctx.parameters["mtu"]):
            return f"mtu {link.mtu} != {ctx.parameters['mtu']}"
        if link.kind != self.kind:
            return f"kind {link.kind} != {self.kind}"
        if before.get("lower") and link.lower != int(before["lower"]):
            return f"lower {link.lower} != {before['lower']}"
        return ""

    def observe(self, ctx: EffectContext, before: Any) -> Observed:
        env = environment(ctx)
        found = self._find(env, before, everywhere=False)
        if found is None or found[1].alias != before["alias"]:
            return Observed(False, detail="created link not found by its alias")
        ref, link = found
        problem = self._verify(ctx, link, before)
        out = link_handle(None, ctx, env, ref, link, self._grants())
        return Observed(not problem, {"interface": (out,)}, problem)

    def recover(self, ctx: EffectContext, before: Any) -> RecoveryObservation:
        env = environment(ctx)
        found = self._find(env, before)
        if found is None:
            return RecoveryObservation.NOT_APPLIED
        ref, link = found
        if link.alias != before["alias"] or (before.get("final") and link.name != before["final"]):
            self._finish(env, ref, link, before)  # crash between create and claim
        return RecoveryObservation.APPLIED

    def undo(self, ctx: EffectContext, before: Any, outputs: Outputs) -> None:
        env = environment(ctx)
        found = self._find(env, before)
        if found is None:
            _log.info("effect=%s event=undo-noop reason=not-present", ctx.effect_id)
            return
        delete_owned(env, *found)
