"""The allocator's decisions, without I/O: which address to try, and when to refuse.

The API server is the arbiter (an allocation object's create either wins or answers 409); this
module only decides what to ask for, so a busy pool costs one snapshot and a few creates, not
one request per address tried:

* a **dynamic** request walks the pool's dynamic addresses once, starting at a position
  derived from the requester's key (so concurrent requesters start far apart, and the same
  requester retrying after a crash starts where its lost create was) and skipping every
  address the snapshot shows taken — :func:`dynamic_candidates` yields each address at most
  once;
* a **static** request names its address, which must lie in a reserved range of its family's
  subnet (never in a dynamic one, so a static request can never take an address a dynamic
  allocation might be handed) — :func:`static_address`.

Refusals are values with reason codes: ``E_IPAM_FAMILY_MISMATCH`` (the pool has no subnet of
the requested family, or the static address is of the other family),
``E_IPAM_STATIC_OUTSIDE_RESERVED``, and ``E_IPPOOL_EXHAUSTED`` (no dynamic address left).
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from typing import Literal

from dmn.api.ipam.addresses import Family, contains, parse_address, to_int, to_text
from dmn.api.ipam.pool_plan import PoolPlan, SubnetPlan
from dmn.interpreter.diagnostics import Code


@dataclass(frozen=True)
class AddressRequest:
    """One address of ``family``; static when ``address`` names it (from a reserved range)."""

    family: Family
    address: str | None = None

    @property
    def kind(self) -> Literal["Dynamic", "Static"]:
        return "Static" if self.address is not None else "Dynamic"


@dataclass(frozen=True)
class Refusal:
    code: Code
    message: str


def subnet_for(plan: PoolPlan, family: Family) -> SubnetPlan | Refusal:
    subnet = plan.subnets.get(family)
    if subnet is None:
        have = ", ".join(f"IPv{f}" for f in sorted(plan.subnets)) or "none"
        return Refusal(
            Code.E_IPAM_FAMILY_MISMATCH,
            f"IPPool {plan.name} has no IPv{family} subnet (it has {have})",
        )
    return subnet


def static_address(plan: PoolPlan, request: AddressRequest) -> str | Refusal:
    """The canonical text of the requested static address, or why it may not be had."""
    subnet = subnet_for(plan, request.family)
    if isinstance(subnet, Refusal):
        return subnet
    parsed = parse_address(request.address or "")
    if parsed is None or parsed.version != request.family:
        return Refusal(
            Code.E_IPAM_FAMILY_MISMATCH,
            f"static address {request.address!r} is not an IPv{request.family} address",
        )
    if not contains(subnet.static, int(parsed)):
        return Refusal(
            Code.E_IPAM_STATIC_OUTSIDE_RESERVED,
            f"static address {parsed} is outside the reserved ranges of IPPool {plan.name} "
            f"subnet {subnet.cidr}: static addresses come only from reserved ranges",
        )
    return to_text(int(parsed), request.family)


def start_index(key: str, count: int) -> int:
    """Where requester ``key`` starts in a space of ``count`` addresses (stable, uniform)."""
    digest = hashlib.sha256(key.encode()).digest()
    return int.from_bytes(digest[:8], "big") % count if count else 0


def dynamic_candidates(subnet: SubnetPlan, key: str, taken: Collection[str]) -> Iterator[str]:
    """The subnet's dynamic addresses not in ``taken``, each at most once, in the order a
    requester with ``key`` tries them: from :func:`start_index` upwards, wrapping around.

    ``taken`` holds canonical address texts (a snapshot; the create still arbitrates)."""
    starts: list[int] = []
    total = 0
    for first, last in subnet.dynamic:
        starts.append(total)
        total += last - first + 1
    if total == 0:
        return
    held = {v for v in (to_int(t) for t in taken) if v is not None}
    begin = start_index(key, total)
    for step in range(total):
        index = (begin + step) % total
        k = bisect.bisect_right(starts, index) - 1
        value = subnet.dynamic[k][0] + index - starts[k]
        if value not in held:
            yield to_text(value, subnet.family)


def exhausted(subnet: SubnetPlan) -> Refusal:
    return Refusal(
        Code.E_IPPOOL_EXHAUSTED,
        f"no dynamic IPv{subnet.family} address is free in subnet {subnet.cidr}",
    )
