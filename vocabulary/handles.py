"""Handles: the only authority a program has over a resource (design §3.1).

The closed sets a handle is described with (type, link type, accesses, scope kind) are
:mod:`dmn.vocabulary.terms`.

A handle names a resource by stable inventory identity and carries its provenance,
scope and the accesses it grants. Names, ifindexes, PCI addresses and paths are
*observations* on a handle, never authority: executors re-resolve and re-verify them.
Handles are immutable values and serialise to canonical JSON so that bound programs
can be digested and journaled.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dmn.vocabulary.terms import Access, HandleType, LinkType, ScopeKind


@dataclass(frozen=True, slots=True)
class NamespaceIdentity:
    """A network namespace by (st_dev, st_ino) of its nsfs inode, plus the boot it lives in."""

    dev: int
    inode: int
    boot_id: str

    def to_json(self) -> dict[str, Any]:
        return {"dev": self.dev, "inode": self.inode, "bootID": self.boot_id}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> NamespaceIdentity:
        return cls(dev=int(data["dev"]), inode=int(data["inode"]), boot_id=str(data["bootID"]))


@dataclass(frozen=True, slots=True)
class Scope:
    kind: ScopeKind
    netns: NamespaceIdentity | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind.value}
        if self.netns is not None:
            out["netns"] = self.netns.to_json()
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Scope:
        netns = data.get("netns")
        return cls(
            kind=ScopeKind(data["kind"]),
            netns=NamespaceIdentity.from_json(netns) if netns is not None else None,
        )


HOST_SCOPE = Scope(ScopeKind.HOST)

_PROVENANCE_KEYS = (
    "claimUID",
    "request",
    "pool",
    "device",
    "shareID",
    "rootStep",
    "operation",
    "effect",
)


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where a handle came from: the allocation that granted it or the effect that made it."""

    claim_uid: str = ""
    request: str = ""
    pool: str = ""
    device: str = ""
    share_id: str = ""
    root_step: str = ""
    operation: str = ""
    effect: str = ""

    def to_json(self) -> dict[str, str]:
        values = (
            self.claim_uid,
            self.request,
            self.pool,
            self.device,
            self.share_id,
            self.root_step,
            self.operation,
            self.effect,
        )
        return {k: v for k, v in zip(_PROVENANCE_KEYS, values, strict=True) if v}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Provenance:
        def g(key: str) -> str:
            return str(data.get(key, ""))

        return cls(
            claim_uid=g("claimUID"),
            request=g("request"),
            pool=g("pool"),
            device=g("device"),
            share_id=g("shareID"),
            root_step=g("rootStep"),
            operation=g("operation"),
            effect=g("effect"),
        )


Observation = str | int | bool

IP_ADDRESSES = "ipAddresses"
"""Observation key of an interface handle an addressing effect continued: the addresses it
added, ``address/prefix`` each in canonical form, space-separated. What the node reports as
the claim's ``networkData.ips`` is read from these recorded outcomes, never from the link (a
tenant can add addresses of its own)."""

CARRIED_HOST_CONFIG = "carriedHostConfig"
"""Observation key of the interface handle ``linux/link-move/v1`` outputs when it carries the
link's host configuration: the addresses and routes it recorded on the host before the move
(canonical JSON of :class:`dmn.host.rtnetlink.carried_config.CarriedConfig`), which
``ip/carried-host-config/v1`` re-creates in the sandbox."""


@dataclass(frozen=True, slots=True)
class Handle:
    """An authority over one resource.

    ``id`` is stable for the life of the grant; ``inventory_id`` is the node inventory's
    identity of the underlying hardware or link (not a BDF or name). ``observations`` holds
    last-seen facts such as ``ifName``, ``ifIndex`` or ``pciAddress`` — hints to find the
    resource, which executors must re-verify before acting.
    """

    id: str
    type: HandleType
    inventory_id: str
    scope: Scope = HOST_SCOPE
    accesses: frozenset[Access] = frozenset()
    link_type: LinkType | None = None
    provenance: Provenance = field(default_factory=Provenance)
    observations: Mapping[str, Observation] = field(default_factory=dict)

    def grants(self, access: Access) -> bool:
        return access in self.accesses

    def with_scope(self, scope: Scope) -> Handle:
        return Handle(
            id=self.id,
            type=self.type,
            inventory_id=self.inventory_id,
            scope=scope,
            accesses=self.accesses,
            link_type=self.link_type,
            provenance=self.provenance,
            observations=dict(self.observations),
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "type": self.type.value,
            "inventoryID": self.inventory_id,
            "scope": self.scope.to_json(),
            "accesses": sorted(a.value for a in self.accesses),
            "provenance": self.provenance.to_json(),
            "observations": dict(sorted(self.observations.items())),
        }
        if self.link_type is not None:
            out["linkType"] = self.link_type.value
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Handle:
        link = data.get("linkType")
        return cls(
            id=str(data["id"]),
            type=HandleType(data["type"]),
            inventory_id=str(data["inventoryID"]),
            scope=Scope.from_json(data.get("scope", {"kind": "host"})),
            accesses=frozenset(Access(a) for a in data.get("accesses", ())),
            link_type=LinkType(link) if link is not None else None,
            provenance=Provenance.from_json(data.get("provenance", {})),
            observations=dict(data.get("observations", {})),
        )
