"""Proof that a live link is the one the journal recorded (issue 13, deliverable 1).

A tenant with CAP_NET_ADMIN in its sandbox can rename any link there, set any alias and any
MAC, create links under any name, and move links to namespaces of its own. None of those
can therefore prove ownership. What the tenant cannot write is what the kernel sets:

* the **namespace** a link lives in (recorded as the pin's (dev, inode)) together with the
  link's **ifindex** there — the kernel keeps an ifindex across a namespace move when it is
  free in the target, and a link this driver creates gets an ifindex chosen (randomly, from
  a range the kernel's own allocator does not reach) and journaled *before* it exists;
* the link **kind**, the hardware's **permanent MAC** (IFLA_PERM_ADDRESS) and the **parent
  device** (IFLA_PARENT_DEV_NAME / _BUS_NAME, e.g. the PCI address of a NIC or VF);
* the **lower device** (IFLA_LINK) and, when it lives in the host namespace, the fact that it
  does (a link in a sandbox whose lower is in the host carries the nsid the sandbox gives the
  host; a tenant cannot create a link with a lower in the host).

:func:`record_identity` writes these facts into a before-image; :func:`prove` finds the
link at the recorded ifindex of a namespace and compares every recorded fact. A link that
is absent is reported as absent (the caller decides: a virtual link dies with its
namespace); a link that is present but differs raises ``E_IDENTITY_MISMATCH``, and a record
written before identities were journaled raises ``E_IDENTITY_UNRECORDED`` — in both cases
the runner quarantines the effect and nothing is moved, renamed, reconfigured or deleted.
Names, aliases and MACs are never consulted here: they are hints for finding, not proof.

Limit (stated, not hidden): a virtual link without permanent MAC or parent device whose
lower is in a namespace other than the host or its own (a veth whose peer lives in a third
namespace) is identified by namespace, ifindex, kind and lower ifindex only; a tenant that
moves such a link away and forges all four at the same ifindex is not told apart.
"""

from __future__ import annotations

import secrets
from typing import Any

from dmn.host.errors import HostError
from dmn.host.netns import LinkEnvironment, NamespaceRef
from dmn.host.rtnetlink.links import LinkState, all_links, by_index, one
from dmn.vocabulary.handles import NamespaceIdentity

IDENTITY_KEY = "identity"
CHOSEN_INDEX_BASE = 1 << 28
"""Created links get an ifindex in [2^28, 2^30): the kernel's allocator counts up from 1."""
CHOSEN_INDEX_SPAN = 1 << 29


def _same_ns(a: NamespaceIdentity, b: NamespaceIdentity) -> bool:
    return (a.dev, a.inode) == (b.dev, b.inode)


def lower_namespace(env: LinkEnvironment, ref: NamespaceRef, link: LinkState) -> Any:
    """The identity (JSON) of the namespace ``link``'s lower lives in, when provable: the
    link's own namespace (no nsid) or the host's; None when there is no lower or it is
    elsewhere."""
    if not link.lower:
        return None
    if link.link_netnsid < 0:
        return ref.identity.to_json()
    if not env.is_host(ref) and link.link_netnsid == _host_nsid(env, ref):
        return env.host.identity.to_json()
    return None


def _host_nsid(env: LinkEnvironment, ref: NamespaceRef) -> int:
    return env.reader(ref).nsid_of(env.fd(env.host))


def record_identity(
    env: LinkEnvironment, ref: NamespaceRef, link: LinkState, *, index: int | None = None
) -> dict[str, Any]:
    """The identity of ``link`` as it lives in ``ref`` (``index``: one chosen before the
    link exists), for a before-image."""
    return {
        "netns": ref.identity.to_json(),
        "index": link.index if index is None else index,
        "kind": link.kind,
        "permMac": link.perm_mac.lower(),
        "parentDev": link.parent_dev,
        "parentBus": link.parent_bus,
        "lower": link.lower,
        "lowerNetns": lower_namespace(env, ref, link),
    }


def planned_identity(
    ref: NamespaceRef, kind: str, index: int, lower: int, lower_netns: Any
) -> dict[str, Any]:
    """The identity a link this effect is about to create will have."""
    return {
        "netns": ref.identity.to_json(),
        "index": index,
        "kind": kind,
        "permMac": "",
        "parentDev": "",
        "parentBus": "",
        "lower": lower,
        "lowerNetns": lower_netns,
    }


def relocated(identity: dict[str, Any], ref: NamespaceRef, index: int) -> dict[str, Any]:
    """The same link's identity after a move into ``ref`` at ``index``."""
    return {**identity, "netns": ref.identity.to_json(), "index": index}


def recorded(before: Any, key: str = IDENTITY_KEY) -> dict[str, Any]:
    """The identity a before-image recorded; ``E_IDENTITY_UNRECORDED`` for a record written
    before identities were journaled (it is quarantined, never guessed)."""
    found = before.get(key) if isinstance(before, dict) else None
    if not isinstance(found, dict) or "index" not in found:
        raise HostError(
            "E_IDENTITY_UNRECORDED",
            "the journal record predates recorded link identities; ownership cannot be proven",
        )
    return found


