"""Binding keys, shadow names and interface names are deterministic and distinct."""

from __future__ import annotations

import itertools
import re

from dmn.api.multus.names import (
    BindingIdentity,
    assign_interfaces,
    binding_key,
    shadow_name,
)
from dmn.api.multus.template import TemplateRef

DRIVER = "dra-multi-network.schseba.github.io"
SOURCE = TemplateRef("infra", "rail-a")


def ident(claim: str = "c1", request: str = "net", device: str = "dev-a") -> BindingIdentity:
    return BindingIdentity("pod-uid", claim, request, DRIVER, "node-a", device)


def test_key_is_32_hex_and_stable() -> None:
    key = binding_key(ident())
    assert re.fullmatch(r"[0-9a-f]{32}", key)
    assert key == binding_key(ident())
    # a pinned value: changing the serialization renames every live shadow
    assert key == binding_key(BindingIdentity("pod-uid", "c1", "net", DRIVER, "node-a", "dev-a"))


def test_shadow_name_is_a_dns_label_from_identity_and_source() -> None:
    name = shadow_name(ident(), SOURCE)
    assert len(name) <= 63 and re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name)
    assert name == shadow_name(ident(), SOURCE)
    assert name != shadow_name(ident(), TemplateRef("infra", "rail-b"))
    assert name != shadow_name(ident(), TemplateRef("other", "rail-a"))


def test_every_field_changes_key_and_name_and_fields_do_not_run_together() -> None:
    base = ("pod", "claim", "req", DRIVER, "pool", "dev")
    variants = [BindingIdentity(*base)]
    for i in range(len(base)):
        changed = list(base)
        changed[i] += "x"
        variants.append(BindingIdentity(*changed))
    # shifting a character between neighbouring fields must not collide
    variants.append(BindingIdentity("podc", "laim", "req", DRIVER, "pool", "dev"))
    keys = {binding_key(v) for v in variants}
    names = {shadow_name(v, SOURCE) for v in variants}
    assert len(keys) == len(names) == len(variants)


def test_many_bindings_never_share_a_name() -> None:
    identities = [
        ident(f"claim-{c}", f"req-{r}", f"dev-{d}")
        for c, r, d in itertools.product(range(20), range(5), range(20))
    ]
    assert len({shadow_name(i, SOURCE) for i in identities}) == len(identities)
    assert len({binding_key(i) for i in identities}) == len(identities)


def test_interfaces_are_net_n_in_sorted_identity_order_skipping_taken() -> None:
    a, b, c = ident(device="dev-a"), ident(device="dev-b"), ident(claim="c0", device="dev-z")
    assert assign_interfaces([a, b, c], frozenset()) == {c: "net1", a: "net2", b: "net3"}
    assert assign_interfaces([b, c, a], {"net1", "net3"}) == {c: "net2", a: "net4", b: "net5"}


def test_interfaces_do_not_depend_on_input_order_or_repeats() -> None:
    identities = [ident(device=f"dev-{i}") for i in range(12)]
    expected = assign_interfaces(identities, {"net2", "eth0"})
    for perm in (identities[::-1], identities[3:] + identities[:3], identities + identities):
        assert assign_interfaces(perm, {"net2", "eth0"}) == expected
    assert sorted(expected.values(), key=lambda n: int(n[3:]))[-1] == "net13"
    assert "net2" not in expected.values() and len(set(expected.values())) == 12


def test_two_requests_on_one_shared_parent_are_two_bindings() -> None:
    one, two = ident(request="left"), ident(request="right")
    assert shadow_name(one, SOURCE) != shadow_name(two, SOURCE)
    assert set(assign_interfaces([one, two], set()).values()) == {"net1", "net2"}
