"""Proof of ownership for links an effect created (design §8.3).

A link we create is first made under a random *nonce* name journaled in the before-image,
then given the ownership alias ``dmn:<operation>:<effect>``. A link is ours when it carries
that alias, or — in the crash window between creation and aliasing — when it still has the
journaled nonce name, the recorded kind and lower device and no alias. Anything else is
foreign: never adopted, never deleted. This module finds owned links (in one namespace or
every known one), claims them and deletes them.
"""

from __future__ import annotations

from typing import Any

from dmn.host.netns import LinkEnvironment, NamespaceRef
from dmn.host.rtnetlink.links import LinkState, by_name, link_request, owned
from dmn.opcodes.executor import ExecutorError


def find_owned(
    env: LinkEnvironment,
    alias: str,
    nonce: tuple[str, str, int] | None,
    first: NamespaceRef | None = None,
    names: tuple[str, ...] = (),
) -> tuple[NamespaceRef, LinkState] | None:
    """Search known namespaces for the link this effect owns.

    Proof is the alias; or ``nonce = (name, kind, lower)`` for a link left un-aliased by a
    crash right after creation (the nonce name was journaled before the link existed).
    """
    refs = env.known()
    if first is not None:
        refs = [first, *[r for r in refs if r.identity != first.identity]]
    for ref in refs:
        try:
            found = find_owned_in(env, ref, alias, nonce, names)
        except ExecutorError:
            continue  # a pin that is gone or stale cannot hold our link any more
        if found is not None:
            return found
    return None


def find_owned_in(
    env: LinkEnvironment,
    ref: NamespaceRef,
    alias: str,
    nonce: tuple[str, str, int] | None,
    names: tuple[str, ...] = (),
    dump: bool = True,
) -> tuple[NamespaceRef, LinkState] | None:
    """:func:`find_owned` restricted to one namespace (``names``: where to look first).

    Each hinted name is looked up once; a link under it is ours when it carries the alias,
    or when it is the journaled nonce name with the recorded kind and lower and no alias.
    Only then (and only with ``dump``) is the namespace dumped for the alias, which finds
    an owned link someone renamed and refuses two links claiming one alias.
    """
    ipr = env.rtnl(ref)
    nonce_name_, kind, lower = nonce if nonce is not None else ("", "", 0)
    for name in dict.fromkeys(n for n in (*names, nonce_name_) if n):
        cand = by_name(ipr, name)
        if cand is None:
            continue
        if cand.alias == alias:
            return ref, cand
        if (
            name == nonce_name_
            and not cand.alias
            and cand.kind == kind
            and (not lower or cand.lower == lower)
        ):
            return ref, cand
    if not dump:
        return None
    link = owned(ipr, alias)
    return (ref, link) if link is not None else None


def set_alias(ipr: Any, index: int, alias: str) -> None:
    link_request("set alias", ipr, "set", index=index, ifalias=alias)


def delete_owned(env: LinkEnvironment, ref: NamespaceRef, link: LinkState) -> None:
    link_request(f"delete {link.name}", env.rtnl(ref), "del", index=link.index)
