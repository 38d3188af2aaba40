"""The link an ``ip/*`` effect configures: taken from the granted handle, recorded by its
kernel identity at capture, and proven to be that link again before every later step.

Why: addresses and routes are configured on a link a tenant can rename, re-address, move
away and replace. What an ``ip/*`` effect records and later touches is therefore tied to
the link's identity as :mod:`dmn.host.rtnetlink.link_identity` records it (the namespace's
(dev, inode), the ifindex there, kind, lower device, permanent MAC, parent device), never to
its name: :func:`proven` answers the live link when every recorded fact holds, None when
the ifindex is free (the link is gone, and with it whatever was configured on it), and
raises ``E_IDENTITY_MISMATCH`` when another link holds the ifindex (the effect is then
quarantined, nothing touched).
"""

from __future__ import annotations

import logging
from typing import Any

from dmn.host.errors import HostError
from dmn.host.netns import LinkEnvironment, NamespaceRef
from dmn.host.rtnetlink.link_identity import (
    IDENTITY_KEY,
    NAMESPACE_LOST,
    prove,
    record_identity,
    recorded,
)
from dmn.host.rtnetlink.links import LinkState
from dmn.opcodes.effect_handles import environment, link_handle, locate_input, single
from dmn.opcodes.executor import EffectContext, ExecutorError
from dmn.vocabulary.handles import Handle, Observation
from dmn.vocabulary.terms import ScopeKind

_log = logging.getLogger("dmn.opcodes.ip.executors")


def captured(ctx: EffectContext) -> tuple[LinkEnvironment, NamespaceRef, LinkState, dict[str, Any]]:
    """The granted sandbox link, found from the handle and re-verified, and the before-image
    entries that identify it."""
    env = environment(ctx)
    handle = single(ctx, "interface")
    if handle.scope.kind is not ScopeKind.SANDBOX:
        raise ExecutorError("E_SCOPE", f"handle {handle.id} is not in a sandbox")
    ref, link = locate_input(env, handle)
    record = {
        "netns": ref.to_json(),
        "link": link.to_json(),
        IDENTITY_KEY: record_identity(env, ref, link),
    }
    return env, ref, link, record


def proven(env: LinkEnvironment, before: Any) -> tuple[NamespaceRef, LinkState | None]:
    """The recorded namespace and the link at the recorded ifindex there when it has every
    recorded identity fact (None: that ifindex is free). Raises the namespace's own error
    (``E_NETNS_GONE``, ...) or ``E_IDENTITY_MISMATCH``."""
    ref = NamespaceRef.from_json(before["netns"])
    return ref, prove(env, ref, recorded(before))


def proven_or_refused(env: LinkEnvironment, before: Any) -> tuple[NamespaceRef, LinkState]:
    """:func:`proven` for apply: a missing link is ``E_LINK_CHANGED``."""
    ref, link = proven(env, before)
    if link is None:
        raise ExecutorError("E_LINK_CHANGED", "the captured link is gone from its namespace")
    return ref, link


def proven_for_recovery(env: LinkEnvironment, before: Any) -> tuple[NamespaceRef, LinkState] | None:
    """:func:`proven` for recover: None (the outcome is Uncertain) when the namespace cannot
    be opened, another link holds the ifindex or the link is gone."""
    try:
        ref, link = proven(env, before)
    except HostError:
        return None
    return None if link is None else (ref, link)


def proven_for_undo(
    env: LinkEnvironment, before: Any, effect_id: str
) -> tuple[NamespaceRef, LinkState] | None:
    """:func:`proven` for undo: None when there is nothing left to undo — the namespace is
    destroyed or of an earlier boot (what was configured in it died with it), or the link
    is gone from it (what was configured on it left with it)."""
    try:
        ref, link = proven(env, before)
    except HostError as exc:
        if exc.code not in NAMESPACE_LOST:
            raise
        _log.info("effect=%s event=undo-noop reason=%s", effect_id, exc.code)
        return None
    if link is None:
        _log.warning("effect=%s event=undo-skip reason=link-gone", effect_id)
        return None
    return ref, link


def continued(
    ctx: EffectContext,
    env: LinkEnvironment,
    ref: NamespaceRef,
    link: LinkState,
    extra: dict[str, Observation] | None = None,
) -> Handle:
    """The output handle: the input handle continued on the same link, its observations
    refreshed and ``extra`` added (what this effect's record must keep for undo)."""
    out = link_handle(single(ctx, "interface"), ctx, env, ref, link, frozenset())
    if not extra:
        return out
    return Handle(
        id=out.id,
        type=out.type,
        inventory_id=out.inventory_id,
        scope=out.scope,
        accesses=out.accesses,
        link_type=out.link_type,
        provenance=out.provenance,
        observations={**out.observations, **extra},
    )
