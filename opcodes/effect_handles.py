"""How a ``linux/*`` executor reads its effect: the link environment, its input handles
(found again by alias or hints), and the interface handles it outputs.

Shared by every ``linux/*`` executor (and the ``share/*`` family); pure lookups over
rtnetlink reads, no link is changed here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dmn.host.netns import LinkEnvironment, NamespaceRef
from dmn.host.rtnetlink.links import LinkState, locate_hinted, owned
from dmn.host.rtnetlink.representor import RepresentorIdentity, locate
from dmn.opcodes.executor import EffectContext, ExecutorError
from dmn.vocabulary.handles import Handle, Provenance
from dmn.vocabulary.terms import Access, HandleType, LinkType, ScopeKind

Outputs = Mapping[str, tuple[Handle, ...]]


def environment(ctx: EffectContext) -> LinkEnvironment:
    if not isinstance(ctx.env, LinkEnvironment):
        raise ExecutorError("E_ENV", "linux executors need a LinkEnvironment in ctx.env")
    return ctx.env


def single(ctx: EffectContext, port: str) -> Handle:
    handles = ctx.inputs.get(port, ())
    if len(handles) != 1:
        raise ExecutorError("E_PORT", f"input {port!r} needs exactly one handle")
    return handles[0]


def locate_input(env: LinkEnvironment, handle: Handle) -> tuple[NamespaceRef, LinkState]:
    """Find a handle's link in the namespace its scope names, re-verifying the hints."""
    ref = env.ref_for_scope(handle.scope)
    ipr = env.rtnl(ref)
    alias = str(handle.observations.get("alias", "") or "")
    hint = str(handle.observations.get("ifName", "") or "")
    link = owned(ipr, alias, (hint,)) if alias else None
    if link is None:
        link = locate_hinted(ipr, handle.observations)
    if link is None:
        raise ExecutorError(
            "E_LINK_NOT_FOUND",
            f"handle {handle.id}: no link matching {dict(handle.observations)} in {ref.path}",
        )
    return ref, link


def link_handle(
    base: Handle | None,
    ctx: EffectContext,
    env: LinkEnvironment,
    ref: NamespaceRef,
    link: LinkState,
    grants: frozenset[Access],
) -> Handle:
    """The output handle for a link: a continued input handle, or a new one for a created link."""
    observations: dict[str, str | int | bool] = {
        "ifName": link.name,
        "ifIndex": link.index,
        "alias": link.alias,
        "mac": link.mac,
    }
    if base is not None:
        return Handle(
            id=base.id,
            type=base.type,
            inventory_id=base.inventory_id,
            scope=env.scope_of(ref),
            accesses=base.accesses,
            link_type=base.link_type,
            provenance=base.provenance,
            observations=observations,
        )
    return Handle(
        id=f"{ctx.operation_id}/{ctx.effect_id}/interface",
        type=HandleType.KERNEL_INTERFACE,
        inventory_id=f"link:{ctx.alias}",
        scope=env.scope_of(ref),
        accesses=grants,
        link_type=LinkType.ETHERNET,
        provenance=Provenance(operation=ctx.operation_id, effect=ctx.effect_id),
        observations=observations,
    )


def host_rtnl(ctx: EffectContext) -> Any:
    """The rtnetlink handle of the effect's host namespace."""
    env = environment(ctx)
    return env.rtnl(env.host)


def representor_input(ctx: EffectContext) -> tuple[Handle, RepresentorIdentity, LinkState]:
    """The input representor handle (host scope) and the link it is, verified (shared by the
    representor, bridge and OVS families)."""
    handle = single(ctx, "representor")
    if handle.scope.kind is not ScopeKind.HOST:
        raise ExecutorError("E_SCOPE", f"representor {handle.id} is not in the host namespace")
    identity, link = locate(host_rtnl(ctx), handle)
    return handle, identity, link
