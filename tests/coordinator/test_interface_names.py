"""Distinct interface names for the claims of one Pod (pure)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from dmn.agent.coordinator.interface_names import distinct_interface_names


def test_the_first_claim_keeps_its_names_later_ones_take_the_next_free() -> None:
    claims = [
        [("net1", {"ifName": "net1"}), ("vlan", {"ifName": "net1.10"})],
        [("net1", {"ifName": "net1"}), ("vlan", {"ifName": "net1.10"})],
        [("net1", {"ifName": "net2"})],  # configured by the topology: never given away
        [("net1", {"ifName": "net1"})],
    ]
    assert distinct_interface_names(claims) == [
        {},
        {"net1": "net3", "vlan": "net1.11"},
        {},
        {"net1": "net4"},
    ]


def test_steps_without_a_name_and_names_that_cannot_grow_are_left_alone() -> None:
    claims = [
        [("dev", {}), ("n", {"ifName": "abcdefghijklmn9"})],
        [("dev", {"mode": "vfio"}), ("n", {"ifName": "abcdefghijklmn9"})],
    ]
    assert distinct_interface_names(claims) == [{}, {}]  # 16 bytes: the connect refuses


names = st.sampled_from(["net1", "net2", "eth0", "net1.10", "bond0", "x"])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(names, max_size=3, unique=True), max_size=5))
def test_names_end_distinct_across_claims_and_deterministic(claims_names: list[list[str]]) -> None:
    claims = [[(f"s{i}", {"ifName": n}) for i, n in enumerate(c)] for c in claims_names]
    renames = distinct_interface_names(claims)
    assert renames == distinct_interface_names(claims)
    final = [
        [renames[k].get(step, cfg["ifName"]) for step, cfg in claim]
        for k, claim in enumerate(claims)
    ]
    flat = [n for claim in final for n in claim]
    assert len(flat) == len(set(flat))
    assert all(len(n) <= 15 for n in flat)
    assert renames[0] == {} if claims else renames == []