def choose_index(env: LinkEnvironment, ref: NamespaceRef) -> int:
    """A random ifindex free in ``ref`` now, journaled before the link is created with it."""
    ipr = env.rtnl(ref)
    for _ in range(8):
        index = CHOSEN_INDEX_BASE + secrets.randbelow(CHOSEN_INDEX_SPAN)
        if by_index(ipr, index) is None:
            return index
    raise HostError("E_IFINDEX_TAKEN", "no free ifindex found for a new link")


def mismatch(
    env: LinkEnvironment, ref: NamespaceRef, identity: dict[str, Any], link: LinkState
) -> str:
    """Empty when ``link`` (found in ``ref``) has every recorded kernel-set fact, else the
    first that differs."""
    if link.index != int(identity["index"]):
        return f"ifindex {link.index} != {identity['index']}"
    if link.kind != str(identity.get("kind", "")):
        return f"kind {link.kind or 'device'!r} != {identity.get('kind') or 'device'!r}"
    perm = str(identity.get("permMac", ""))
    if perm and link.perm_mac.lower() != perm:
        return f"permanent MAC {link.perm_mac or 'none'} != {perm}"
    for key, live in (("parentDev", link.parent_dev), ("parentBus", link.parent_bus)):
        want = str(identity.get(key, ""))
        if want and live != want:
            return f"{key} {live or 'none'} != {want}"
    lower = int(identity.get("lower", 0) or 0)
    if lower:
        if link.lower != lower:
            return f"lower ifindex {link.lower} != {lower}"
        where = identity.get("lowerNetns")
        if where is not None:
            lower_ns = NamespaceIdentity.from_json(where)
            if _same_ns(lower_ns, ref.identity):
                if link.link_netnsid >= 0:
                    return "lower device is in another namespace"
            elif _same_ns(lower_ns, env.host.identity) and (
                env.is_host(ref) or link.link_netnsid != _host_nsid(env, ref)
            ):
                return "lower device is not in the host namespace"
    return ""


def prove(env: LinkEnvironment, ref: NamespaceRef, identity: dict[str, Any]) -> LinkState | None:
    """The link at the recorded ifindex of ``ref`` when it has the recorded identity; None
    when no link holds that ifindex there; ``E_IDENTITY_MISMATCH`` when another link does.

    Raises the namespace's own HostError (``E_NETNS_GONE``, ...) when ``ref`` cannot be
    opened; callers decide what a missing namespace means.
    """
    link = by_index(env.rtnl(ref), int(identity["index"]))
    if link is None:
        return None
    problem = mismatch(env, ref, identity, link)
    if problem:
        raise HostError(
            "E_IDENTITY_MISMATCH",
            f"ifindex {identity['index']} in {ref.path} holds {link.name!r}, "
            f"not the recorded link ({problem}); not touched",
        )
    return link


NAMESPACE_LOST = ("E_NETNS_GONE", "E_NETNS_STALE", "E_NETNS_MISMATCH")
"""Why a recorded namespace cannot be opened any more: destroyed (its pin was unmounted or
the agent's view is of a dead one), of an earlier boot, or its pin path now holds another."""


def of_earlier_boot(env: LinkEnvironment, identity: dict[str, Any]) -> bool:
    """True when ``identity`` was recorded in another boot than the environment's host
    namespace (every namespace, ifindex and virtual link of that boot is gone)."""
    recorded_boot = str((identity.get("netns") or {}).get("bootID", ""))
    current = env.host.identity.boot_id
    return bool(recorded_boot and current and recorded_boot != current)


def has_hardware(identity: dict[str, Any]) -> bool:
    """Whether the identity names hardware that outlives a namespace or a boot."""
    return bool(identity.get("permMac") or identity.get("parentDev"))


def find_hardware(env: LinkEnvironment, identity: dict[str, Any]) -> LinkState | None:
    """The host link with the recorded hardware facts (permanent MAC and/or parent device,
    and kind), wherever its ifindex is now — what a device the kernel gave back to the host
    after a reboot is known by. None when the identity names no hardware or none matches;
    ``E_OWNERSHIP_CONFLICT`` when two links match."""
    if not has_hardware(identity):
        return None
    perm = str(identity.get("permMac", ""))
    parent, bus = str(identity.get("parentDev", "")), str(identity.get("parentBus", ""))
    matches = [
        link
        for link in all_links(env.rtnl(env.host))
        if link.kind == str(identity.get("kind", ""))
        and (not perm or link.perm_mac.lower() == perm)
        and (not parent or link.parent_dev == parent)
        and (not bus or link.parent_bus == bus)
    ]
    return one(matches, f"hardware {perm or parent}")
