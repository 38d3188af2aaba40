"""Executor of ``linux/host-link-state/v1``: give the host back a link as it lent it.

Why: in Multus automatic mode (design §6.8) the node hands a whole link to Multus' delegate
and never moves it itself. The reference host-device plugin's DEL — and SR-IOV CNI's —
returns the link to the host *down*: the node then reads it as unusable and taints the
device, so one Pod's lifetime would take a NIC out of service. This effect records the
link's admin state and MTU at NodePrepare, before the hand-over, and its undo (at
NodeUnprepare, after the kubelet has stopped the sandbox and so after the delegate's DEL)
sets them again.

Contract. ``apply`` changes nothing; it proves the recorded link is still the allocated one.
``undo`` acts only on a link on the host that is provably the recorded one — at its
recorded ifindex with every recorded kernel fact (:mod:`dmn.host.rtnetlink.link_identity`),
or, for hardware, the one host link with its permanent MAC and parent device. A link still
in some other namespace, gone, or replaced at that ifindex by another link is left as it
is and the undo is done: it restores a state, it owns nothing, and a link it cannot prove
must not hold the claim's release hostage. Names, aliases and MACs are never consulted.
"""

from __future__ import annotations

import logging
from typing import Any

from dmn.host.errors import HostError
from dmn.host.netns import LinkEnvironment, NamespaceRef
from dmn.host.rtnetlink.link_identity import (
    IDENTITY_KEY,
    find_hardware,
    of_earlier_boot,
    prove,
    record_identity,
    recorded,
)
from dmn.host.rtnetlink.links import LinkState, link_request
from dmn.opcodes.effect_handles import Outputs, environment, locate_input, single
from dmn.opcodes.executor import EffectContext, ExecutorError, Observed, RecoveryObservation
from dmn.opcodes.linux import specs
from dmn.opcodes.spec import OpcodeSpec
from dmn.vocabulary.terms import ScopeKind

_log = logging.getLogger(__name__)


class HostLinkState:
    """``linux/host-link-state/v1``."""

    spec: OpcodeSpec = specs.HOST_LINK_STATE

    def capture(self, ctx: EffectContext) -> Any:
        env = environment(ctx)
        handle = single(ctx, "device")
        if handle.scope.kind is not ScopeKind.HOST:
            raise ExecutorError("E_SCOPE", f"handle {handle.id} is not on the host")
        ref, link = locate_input(env, handle)
        return {
            "netns": ref.to_json(),
            "up": link.up,
            "mtu": link.mtu,
            IDENTITY_KEY: record_identity(env, ref, link),
        }

    def apply(self, ctx: EffectContext, before: Any) -> None:
        env = environment(ctx)
        ref = NamespaceRef.from_json(before["netns"])
        if prove(env, ref, recorded(before)) is None:
            raise ExecutorError("E_LINK_CHANGED", "the allocated link left the host")

    def observe(self, ctx: EffectContext, before: Any) -> Observed:
        return Observed(True)

    def recover(self, ctx: EffectContext, before: Any) -> RecoveryObservation:
        return RecoveryObservation.APPLIED  # apply changes nothing

    def undo(self, ctx: EffectContext, before: Any, outputs: Outputs) -> None:
        env = environment(ctx)
        identity = recorded(before)
        if of_earlier_boot(env, identity):
            return  # the boot reset the link; its state is the node's again
        link = self._returned(env, before, identity)
        if link is None:
            return
        changes: dict[str, Any] = {}
        if link.mtu != int(before["mtu"]):
            changes["mtu"] = int(before["mtu"])
        if link.up != bool(before["up"]):
            changes["state"] = "up" if before["up"] else "down"
        if changes:
            ipr = env.rtnl(env.host)
            link_request(f"restore {link.name}", ipr, "set", index=link.index, **changes)
            _log.info("host link restored link=%s changes=%s", link.name, sorted(changes))

    def _returned(
        self, env: LinkEnvironment, before: Any, identity: dict[str, Any]
    ) -> LinkState | None:
        """The recorded link when it is on the host again and provably itself, else None."""
        ref = NamespaceRef.from_json(before["netns"])
        link: LinkState | None = None
        try:
            link = prove(env, ref, identity)
        except HostError as error:  # another link holds the ifindex: hardware may be elsewhere
            _skipped(identity, error)
            if error.code != "E_IDENTITY_MISMATCH":
                return None
        if link is None:
            try:
                link = find_hardware(env, identity)
            except HostError as error:
                _skipped(identity, error)
                return None
        if link is None:
            _log.info("host link not back on the host index=%s", identity.get("index"))
        return link


def _skipped(identity: dict[str, Any], error: HostError) -> None:
    _log.warning(
        "host link not restored index=%s code=%s detail=%s",
        identity.get("index"),
        error.code,
        error,
    )
