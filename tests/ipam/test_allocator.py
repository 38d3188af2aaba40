"""The pure allocator: address arithmetic, candidate order, static-only ranges, refusals."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmn.api.ipam import addresses
from dmn.api.ipam.allocator import (
    AddressRequest,
    Refusal,
    dynamic_candidates,
    static_address,
    subnet_for,
)
from dmn.api.ipam.pool_plan import PoolPlan, plan_pool
from dmn.interpreter.diagnostics import Code
from tests.ipam.pools import pool, subnet, v4


def planned(doc: dict) -> PoolPlan:  # type: ignore[type-arg]
    plan, diagnostics = plan_pool(doc)
    assert plan is not None, diagnostics
    return plan


DUAL = pool(
    "dual",
    v4(),
    subnet(
        "fd00:56::/64",
        "fd00:56::1",
        [("fd00:56::100", "fd00:56::1ff")],
        [("fd00:56::f000", "fd00:56::f00f")],
    ),
)


def test_plan_counts_dynamic_and_static() -> None:
    plan = planned(DUAL)
    assert addresses.size(plan.subnets[4].dynamic) == 190
    assert addresses.size(plan.subnets[4].static) == 50
    assert addresses.size(plan.subnets[6].dynamic) == 256
    assert addresses.size(plan.subnets[6].static) == 16
    assert plan.size == 190 + 50 + 256 + 16


def test_default_range_is_the_hosts_minus_gateway_reserved_and_exclusions() -> None:
    plan = planned(
        pool(
            "d",
            v4(
                ranges=None,
                reserved=[("10.56.0.200", "10.56.0.209")],
                exclude=[("10.56.0.5", "10.56.0.6")],
            ),
        )
    )
    dyn = plan.subnets[4].dynamic
    ints = {v for lo, hi in dyn for v in range(lo, hi + 1)}
    net = ipaddress.ip_network("10.56.0.0/24")
    assert int(net.network_address) not in ints
    assert int(net.broadcast_address) not in ints
    assert int(ipaddress.ip_address("10.56.0.1")) not in ints  # gateway
    assert int(ipaddress.ip_address("10.56.0.5")) not in ints
    assert int(ipaddress.ip_address("10.56.0.205")) not in ints
    assert len(ints) == 254 - 1 - 2 - 10


@settings(max_examples=200, deadline=None)
@given(
    key=st.text(min_size=1, max_size=40),
    taken_idx=st.sets(st.integers(0, 189), max_size=190),
)
def test_dynamic_candidates_visit_each_free_address_once(key: str, taken_idx: set[int]) -> None:
    """Every free dynamic address exactly once, never a taken, reserved or excluded one."""
    sub = planned(DUAL).subnets[4]
    all_dynamic = [addresses.to_text(v, 4) for lo, hi in sub.dynamic for v in range(lo, hi + 1)]
    taken = {all_dynamic[i] for i in taken_idx}
    seen = list(dynamic_candidates(sub, key, taken))
    assert len(seen) == len(set(seen))
    assert set(seen) == set(all_dynamic) - taken


@settings(max_examples=100, deadline=None)
@given(key=st.text(min_size=1, max_size=40), n=st.integers(0, 255))
def test_dynamic_candidates_ipv6(key: str, n: int) -> None:
    sub = planned(DUAL).subnets[6]
    first = next(dynamic_candidates(sub, key, set()))
    value = int(ipaddress.IPv6Address(first))
    assert 0xFD000056000000000000000000000100 <= value <= 0xFD0000560000000000000000000001FF
    assert len(list(dynamic_candidates(sub, key, set()))) == 256


@settings(max_examples=50, deadline=None)
@given(keys=st.lists(st.text(min_size=1, max_size=20), min_size=2, max_size=60, unique=True))
def test_no_two_owners_get_one_address(keys: list[str]) -> None:
    """Owners that take, in turn, the first candidate not yet held (what the create-arbiter
    enforces) never share an address; the pool is exhausted exactly when all are held."""
    sub = planned(pool("p", v4(ranges=[("10.56.0.10", "10.56.0.39")], reserved=None))).subnets[4]
    held: dict[str, str] = {}
    refused = 0
    for key in keys:
        candidate = next(dynamic_candidates(sub, key, set(held)), None)
        if candidate is None:
            refused += 1
            continue
        assert candidate not in held
        held[candidate] = key
    assert len(held) == min(len(keys), 30)
    assert refused == max(0, len(keys) - 30)


def test_requesters_start_apart() -> None:
    """Different requesters start at different places (a busy pool costs few conflicts)."""
    sub = planned(DUAL).subnets[4]
    starts = {next(dynamic_candidates(sub, f"claim-{i}/op", set())) for i in range(20)}
    assert len(starts) >= 15


def test_static_only_from_reserved() -> None:
    plan = planned(DUAL)
    assert static_address(plan, AddressRequest(4, "10.56.0.200")) == "10.56.0.200"
    assert static_address(plan, AddressRequest(6, "fd00:56:0::f00f")) == "fd00:56::f00f"
    outside = static_address(plan, AddressRequest(4, "10.56.0.50"))
    assert isinstance(outside, Refusal) and outside.code is Code.E_IPAM_STATIC_OUTSIDE_RESERVED
    mismatch = static_address(plan, AddressRequest(4, "fd00:56::f000"))
    assert isinstance(mismatch, Refusal) and mismatch.code is Code.E_IPAM_FAMILY_MISMATCH


def test_static_addresses_are_never_dynamic_candidates() -> None:
    sub = planned(DUAL).subnets[4]
    for address in dynamic_candidates(sub, "k", set()):
        assert not addresses.contains(sub.static, addresses.to_int(address) or 0)


def test_family_mismatch_for_a_single_stack_pool() -> None:
    plan = planned(pool("v4only", v4()))
    refusal = subnet_for(plan, 6)
    assert isinstance(refusal, Refusal) and refusal.code is Code.E_IPAM_FAMILY_MISMATCH


def test_exhausted_pool_has_no_candidate() -> None:
    sub = planned(pool("tiny", v4(ranges=[("10.56.0.10", "10.56.0.11")], reserved=None))).subnets[4]
    assert list(dynamic_candidates(sub, "k", {"10.56.0.10", "10.56.0.11"})) == []


@settings(max_examples=100, deadline=None)
@given(
    pool_name=st.from_regex(r"[a-z0-9]([a-z0-9-]{0,20}[a-z0-9])?", fullmatch=True),
    v4_value=st.integers(0, 2**32 - 1),
    v6_value=st.integers(0, 2**128 - 1),
)
def test_allocation_names_are_dns_safe_and_distinct(
    pool_name: str, v4_value: int, v6_value: int
) -> None:
    a = addresses.allocation_name(pool_name, str(ipaddress.IPv4Address(v4_value)))
    b = addresses.allocation_name(pool_name, str(ipaddress.IPv6Address(v6_value)))
    for name in (a, b):
        assert len(name) <= 253
        # Kubernetes' DNS-1123 subdomain rule: at most 253 characters and the pattern
        # (it bounds no label; an allocation name has no dots)
        assert name[-1].isalnum() and name[0].isalnum()
        assert set(name) <= set("abcdefghijklmnopqrstuvwxyz0123456789-")
    assert a != b


def test_allocation_name_is_injective_across_pool_names() -> None:
    names = {
        addresses.allocation_name(p, a)
        for p, a in [
            ("a-1", "2.3.4.5"),
            ("a", "1.2.3.4"),
            ("a-1-2", "3.4.5.6"),
            ("x-0001-0002-0003-0004", "5.6.7.8"),
            ("x", "1:2:3:4:5:6:7:8"),
            ("x", "::"),
        ]
    }
    assert len(names) == 6
    assert addresses.allocation_name("p", "::") == "p-" + "-".join(["0000"] * 8)


@pytest.mark.parametrize(
    ("intervals", "removed", "expected"),
    [
        ([(0, 10)], [(3, 4)], [(0, 2), (5, 10)]),
        ([(0, 10)], [(0, 10)], []),
        ([(0, 10), (20, 30)], [(5, 25)], [(0, 4), (26, 30)]),
        ([(5, 5)], [], [(5, 5)]),
    ],
)
def test_subtract(
    intervals: list[tuple[int, int]],
    removed: list[tuple[int, int]],
    expected: list[tuple[int, int]],
) -> None:
    assert addresses.subtract(intervals, removed) == expected


def _span(lo: int, hi: int) -> tuple[str, str]:
    return (f"10.56.{lo // 256}.{lo % 256}", f"10.56.{hi // 256}.{hi % 256}")


offsets = st.tuples(st.integers(0, 600), st.integers(0, 600))


@settings(max_examples=300, deadline=None)
@given(
    ranges=st.lists(offsets, max_size=3),
    reserved=st.lists(offsets, max_size=3),
    exclude=st.lists(offsets, max_size=3),
    gateway=st.integers(0, 600),
)
def test_any_pool_is_planned_or_refused_with_a_code(
    ranges: list[tuple[int, int]],
    reserved: list[tuple[int, int]],
    exclude: list[tuple[int, int]],
    gateway: int,
) -> None:
    """A /23 with arbitrary ranges (some outside it, some reversed): either a plan whose
    dynamic and static addresses are disjoint, inside the subnet, clear of exclusions and
    the gateway — or refusals with IPPool reason codes, never an exception."""
    doc = pool(
        "prop",
        subnet(
            "10.56.0.0/23",
            _span(gateway, gateway)[0],
            [_span(*r) for r in ranges] or None,
            [_span(*r) for r in reserved] or None,
            [_span(*r) for r in exclude] or None,
        ),
    )
    plan, diagnostics = plan_pool(doc)
    if plan is None:
        assert diagnostics
        assert all(d.code.value.startswith("E_IPPOOL_") for d in diagnostics), diagnostics
        return
    sub = plan.subnets[4]
    dynamic = {v for lo, hi in sub.dynamic for v in range(lo, hi + 1)}
    static = {v for lo, hi in sub.static for v in range(lo, hi + 1)}
    base = int(ipaddress.IPv4Address("10.56.0.0"))
    excluded = {base + v for lo, hi in exclude for v in range(lo, hi + 1)}
    assert not dynamic & static
    assert not (dynamic | static) & excluded
    assert base + gateway not in dynamic | static
    assert all(base <= v < base + 512 for v in dynamic | static)
    assert plan.size == len(dynamic) + len(static)
