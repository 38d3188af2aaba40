"""The lifecycle every link-creating ``linux/*`` executor shares.

Capture chooses the new link's ifindex (random, free in the target namespace) and journals
it with the kind and lower device as the link's identity (:mod:`link_identity`) before the
link exists. Apply creates the link at exactly that ifindex under the journaled nonce name,
then claims it with the ownership alias (and the final name, in one request); recovery
finishes a claim a crash interrupted; undo deletes only the link at the recorded ifindex of
the recorded namespace that has the recorded kind and lower device. The alias and the names
are labels: a tenant can copy them onto its own links, so they are never the proof. A link
that holds our ifindex but differs is ``E_IDENTITY_MISMATCH`` (quarantined, not touched); a
record from before identities were journaled is ``E_IDENTITY_UNRECORDED`` (the same).
Subclasses supply the kind, the create request, the pre-create checks and the read-back
checks.
"""

from __future__ import annotations

import errno
import logging
from typing import Any

from dmn.host.netns import LinkEnvironment, NamespaceRef
from dmn.host.rtnetlink.link_identity import (
    IDENTITY_KEY,
    choose_index,
    planned_identity,
    prove,
    recorded,
    relocated,
)
from dmn.host.rtnetlink.links import LinkState, link_request
from dmn.opcodes.effect_handles import Outputs, environment, link_handle
from dmn.opcodes.executor import EffectContext, ExecutorError, Observed, RecoveryObservation
from dmn.opcodes.linux.link_ownership import delete_owned
from dmn.opcodes.spec import OpcodeSpec
from dmn.vocabulary.terms import Access

_log = logging.getLogger("dmn.opcodes.linux.executors")  # the family logger, as before the split


class _CreatedLink:
    """Common lifecycle of a link this effect creates (nonce name → alias → maybe rename)."""

    spec: OpcodeSpec
    kind: str = ""

    def _planned(
        self, env: LinkEnvironment, ref: NamespaceRef, lower: int = 0, lower_netns: Any = None
    ) -> dict[str, Any]:
        """The before-image entry naming the link about to be created: its ifindex (chosen
        now), namespace, kind and lower device."""
        index = choose_index(env, ref)
        return {IDENTITY_KEY: planned_identity(ref, self.kind, index, lower, lower_netns)}

    def _index(self, before: Any) -> int:
        return int(recorded(before)["index"])

    def _target_ref(self, env: LinkEnvironment, before: Any) -> NamespaceRef:
        return NamespaceRef.from_json(before["netns"])

    def _find(
        self, env: LinkEnvironment, before: Any, everywhere: bool = True
    ) -> tuple[NamespaceRef, LinkState] | None:
        """This effect's link, proven by its recorded identity: at its ifindex in the target
        namespace; with ``everywhere`` (recovery and undo) and a host target, also at that
        ifindex in a known sandbox (a host child a later effect moved there keeps its
        ifindex; its lower in the host is what a tenant cannot forge), where a link that
        differs is simply not ours and is left alone. A link created in a sandbox never
        leaves it legitimately: when that sandbox is gone, so is the link. Raises
        ``E_IDENTITY_MISMATCH`` when the target namespace holds another link there."""
        identity = recorded(before)
        target = self._target_ref(env, before)
        try:
            link = prove(env, target, identity)
        except ExecutorError as exc:
            if exc.code == "E_IDENTITY_MISMATCH" or not everywhere:
                raise
            link = None  # the target namespace is gone: look where the link may have gone
        if link is not None:
            return target, link
        if not everywhere or not env.is_host(target):
            return None
        for ref in env.known():
            if ref.identity == target.identity:
                continue
            try:
                moved = prove(env, ref, relocated(identity, ref, int(identity["index"])))
            except ExecutorError:
                continue
            if moved is not None:
                return ref, moved
        return None

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
        link_request("claim link", env.rtnl(ref), "set", index=link.index, **changes)

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
                        "E_NAME_TAKEN",
                        f"nonce name {before['nonce']} or ifindex {self._index(before)} exists",
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
            return Observed(False, detail="created link not found or not claimed")
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
