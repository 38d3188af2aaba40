"""Deterministic names of a binding: its key, its shadow NAD, its interface in the Pod.

A binding is one allocated device result of one claim for one Pod. Its identity is the typed
tuple :class:`BindingIdentity`; everything derived from it is a SHA-256 over a versioned,
named-field serialization, so the same binding gets the same names after retries, restarts,
in any callback order, and two different bindings practically never share one (128 bits).
The request is part of the identity because a shared parent (macvlan, ipvlan) can be
allocated to two requests of one claim, each with its own child and its own shadow.

Interfaces are ``net1``, ``net2``, … in the order of the sorted identities, skipping every
name the Pod's other selections already take; the caller persists them with its first plan
and passes those of earlier plans in ``taken``, so a later claim never renames an earlier one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence, Set
from dataclasses import dataclass

from dmn.api.multus.template import TemplateRef

#: Version of the identity serialization; changing it renames every shadow.
IDENTITY_VERSION = 1
SHADOW_PREFIX = "dmn-multus-"
#: Hex digits of the digest in keys and shadow names (128 bits).
DIGEST_HEX = 32
INTERFACE_PREFIX = "net"


@dataclass(frozen=True)
class BindingIdentity:
    """One allocated device result of one claim, for one Pod."""

    pod_uid: str
    claim_uid: str
    request: str
    driver: str
    pool: str
    device: str


def _canonical(identity: BindingIdentity) -> dict[str, object]:
    return {
        "version": IDENTITY_VERSION,
        "podUID": identity.pod_uid,
        "claimUID": identity.claim_uid,
        "request": identity.request,
        "driver": identity.driver,
        "pool": identity.pool,
        "device": identity.device,
    }


def _digest(document: dict[str, object]) -> str:
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def binding_key(identity: BindingIdentity) -> str:
    """32 lowercase hex digits identifying the binding (the ownership registry's key)."""
    return _digest(_canonical(identity))[:DIGEST_HEX]


def shadow_name(identity: BindingIdentity, source: TemplateRef) -> str:
    """The shadow NAD's name: ``dmn-multus-`` and 32 hex digits (a DNS-1123 label, 43 chars).

    Derived from the binding and its source template, so a binding re-planned against
    another template can never adopt the first template's shadow.
    """
    document = _canonical(identity)
    document["source"] = {"namespace": source.namespace, "name": source.name}
    return SHADOW_PREFIX + _digest(document)[:DIGEST_HEX]


def _order(identity: BindingIdentity) -> tuple[str, ...]:
    return (
        identity.pod_uid,
        identity.claim_uid,
        identity.request,
        identity.driver,
        identity.pool,
        identity.device,
    )


def interface_number(name: str) -> int | None:
    """``n`` of a ``net<n>`` name (no leading zero), else None."""
    digits = name[len(INTERFACE_PREFIX) :]
    if not name.startswith(INTERFACE_PREFIX) or not digits.isascii() or not digits.isdigit():
        return None
    if digits != str(int(digits)):
        return None
    return int(digits)


def assign_interfaces(
    identities: Sequence[BindingIdentity], taken: Set[str]
) -> dict[BindingIdentity, str]:
    """``net<n>`` for each distinct identity, lowest free numbers first, in sorted order."""
    result: dict[BindingIdentity, str] = {}
    number = 1
    for identity in sorted(set(identities), key=_order):
        while f"{INTERFACE_PREFIX}{number}" in taken:
            number += 1
        result[identity] = f"{INTERFACE_PREFIX}{number}"
        number += 1
    return result
